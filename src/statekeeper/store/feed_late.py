"""A late tombstone, told apart where it is handed out: one appended while the agent it
names had events stored again, which ends no incarnation a consumer holds.

On an engine that commits no two streams together (Redis Cluster, tiered, S3; any with
``appends_together`` off) a delete's tombstone follows it in a write of its own, after a
read of the agent's head (:func:`~.feed_deletes.record_unless_created`); ``import`` and a
tenant's restore append theirs after reading the page's agents again
(:func:`~.feed_deletes.record_restored`). An agent another process creates between that
read and the append gets the tombstone after its events: handed out, it made every
subscriber and projection drop the live agent, no error.

Such a tombstone is recognised by the agent's stored stream, when it is handed out: the
agent has events and the first of them is at a feed position before the tombstone's.
That stream then began before the tombstone and is stored still, so the tombstone did not
end it (a delete takes every event of the stream it ends out of the feed; the tombstone
of a correct delete precedes the first event of any later stream of the id). The
subscription passes over it as over a filtered record (its cursor moves past it). A
consumer then keeps what it derived from the deleted stream's events beside the live
one's, as after a delete whose tombstone was not appended (an intent left
``recreated``, :mod:`.feed_intent_repair`): a projection of each agent's latest state
holds the live agent; one that counts or sums events may hold the deleted one's share
too.

A forget's tombstone is always handed out (the forgotten agent's events stay, unreadable).
Where the engine cannot say the position of the agent's first stored event
(:meth:`~statekeeper.backends.base.Backend.feed_position` None: S3, a position trimmed
away, an event not yet written to a tiered store's durable tier) the tombstone is handed
out, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AccessDenied, StatekeeperError
from ..records import FeedEvent, FeedRecord
from .feed_deletes import head_or_lost, is_tombstone_stream, tombstone_of

if TYPE_CHECKING:
    from .feed import FeedAccess
    from .store import StateStore

__all__ = ["Tombstones"]


class Tombstones:
    """A subscription's tombstones: each of a page read opened once (:meth:`check`),
    the late ones not handed out (:meth:`event`)."""

    def __init__(self) -> None:
        #: ``(shard, position)`` of every late tombstone met (few: kept)
        self._late: set[tuple[int, int]] = set()
        #: the events of the tombstones of the pages buffered, by ``(shard, position)``
        self._opened: dict[tuple[int, int], FeedEvent | None] = {}

    async def check(
        self,
        store: StateStore,
        page: list[FeedRecord],
        shard: int,
        types: frozenset[str] | None,
        prefixes: tuple[str, ...],
        access: FeedAccess | None,
    ) -> None:
        """Open the tombstones of ``page`` (read after the buffer of ``shard`` ran out)
        the subscription (``types``, ``prefixes``, ``access``) hands out, and tell the
        late ones. One that does not open is left to :meth:`event` (which raises)."""
        self._opened = {key: e for key, e in self._opened.items() if key[0] != shard}
        handed: list[tuple[int, str]] = []
        for record in page:
            if not is_tombstone_stream(record.agent_id):
                continue
            try:
                deleted = tombstone_of(store, record, shard, types, prefixes, access)
            except StatekeeperError:
                continue
            self._opened[(shard, record.position)] = deleted
            if deleted is not None and not deleted.event.info.get("forgotten"):
                handed.append((record.position, deleted.agent_id))
        for position in await _late_among(store, handed):
            self._late.add((shard, position))

    def event(
        self,
        store: StateStore,
        record: FeedRecord,
        shard: int,
        types: frozenset[str] | None,
        prefixes: tuple[str, ...],
        access: FeedAccess | None,
    ) -> FeedEvent | None:
        """What the subscription hands out for the tombstone ``record``: None when it
        is late or filtered out (:func:`~.feed_deletes.tombstone_of`)."""
        key = (shard, record.position)
        if key in self._late:
            return None  # appended while its agent's stored stream lived: ends none of it
        if key in self._opened:
            return self._opened[key]
        return tombstone_of(store, record, shard, types, prefixes, access)


async def _late_among(store: StateStore, handed: list[tuple[int, str]]) -> list[int]:
    """The positions of the tombstones of ``handed`` (``(position, agent_id)``, a page's)
    that are late: their agent's first stored event is at a feed position before them.
    The agents' heads and first events are read in turn (tasks cost more than a head
    read); the first events' positions are asked in ONE
    :meth:`~statekeeper.backends.base.Backend.feed_positions` for the page. Was: one
    :meth:`~statekeeper.backends.base.Backend.feed_position` per agent stored again —
    on SQLite and Redis (no feed index by agent) each a read of the feed back from its
    head to the event, so a replay of a feed with many re-created agents grew with
    their number squared (4,000 deletes, 2,000 re-created: 1.7 s in memory)."""
    backend = store.backend
    firsts: list[tuple[int, str, int]] = []
    for position, agent_id in handed:
        try:
            if not await head_or_lost(backend, agent_id):
                continue  # (the common case: the agent deleted, none since)
            first = await backend.read(agent_id, 0, limit=1)
        except AccessDenied:  # (a role that may not read its stream: handed out, as before)
            continue
        if first:
            firsts.append((position, agent_id, first[0].seq))
    if not firsts:
        return []
    try:
        found = await backend.feed_positions(list(dict.fromkeys((a, seq) for _, a, seq in firsts)))
    except AccessDenied:
        return []
    late = []
    for position, agent_id, seq in firsts:
        at = found.get((agent_id, seq))
        if at is not None and at < position:
            late.append(position)
    return late
