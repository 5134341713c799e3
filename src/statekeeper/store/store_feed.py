"""The store's change feed: subscriptions, its bounds, trimming it, and the intents
a delete or forget left (the feed itself is :mod:`.feed`).

Methods of :class:`~.store.StateStore`, written here as functions and bound in its class
body (as :func:`.copies.public_copy` is in :class:`~.reads.ReadPath`; a subclass
overrides them as any method). They take ``self: StateStore``: they hand the store to
the tools typed for it. A function here never shares its name with a global it calls
(``tests/store/test_store_parts.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from ..arguments import check_agent_id, check_seq
from ..errors import InvalidArgument
from . import feed_intent_repair
from .feed import FeedAccess, Subscription, store_feed_cursor_bounds, trim_feed_through
from .feed_cursor import FeedBounds, FeedCursor
from .feed_intent_repair import FeedIntent, SettledIntent

if TYPE_CHECKING:
    from .store import StateStore

__all__ = [
    "feed_bounds",
    "feed_cursor_bounds",
    "feed_intents",
    "settle_feed_intents",
    "subscribe",
    "trim_feed",
]


def subscribe(
    self: StateStore,
    from_position: int | FeedCursor | str = 0,
    *,
    namespace: str | None = None,
    agent_prefix: str | None = None,
    event_types: Iterable[str] | None = None,
    batch_size: int = 256,
    stop_at_head: bool = False,
) -> Subscription:
    """The change feed: every event of the store after ``from_position``, in the
    order the appends committed, as :class:`~statekeeper.records.FeedEvent` s —
    catch-up from storage, then live (see :mod:`.feed` and ``docs/feed.md``).

    ``namespace`` keeps agents ``"<namespace>/..."``, ``agent_prefix`` agents whose
    id starts with it, ``event_types`` events of those types. The subscription's
    ``cursor`` (or on a store with one feed its ``position``) is where to resume.
    On a sharded store (Redis ``shards=N``) the feed is followed per shard and the
    resume point is a :class:`~statekeeper.store.feed_cursor.FeedCursor` (one
    position per shard; ``str()`` of it is a stable form ``from_position`` takes).
    Raises :class:`~statekeeper.errors.FeedPositionCompacted` for a trimmed position,
    :class:`~statekeeper.errors.FeedCursorMismatch` for a cursor of another number
    of shards and :class:`~statekeeper.errors.CapabilityUnsupported` on an engine
    without a feed.
    """
    self._check_open()
    return Subscription(
        self,
        from_position,
        namespace=namespace,
        agent_prefix=agent_prefix,
        event_types=event_types,
        batch_size=batch_size,
        stop_at_head=stop_at_head,
        access=self._feed_access(from_position, namespace, agent_prefix),
    )


def _feed_access(
    self: StateStore,
    from_position: int | FeedCursor | str,
    namespace: str | None,
    agent_prefix: str | None,
) -> FeedAccess | None:
    """Who may see what on a subscription (None: everything; a store opened as a
    principal filters by its policy)."""
    return None


async def feed_bounds(self: StateStore) -> tuple[int, int]:
    """``(floor, head)`` of the change feed: positions ``<= floor`` were trimmed,
    ``head`` is the newest committed position. A sharded store has one pair per
    shard: use :meth:`feed_cursor_bounds` there (this raises
    :class:`~statekeeper.errors.CapabilityUnsupported` naming it)."""
    await self._ready()
    return await self.backend.feed_bounds()


async def feed_cursor_bounds(self: StateStore) -> FeedBounds:
    """The change feed's ``(floor, head)`` as two
    :class:`~statekeeper.store.feed_cursor.FeedCursor` s, one position per shard
    (any store with a feed; a store with one feed gives one-position cursors).
    ``floor.positions[k]`` was trimmed away in shard ``k``; ``head.positions[k]``
    is its newest committed position."""
    return await store_feed_cursor_bounds(self)


async def trim_feed(self: StateStore, through: int | FeedCursor | str) -> int:
    """Forget change-feed positions ``<= through`` (the events stay readable per
    agent); subscribers behind it get
    :class:`~statekeeper.errors.FeedPositionCompacted`. Returns how many feed
    records were dropped.

    ``through`` is a position (a store with one feed) or a
    :class:`~statekeeper.store.feed_cursor.FeedCursor` / its string form (any store;
    a sharded one needs it): each shard is trimmed through its position in the
    cursor — a subscription's ``cursor``, what every consumer has passed
    (``FeedCursor.earliest``, ``ProjectionRunner.consumed()``), or one shard alone
    (``FeedCursor.start(n).advanced(k, position)``). A cursor position beyond its
    shard's head (an int one too) is :class:`~statekeeper.errors.InvalidArgument`,
    nothing trimmed."""
    if not isinstance(through, (FeedCursor, str)):
        check_seq(through, "through")
    # one path for ints and cursors: a position beyond the head is refused there (a
    # floor above the head would hide every event still to be written)
    return await trim_feed_through(self, through)


async def feed_intents(self: StateStore) -> list[FeedIntent]:
    """Every feed intent a delete or forget left (its agent, owner, age, and why it
    is kept: :mod:`~statekeeper.store.feed_intent_repair`); nothing is written."""
    self._check_open()
    await self._ready()
    return await feed_intent_repair.feed_intents(self.backend, self.codec)


async def settle_feed_intents(
    self: StateStore,
    agent_ids: Collection[str] | None = None,
    *,
    older_than: float | None = None,
    force: bool = False,
) -> list[SettledIntent]:
    """Settle the feed intents of ``agent_ids`` and (or) older than ``older_than``
    seconds as their owner's end would (the agent deleted: its tombstone, once;
    intact: the intent dropped); one whose owner runs on this host is refused
    unless ``force``. For intents no process can prove dead (an earlier version's,
    another host's): ``verify`` names them."""
    self._check_open()
    if agent_ids is not None:
        if isinstance(agent_ids, str) or not isinstance(agent_ids, Iterable):
            raise InvalidArgument(
                "agent_ids", f"agent_ids must be a list of agent ids, not {agent_ids!r}"
            )
        agent_ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
    await self._ready(write=True)
    return await feed_intent_repair.settle_intents(
        self.backend, self.codec, agent_ids, older_than=older_than, force=force
    )
