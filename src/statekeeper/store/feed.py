"""``store.subscribe(...)``: the change feed as an async iterator of verified events.

(Over 600 lines because the catch-up, the live wait and the shard merge share one
cursor state; split, each part would reach into the others'.)

One loop serves both phases. The subscription reads the backend's feed after its
cursor, a page at a time (:meth:`~statekeeper.backends.base.Backend.read_feed`); when a
page comes back empty it is *live* and waits for a wake-up
(:meth:`~statekeeper.backends.base.Backend.wait_feed`: a PostgreSQL notification, a
Redis stream entry, a SQLite poll) and reads again. Catch-up and live are the same
query from the same cursor, so nothing can fall between them or be read twice; the
backend never returns a position beyond its safe frontier, so a position that commits
late (PostgreSQL) is not skipped.

Back-pressure: the subscription pulls. It reads the next page only when the consumer
has taken every event of the last one, so a slow consumer holds at most one page in
memory and the writers never wait for it.

Filters (``namespace``, ``agent_prefix``, ``event_types``) are applied to the stored
agent id and kind before anything is decrypted; filtered-out positions still move the
cursor (:attr:`Subscription.position`), so resuming from it never re-reads them.
A delete or forget is a tombstone (``FeedEvent.deleted``, :mod:`.feed_deletes`),
filtered on the agent it names; ``event_types`` must name its type to keep it; one
appended while its agent's stored stream lived is passed over (:mod:`.feed_late`). On a
store opened as a principal, the policy is one more such filter (:class:`FeedAccess`):
the events of agents the principal may not read are passed over the same way.
statekeeper's own streams (ids starting ``"\x01"``: the audit log) are never delivered,
as they are never listed: the audit log is read with ``statekeeper audit``.

A sharded store (Redis with ``shards=N > 1``, what a Redis Cluster uses) has one feed
per shard, each with its own positions. The subscription follows all N: it keeps one
cursor position per shard (:class:`~.feed_cursor.FeedCursor`, :attr:`Subscription.cursor`),
reads the shards' next pages (a page split between the shards: back-pressure still holds
one page) and hands out their events merged by commit timestamp. Per-agent order holds
(an agent lives in one shard, whose feed is in its commit order) and resuming from the
cursor gives no gap and no duplicate in any shard; there is **no total order between
shards** — two events of different shards may come in either order, and the timestamp
merge is a courtesy, not a promise. Live, it polls the N shards' heads in one pipeline
(``feed_poll_interval``, 50 ms by default) instead of blocking: a blocking ``XREAD``
cannot name keys of two hash slots, so a blocking wait would hold one connection per
shard per subscriber out of the pool; the poll holds one per node for one round trip.

Every event is verified (checksum or AEAD tag) as on a load; a damaged one raises
:class:`~statekeeper.errors.IntegrityError`. The per-agent hash chain is checked by
loads and ``verify``, not here: the feed interleaves agents. The events of a
crypto-shredded agent (``forget``: its data key destroyed) are skipped like a deleted
agent's: they can never be read again, and the feed must not stall on them.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from .. import namespaces
from ..backends.base import Capability
from ..errors import (
    AgentForgotten,
    CapabilityUnsupported,
    FeedChanged,
    FeedNotReplicated,
    FeedPositionCompacted,
    FeedRewound,
    InvalidArgument,
)
from ..records import FeedEvent, FeedRecord
from .body import to_event
from .feed_bounds import (
    _committed,
    _handed_out,
    _sharded,
    check_within,
    feed_bounds_per_shard,
    feed_shards,
    lags_commits,
    store_feed_bounds,
    store_feed_cursor_bounds,
    trim_feed_through,
)
from .feed_cursor import FeedBounds, FeedCursor, as_cursor, check_count, check_feed, event_mark
from .feed_deletes import is_tombstone_stream
from .feed_late import Tombstones

if TYPE_CHECKING:
    from .store import StateStore

__all__ = [
    "FeedAccess",
    "FeedBounds",
    "FeedCursor",
    "Subscription",
    "feed_bounds_per_shard",
    "feed_shards",
    "namespace_prefix",
    "store_feed_bounds",
    "store_feed_cursor_bounds",
    "trim_feed_through",
]

#: the longest a live subscription waits before it reads the feed again, wake-up or not
LIVE_WAIT = 1.0


def namespace_prefix(namespace: str) -> str:
    """The agent-id prefix a feed filter on ``namespace`` selects: its agents and those
    of the namespaces below it (:mod:`statekeeper.namespaces`; the root ``""`` is
    refused here: a subscription without ``namespace=`` is the whole feed)."""
    if not isinstance(namespace, str) or not namespace or "" in namespace.split("/"):
        raise InvalidArgument(
            "namespace",
            f"a namespace is '/'-separated non-empty parts (no leading, trailing or"
            f" double '/'), not {namespace!r:.60}",
        )
    return namespaces.namespace_prefix(namespace)


class FeedAccess(Protocol):
    """Who may see what on a subscription of a store opened as a principal
    (:meth:`statekeeper.store.governed.GovernedStateStore.subscribe`)."""

    async def admit(self) -> None:
        """Raise :class:`~statekeeper.errors.AccessDenied` (audited) when the
        subscription may not start; called once, before the first read."""
        ...

    def readable(self, agent_id: str) -> bool:
        """True when the subscriber may read ``agent_id``'s events (asked per event,
        so a policy changed while the subscription runs applies from then on)."""
        ...


#: what a batch took off the pages: (shard, position before, record, mark before)
Undo = list[tuple[int, int, FeedRecord, int | None]]


class Subscription(AsyncIterator[FeedEvent]):
    """The events of the store in feed order, from after ``from_position``: catch-up from
    storage, then live. Iterate with ``async for``; :attr:`cursor` (any store) or
    :attr:`position` (a store with one feed) is the resume point: the last position
    delivered or filtered out.

    ``from_position`` is ``0`` (the start), a :class:`~.feed_cursor.FeedCursor` or its
    string form, or on a store with one feed the int position, as always.

    With ``stop_at_head`` the iteration ends once it has passed the feed's head as it
    was when the subscription started (a catch-up only: rebuilds, reports, tests):
    every event committed before the start is delivered, on PostgreSQL too while other
    appends are in flight (the catch-up then waits for those below the head to end).

    Raises :class:`~statekeeper.errors.FeedPositionCompacted` when ``from_position`` (or
    the cursor, after a concurrent trim) lies below the feed's floor (of a shard),
    :class:`~statekeeper.errors.FeedCursorMismatch` for a cursor of another number of
    shards, ``FeedChanged`` for one of another feed (a restore, another store) and
    :class:`~statekeeper.errors.CapabilityUnsupported` on an engine without a feed.
    """

    def __init__(
        self,
        store: StateStore,
        from_position: int | FeedCursor | str = 0,
        *,
        namespace: str | None = None,
        agent_prefix: str | None = None,
        event_types: Iterable[str] | None = None,
        batch_size: int = 256,
        stop_at_head: bool = False,
        access: FeedAccess | None = None,
    ) -> None:
        check_count("batch_size", batch_size)
        prefixes: list[str] = []
        if namespace is not None:
            prefixes.append(namespace_prefix(namespace))
        if agent_prefix is not None:
            if not isinstance(agent_prefix, str):
                raise InvalidArgument(
                    "agent_prefix", f"agent_prefix must be a str, not {agent_prefix!r}"
                )
            prefixes.append(agent_prefix)
        wanted: frozenset[str] | None = None
        if event_types is not None:
            if isinstance(event_types, str):
                raise InvalidArgument(
                    "event_types", "event_types is a collection of types, not one str"
                )
            wanted = frozenset(event_types)
            if not all(isinstance(k, str) for k in wanted):
                raise InvalidArgument("event_types", "event_types must be strings")
        backend = store.backend
        shards = feed_shards(backend)
        if shards == 1:
            backend.require(Capability.FEED, "store.subscribe()")
        elif not getattr(backend, "feed", True):
            backend.require(Capability.FEED, "store.subscribe(): opened with feed=False")
        start = as_cursor(from_position, shards)
        self._store = store
        self._access = access
        self._prefixes = tuple(prefixes)
        self._event_types = wanted
        self._batch = batch_size
        self._shards = shards
        self._stop_at_head = stop_at_head
        self._stop: list[int] | None = None
        #: a stop_at_head catch-up on an engine whose head lags commits: an empty read
        #: ends it only once the readable head is at the stop (see _ended)
        self._settles = False
        self._started = False
        #: the last live read found entries the replicas had not confirmed (see _wait)
        self._held = False
        self._pages: list[deque[FeedRecord]] = [deque() for _ in range(shards)]
        self._at: list[int] = list(start.positions)
        #: per shard, the mark of the event at ``_at`` (None: not known): a resume
        #: checks that the position still holds that event (see _check_marks)
        self._marks: list[int | None] = list(start.marks or (None,) * shards)
        #: the shards' heads seen by the last live poll (sharded stores)
        self._seen: list[int] = list(start.positions)
        #: awaited with the cursor before a live wait, when it moved since (on_idle)
        self._idle: Callable[[FeedCursor], Awaitable[None]] | None = None
        self._idle_at: list[int] = list(start.positions)
        self._feed: str | None = start.feed  # the cursor's feed id; the store's once started
        self._tombstones = Tombstones()  # (the late ones not handed out: .feed_late)

    def __aiter__(self) -> Subscription:
        return self

    def on_idle(self, callback: Callable[[FeedCursor], Awaitable[None]]) -> None:
        """Have ``callback(cursor)`` awaited before each live wait once the cursor moved
        since the last call: inside the call asking for more (``anext``,
        :meth:`next_batch`) before it took any event, so each position up to ``cursor``
        was handed over before or passed over (filtered out, a gap) — a resume point
        for a consumer done with what it was handed. A projection runner records it (a
        projection of rare types kept its position at its last event while live)."""
        self._idle = callback

    @property
    def cursor(self) -> FeedCursor:
        """Where to resume (``subscribe(from_position=sub.cursor)``, or its ``str``):
        the last position of each shard delivered or passed over."""
        return FeedCursor(tuple(self._at), self._feed, tuple(self._marks))

    @property
    def position(self) -> int:
        """The last position delivered or passed over, on a store with one feed (a
        sharded store has one per shard: use :attr:`cursor`)."""
        if self._shards != 1:
            raise CapabilityUnsupported(
                type(self._store.backend).__name__,
                "a single feed position",
                f"the store's feed has {self._shards} shards: resume from"
                " Subscription.cursor (a FeedCursor) instead",
            )
        return self._at[0]

    def _wanted(self, record: FeedRecord) -> bool:
        agent_id = record.agent_id
        if agent_id[:1] == "\x01":
            return False  # statekeeper's own streams (the audit log): hidden, as in listings
        if any(not agent_id.startswith(p) for p in self._prefixes):
            return False
        if self._event_types is not None and record.event.type not in self._event_types:
            return False
        return self._access is None or self._access.readable(agent_id)

    def _compacted(self, bounds: list[tuple[int, int]]) -> None:
        for k, (floor, _) in enumerate(bounds):
            if self._at[k] < floor:
                raise FeedPositionCompacted(
                    self._at[k], floor, shard=k if self._shards > 1 else None
                )

    async def _check_floor(self) -> list[tuple[int, int]]:
        bounds = await feed_bounds_per_shard(self._store.backend)
        self._compacted(bounds)
        return bounds

    async def _read(self, shard: int, limit: int) -> list[FeedRecord]:
        """The next page of ``shard`` after the cursor. With the mark of the event at
        the cursor known, the page starts one record earlier, at that event, checked
        and left out (:meth:`_unchanged`): a live subscription (or one read page after
        page) meets a feed that went back under it too, in the same query."""
        at, mark = self._at[shard], self._marks[shard]
        check = mark is not None and at > 0
        page = await self._page(shard, at - 1 if check else at, limit + check)
        if check and page and page[0].position == at:
            self._unchanged(shard, page[0])
            return page[1:]
        return page[:limit]

    async def _page(self, shard: int, after: int, limit: int) -> list[FeedRecord]:
        backend = self._store.backend
        if self._shards == 1:
            page, feed = await backend.read_feed_page(after, limit)
            self._same_feed(feed)
            return page
        return list(await _sharded(backend).read_shard_feed(shard, after, limit))

    def _same_feed(self, feed: str | None) -> None:
        """Raise :class:`FeedChanged` when ``feed``, the store's feed id read with (or
        after) a page, is not the one the subscription follows: a restore renewed it
        (before its first write) and the page may hold positions of the new numbering.
        Checked before anything of the page is taken (was: a live subscription went on
        delivering the restored events, refused only once its cursor was resumed)."""
        if feed is None or feed == self._feed:
            return
        if self._feed is None:  # (a store that had no id yet: its first one)
            self._feed = feed
            return
        raise FeedChanged(
            self._feed,
            feed,
            what="the subscription's cursor",
            remedy="Nothing of the new numbering was delivered; the cursor stays before it."
            " Rebuild what you derived from the events (statekeeper projections rebuild"
            " NAME) and subscribe again from position 0 of this store (or its floor:"
            " since_floor)",
        )

    def _unchanged(self, shard: int, record: FeedRecord) -> None:
        """Raise :class:`FeedRewound` when ``record``, read at the cursor's position of
        ``shard``, is not the event the cursor passed there."""
        if (
            event_mark(record.agent_id, record.event.seq, record.event.timestamp)
            != (self._marks[shard])
        ):
            where = shard if self._shards > 1 else None
            raise FeedRewound(self._feed or "-", record.position, where)

    async def _fill(self) -> bool:
        """Read the next page into the buffers (each shard whose buffer is empty gets
        its share of the page); False when there is none yet."""
        want = [
            k
            for k in range(self._shards)
            if not self._pages[k] and (self._stop is None or self._at[k] < self._stop[k])
        ]
        if not want:
            return False
        limit = max(1, -(-self._batch // len(want)))
        if len(want) == 1:
            pages: list[list[FeedRecord] | BaseException] = [await self._read(want[0], limit)]
        else:
            pages = list(
                await asyncio.gather(*(self._read(k, limit) for k in want), return_exceptions=True)
            )
        if self._shards > 1 and any(isinstance(p, list) and p for p in pages):
            # one feed id for every shard, in the meta hash (another hash slot): read
            # after the pages, so a page of a renewed feed meets the new id
            self._same_feed(await self._store.backend.feed_id())
        gap = False
        got = False
        held: FeedNotReplicated | None = None
        for k, page in zip(want, pages, strict=True):
            if isinstance(page, FeedNotReplicated):
                held = held or page  # that shard only: the others' pages still count
                continue
            if isinstance(page, BaseException):
                raise page
            if page and page[0].position > self._at[k] + 1:
                gap = True
            if self._stop is not None:
                page = [r for r in page if r.position <= self._stop[k]]
            filters = (self._event_types, self._prefixes, self._access)
            await self._tombstones.check(self._store, page, k, *filters)
            self._pages[k].extend(page)
            got = got or bool(page)
        if gap:
            await self._check_floor()  # a gap: normal, unless it is a trimmed range
        if held is not None and not got:
            raise held
        return got

    async def _fill_live(self) -> bool:
        """:meth:`_fill`, where entries the replicas have not confirmed yet
        (:class:`~statekeeper.errors.FeedNotReplicated`) are nothing yet: a live
        subscription waits for them; a ``stop_at_head`` catch-up raises it (it ended
        short, without an error, when such a read came back empty)."""
        self._held = False
        try:
            return await self._fill()
        except FeedNotReplicated:
            if self._stop is not None:
                raise
            self._held = True
            return False

    def _next_shard(self) -> int | None:
        """The shard whose buffered record comes next: the oldest commit timestamp (no
        total order between shards: a fair, roughly time-ordered merge)."""
        if self._shards == 1:
            return 0 if self._pages[0] else None
        best: int | None = None
        best_ts = 0.0
        for k, page in enumerate(self._pages):
            if page and (best is None or page[0].event.timestamp < best_ts):
                best, best_ts = k, page[0].event.timestamp
        return best

    def _take(self, undo: Undo | None = None) -> FeedEvent | None:
        """The next wanted event of the buffered page (verified), or None.

        A record that cannot be opened (damaged, its key unavailable) stays first in
        its page with the cursor before it, so the next call meets it again (was:
        taken off the page first, and a consumer that went on after the error was
        handed the event after it, the cursor past the one it never saw). ``undo``
        collects ``(shard, position before, record)`` of every record taken off."""
        store = self._store
        while True:
            k = self._next_shard()
            if k is None:
                return None
            page = self._pages[k]
            record = page[0]
            deleted: FeedEvent | None = None
            body: dict[str, Any] | None = None
            if is_tombstone_stream(record.agent_id):  # a delete: see .feed_deletes
                types, prefixes, access = self._event_types, self._prefixes, self._access
                deleted = self._tombstones.event(store, record, k, types, prefixes, access)
            elif self._wanted(record):
                try:
                    body, _ = store._open_event(record.agent_id, record.event)
                except AgentForgotten:
                    # crypto-shredded: unreadable for good, in every copy; a gap, as if
                    # deleted (the feed must not stall on it)
                    body = None
            page.popleft()
            if undo is not None:
                undo.append((k, self._at[k], record, self._marks[k]))
            self._at[k] = record.position
            self._marks[k] = event_mark(record.agent_id, record.event.seq, record.event.timestamp)
            if deleted is not None:
                return deleted
            if body is not None:
                return FeedEvent(record.position, to_event(record.agent_id, record.event, body), k)

    def _undo(self, undo: Undo) -> None:
        """Put the records taken off since ``undo`` began back, the cursor before them."""
        for k, before, record, mark in reversed(undo):
            self._pages[k].appendleft(record)
            self._at[k] = before
            self._marks[k] = mark

    def _done(self) -> bool:
        stop = self._stop
        return stop is not None and all(a >= s for a, s in zip(self._at, stop, strict=True))

    async def _start(self) -> None:
        store = self._store
        store._check_open()
        if self._access is not None:
            await self._access.admit()
        await store._ready()
        # another feed's cursor (restored, re-created store) names other events: refused
        self._feed = check_feed(self.cursor, await store.backend.feed_id())
        bounds = await self._check_floor()
        past = any(p > head for (_, head), p in zip(bounds, self._at, strict=True))
        if past or self._stop_at_head:
            bounds = await _committed(store.backend, bounds)
        reach = bounds
        if any(p > head for (_, head), p in zip(bounds, self._at, strict=True)):
            reach = await _handed_out(store.backend, bounds)
        # a resume point past the head (a store restored from an older backup, another
        # store's cursor) would deliver nothing until the feed got there: the events
        # in between passed over unseen (was: silently)
        check_within(reach, self._at, "from_position", "nothing was delivered")
        await self._check_marks()
        self._stop = [head for _, head in bounds] if self._stop_at_head else None
        self._settles = self._stop_at_head and lags_commits(store.backend)
        self._started = True

    async def _check_marks(self) -> None:
        """Refuse a resume whose cursor's position now holds another event than the one
        it passed (:class:`FeedRewound`): the feed went back — a failover to a replica
        that missed the newest commits keeps the feed's id but gives the lost positions
        out again, and the events stored at them were passed over unseen (was: without
        a word). One read of one record per shard resumed with a mark; a position that
        holds no event (its agent deleted, a gap, trimmed) cannot be checked."""
        for k, (at, mark) in enumerate(zip(self._at, self._marks, strict=True)):
            if mark is None or at < 1:
                continue
            found = await self._page(k, at - 1, 1)
            if found and found[0].position == at:
                self._unchanged(k, found[0])

    async def _ended(self) -> bool | None:
        """After an empty read of a ``stop_at_head`` catch-up: True when nothing more can
        come up to the stop, None when a new page was read, False when appends below
        the stop are still in flight (wait for them: each one commits or rolls back,
        and the safe frontier passes it either way). Where the head lags commits, the
        empty read proves nothing by itself: it went up to the frontier it read, which
        may have been below the stop; only a read after the frontier reached the stop
        does (a head check alone would end the catch-up without an append that committed
        between the read and the check)."""
        if not self._settles:
            return True
        stop = self._stop or []
        bounds = await self._check_floor()
        if any(head < s for (_, head), s in zip(bounds, stop, strict=True)):
            return False
        return None if await self._fill() else True

    async def _wait(self) -> None:
        """Live: until a shard may have something after the cursor (a hint)."""
        backend = self._store.backend
        if self._shards == 1:
            (_, head), *_ = await self._check_floor()
            after = self._at[0]
            held, self._held = self._held, False
            if head > after:
                # positions past the cursor: new, or gaps (the agent of the newest ones
                # deleted) if a read after the head finds nothing, or entries the
                # replicas have not confirmed (held: read just now). Then wait for one
                # past the head: wait_feed returns at once for any past the cursor, and
                # the subscription re-read the gaps without end (on memory and SQLite
                # without ever yielding: the event loop stood still)
                if not held and await self._fill_live():
                    return
                after = head
            await backend.wait_feed(after, LIVE_WAIT)
            return
        deadline = time.monotonic() + LIVE_WAIT
        while True:
            bounds = await self._check_floor()
            heads = [head for _, head in bounds]
            moved = any(h > max(a, s) for h, a, s in zip(heads, self._at, self._seen, strict=True))
            self._seen = heads
            if moved or time.monotonic() >= deadline:
                return
            self._store._check_open()
            await asyncio.sleep(backend.feed_poll_interval)

    async def __anext__(self) -> FeedEvent:
        return await self._next(None)

    async def _next(self, undo: Undo | None) -> FeedEvent:
        if not self._started:
            await self._start()
        while True:
            event = self._take(undo)
            if event is not None:
                return event
            if self._done():
                raise StopAsyncIteration
            self._store._check_open()
            if await self._fill_live():
                continue
            if self._stop is not None:
                ended = await self._ended()
                if ended is None:
                    continue
                if ended:
                    # nothing more up to the head taken at the start (its records were
                    # deleted, or filtered): done
                    raise StopAsyncIteration
            if self._idle is not None and self._at != self._idle_at:
                self._idle_at = list(self._at)
                await self._idle(self.cursor)
            await self._wait()

    async def next_batch(self, limit: int = 256) -> list[FeedEvent]:
        """Up to ``limit`` events: waits (live) until at least one is there, then adds
        what is stored already without waiting again. ``[]`` once a ``stop_at_head``
        subscription is done. What projections apply in one transaction.

        ``limit`` is an int from 1 (else :class:`~statekeeper.errors.InvalidArgument`,
        nothing read: 0, a negative or a str limit returned one event, and a str one
        also hid the read's errors)."""
        check_count("limit", limit)
        undo: Undo = []
        try:
            out = [await self._next(undo)]
        except StopAsyncIteration:
            return []
        try:
            while len(out) < limit:
                event = self._take(undo)
                if event is None:
                    if self._done():
                        break
                    if not await self._fill():
                        break
                    continue
                out.append(event)
        except Exception:
            # these events first (the cursor has passed them: raised now, they were
            # lost): the next call meets the error again (a record that cannot be
            # opened stays first; a read that failed is made again) or, live, waits
            return out
        except BaseException:
            # cancelled (a timeout around the call) or interrupted while reading more:
            # not handed over, so not passed over either
            self._undo(undo)
            raise
        return out
