"""The change feed's floor follows retention: events removed by a policy are not a
silent gap.

A subscriber (a projection counting tool calls, say) that is behind when retention
removes events it has not read yet would pass over their positions as gaps and keep a
read model that is silently wrong. So before retention removes an agent's events
(``keep_last`` compacting history, a ``ttl`` purge), it asks the engine the feed
position of the last event it removes (:meth:`~statekeeper.backends.base.Backend.feed_position`)
and trims the feed through it (in the agent's shard on a sharded store), *then* removes
them. A subscriber at or past that position loses nothing; one behind it gets
:class:`~statekeeper.errors.FeedPositionCompacted` (rebuild from snapshots, then
subscribe from the floor), and ``feed_bounds()`` says so. Trimming first is the safe
order: a run interrupted between the two has trimmed a feed whose events are still
there (subscribers behind rebuild needlessly), never removed events under a feed that
still offers their range.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, Capability, KeptKeys
from ..errors import StatekeeperError
from ..records import AppendRequest, AppendResult, RawSnapshot
from .feed import feed_bounds_per_shard, feed_shards
from .feed_cursor import FeedCursor

if TYPE_CHECKING:
    from .store import StateStore

__all__ = [
    "LookedAhead",
    "behind",
    "from_base_floored",
    "has_feed",
    "look_ahead",
    "raised",
    "removed_through",
    "shard_of",
    "trim_below_bases",
    "trim_removed",
]


def has_feed(backend: Backend) -> bool:
    """True when the backend keeps a change feed (one, or one per shard)."""
    if feed_shards(backend) > 1:
        return bool(getattr(backend, "feed", True))
    return backend.supports(Capability.FEED)


def shard_of(backend: Backend, agent_id: str) -> int:
    if feed_shards(backend) == 1:
        return 0
    sharded: Any = backend
    return int(sharded.feed_shard_of(agent_id))


@dataclass(frozen=True, slots=True)
class LookedAhead:
    """Feed positions read in ONE pass (:meth:`~statekeeper.backends.base.Backend.feed_positions`)
    for the events a page of retention actions is about to remove: ``asked``, the
    ``(agent_id, seq)`` pairs looked for; ``found``, those with a position."""

    asked: frozenset[tuple[str, int]]
    found: dict[tuple[str, int], int]


async def look_ahead(store: StateStore, wanted: Iterable[tuple[str, int]]) -> LookedAhead | None:
    """The positions of ``wanted`` looked up at once (on SQLite and Redis, whose feed has
    no index by agent, one pass back from the head instead of one per agent); None when
    the store has no feed, nothing is wanted, or the engine fails (each action then
    looks its own up, and reports its own failure)."""
    backend = store.backend
    pairs = frozenset((a, s) for a, s in wanted if s >= 1)
    if not pairs or not has_feed(backend):
        return None
    try:
        return LookedAhead(pairs, await backend.feed_positions(sorted(pairs)))
    except StatekeeperError:
        return None


async def removed_through(
    store: StateStore, agent_id: str, seq: int, ahead: LookedAhead | None = None
) -> FeedCursor | None:
    """The cursor to trim the feed through before ``agent_id``'s events up to ``seq`` are
    removed: the position of event ``seq`` in the agent's shard (0 in the others);
    None when the store has no feed or the event has no position above the floor.
    ``ahead``: positions looked up beforehand for a page of agents (used when it asked
    for this event)."""
    backend = store.backend
    if seq < 1 or not has_feed(backend):
        return None
    if ahead is not None and (agent_id, seq) in ahead.asked:
        position = ahead.found.get((agent_id, seq))
    else:
        position = await backend.feed_position(agent_id, seq)
    if position is None:
        return None
    return FeedCursor.start(feed_shards(backend)).advanced(shard_of(backend, agent_id), position)


async def trim_removed(store: StateStore, through: FeedCursor) -> None:
    """Raise each shard's floor to its position in ``through`` (left alone where the
    floor is there already). No check against the head: every position here was read
    from a stored event (on PostgreSQL the safe frontier may lag it while appends are
    in flight)."""
    backend = store.backend
    bounds = await feed_bounds_per_shard(backend)
    todo = [
        (k, p) for k, ((floor, _), p) in enumerate(zip(bounds, through.positions, strict=True))
        if p > floor
    ]  # fmt: skip
    if feed_shards(backend) == 1:
        for _, p in todo:
            await backend.trim_feed(p)
        return
    sharded: Any = backend
    for k, p in todo:
        await sharded.trim_shard_feed(k, p)


def raised(
    floor: FeedCursor | None, backend: Backend, agent_id: str, position: int
) -> FeedCursor | None:
    """``floor`` raised to ``position`` in ``agent_id``'s shard (a report's running
    maximum of what retention trimmed)."""
    if position < 1:
        return floor
    n = feed_shards(backend)
    at = list(floor.positions if floor is not None else FeedCursor.start(n).positions)
    k = shard_of(backend, agent_id)
    at[k] = max(at[k], position)
    return FeedCursor(tuple(at))


def behind(consumers: dict[str, FeedCursor], through: FeedCursor) -> list[str]:
    """The names of ``consumers`` (name -> the cursor it resumes from) that have not
    read up to ``through`` in some shard: they lose events when the feed is trimmed
    there."""
    return sorted(
        name
        for name, at in consumers.items()
        if len(at.positions) == len(through.positions)
        and any(a < t for a, t in zip(at.positions, through.positions, strict=True))
    )


async def trim_below_bases(store: StateStore, bases: dict[str, int]) -> FeedCursor | None:
    """Raise the feed's floor over compacted streams a restore or an import wrote.

    A stream written from its base (retention compacted it at the source) enters the
    target's feed at its first event after the base: a subscriber reading from position
    0 would fold that agent's events onto nothing and count none of its history (a
    projection rebuilt on the target silently differing from the source's live one).
    The source's retention trimmed its feed over those events; here the floor goes
    through the position of each such agent's first written event (``bases``: agent id
    -> base seq), so a subscriber from 0 gets ``FeedPositionCompacted`` and rebuilds from
    the states, as on the source. Returns the cursor trimmed through (None: nothing)."""
    backend = store.backend
    wanted = [(a, base + 1) for a, base in sorted(bases.items()) if base >= 1]
    ahead = await look_ahead(store, wanted)
    if ahead is None:
        return None
    floor: FeedCursor | None = None
    for (agent_id, _), position in sorted(ahead.found.items()):
        floor = raised(floor, backend, agent_id, position)
    if floor is not None:
        await trim_removed(store, floor)
    return floor


async def from_base_floored(
    backend: Backend,
    request: AppendRequest,
    base: RawSnapshot,
    kept: KeptKeys = (),
    *,
    raise_floor: bool,
) -> AppendResult:
    """``backend.append_from_base`` for a restore or an import: with ``raise_floor``
    (a store admin's write, on an engine with a feed) the feed's floor goes through the
    stream's first event IN the same atomic write. :func:`trim_below_bases` after the
    writes stays (the agents an earlier run left, an engine written before the
    argument), but alone it left a window: a subscriber reading the feed between the
    write and the trim folded the kept events onto nothing and moved past the floor,
    never told (``FeedPositionCompacted`` only meets a cursor below it)."""
    if raise_floor and has_feed(backend) and _takes_floor(type(backend)):
        return await backend.append_from_base(request, base, kept, raise_floor=True)
    if kept:
        return await backend.append_from_base(request, base, kept)
    return await backend.append_from_base(request, base)  # (engines before kept_keys)


def _takes_floor(engine: type[Backend]) -> bool:
    """Whether an engine's ``append_from_base`` takes ``raise_floor`` (one written
    before it does not: the trim after the writes is all it gets)."""
    taken = _TAKES.get(engine)
    if taken is None:
        taken = _TAKES[engine] = (
            "raise_floor" in inspect.signature(engine.append_from_base).parameters
        )
    return taken


_TAKES: dict[type[Backend], bool] = {}
