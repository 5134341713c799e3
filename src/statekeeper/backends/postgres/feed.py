"""The PostgreSQL backend's change feed (migration 7, ``sql/feed.sql``).

Positions come from a sequence, taken in the append's own transaction (the column
default of ``sk_events.position``), so a position commits atomically with its event.
Sequence values commit out of order: transaction A takes 10, B takes 11, B commits
first. A reader that delivered 11 and resumed "after 11" would never see 10. So a
reader only reads up to a *safe frontier*: every statement inserting events holds a
shared advisory lock until its transaction ends; :func:`FeedReader.frontier` reads
the sequence's last value L and then the transactions holding that lock, and L
becomes safe once all of those have ended (they are the only ones that can still
commit a position <= L). It never blocks a writer (shared locks do not conflict and
the reader takes none) and never waits on an unrelated transaction.

Wake-ups: after its appends commit, a process sends one ``NOTIFY`` on the schema's
channel, coalesced (at most one every :data:`NOTIFY_GAP` seconds, off the append's
path: a NOTIFY inside the append would take PostgreSQL's global notify lock at every
commit). Subscribers ``LISTEN`` on a connection of their own and re-read on each
notification, or after their poll interval when none comes (a writer in a process
that died before notifying).

Only when someone listens: a listening connection holds a shared session advisory lock
(class :data:`LISTENING`, released by the server when the connection ends), and the
NOTIFY is conditional on it (``WHERE NOT pg_try_advisory_xact_lock(…)``: the exclusive
try fails while any listener holds the shared one). A writer told that nobody listens
sends nothing — not even the check — for :data:`LISTENER_RECHECK` seconds; a subscriber
that starts listening within that time could miss those writes' wake-ups, so for its
first :data:`LISTENER_RECHECK` seconds its wait ends by then and it re-reads. Measured
(docs/benchmarks.md, "lgpg12"): with no subscriber, 16 LangGraph threads on a
group-commit saver sent a NOTIFY — a round trip and a transaction of its own, under the
server-wide notify lock — for 2 of every 3 batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from ...errors import ConfigurationError
from ...records import FeedRecord, RawEvent

if TYPE_CHECKING:
    from .backend import PostgresBackend

__all__ = ["LISTENER_RECHECK", "LISTENING", "NOTIFY_GAP", "FeedReader", "floor_over"]

#: seconds between two NOTIFYs sent by one process (coalescing)
NOTIFY_GAP = 0.01
#: seconds a process that found no listener sends no NOTIFY (and a new listener's
#: waits are cut to, so that it re-reads what those writes committed)
LISTENER_RECHECK = 0.25
#: advisory lock class held (shared, per session) by a listening connection; the
#: feed's appends-in-flight lock is class 23117 (sql/feed.sql), same key
LISTENING = 23118
#: a NOTIFY sent only when some connection listens; a row when it was sent
_NOTIFY = f"SELECT pg_notify(%s, '') WHERE NOT pg_try_advisory_xact_lock({LISTENING}, hashtext(%s))"
_LISTEN = f"SELECT pg_advisory_lock_shared({LISTENING}, hashtext(%s))"


class FeedReader:
    """Frontier state, the listening connection and the notifier of one backend."""

    def __init__(self, backend: PostgresBackend) -> None:
        self.backend = backend
        self.channel = f"sk_feed_{zlib.crc32(backend.schema.encode()):08x}"
        #: the advisory lock key's text (as the frontier's: sql/feed.sql)
        self._key = f"statekeeper-feed:{backend.schema}"
        #: loop time until which nobody listens, as far as this process knows
        self._quiet_until = 0.0
        #: loop time at which this process's listener registered
        self._listening_since = 0.0
        self.safe = 0
        #: the newest committed position any frontier read has seen (>= ``safe``: the
        #: positions between them committed behind appends still in flight)
        self.newest = 0
        #: the primary's WAL position when ``safe`` was last confirmed: a replica
        #: serves the feed up to ``safe`` once it has replayed this far
        self.lsn = 0
        self._on_primary = False
        self._candidate: int | None = None
        self._holders: list[str] = []
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._notifier: asyncio.Task[None] | None = None
        self._again = False

    # -- reading -----------------------------------------------------------------

    async def frontier(self) -> int:
        """The highest position no append still in flight can come before."""
        if not self._on_primary:
            # a standby's lock table does not show the primary's appends in flight: a
            # frontier read there could pass a position that is still to commit
            if (await self.backend._query("in_recovery", ()))[0][0]:
                raise ConfigurationError(
                    f"schema {self.backend.schema!r}: the change feed must be read through "
                    "the primary (this server is a standby); open the store on the primary "
                    "with replica_url= set to this server to read the feed's pages from it"
                )
            self._on_primary = True
        replica = self.backend._replica is not None
        rows = await self.backend._query(
            "feed_frontier_lsn" if replica else "feed_frontier",
            (self.backend.schema, self._candidate, self._holders),
        )
        safe, candidate, holders = rows[0][:3]
        if replica:
            self.lsn = max(self.lsn, int(rows[0][3]))
        # the candidate never goes back: a position below the previous one that has not
        # ended is held by one of the new holders (it still holds the lock), and with no
        # holder left every position up to it has ended. The newest committed position
        # goes back when the agent holding it is deleted: taken as it is, the frontier
        # then never reached a head it had reported (a stop_at_head catch-up waited for
        # it until the next append)
        previous = self._candidate or 0
        self.safe = max(self.safe, int(safe or 0))
        if candidate is None:
            self.safe = max(self.safe, previous)
            self._candidate = None
        else:
            self._candidate = max(int(candidate), previous)
        self.newest = max(self.newest, self.safe, self._candidate or 0)
        self._holders = list(holders or [])
        return self.safe

    async def read(self, after: int, limit: int) -> list[FeedRecord]:
        return (await self.read_page(after, limit, with_id=False))[0]

    async def read_page(
        self, after: int, limit: int, *, with_id: bool = True
    ) -> tuple[list[FeedRecord], str | None]:
        """The page and the feed's id (its newest generation in ``sk_markers``, a column
        of the same statement, ``feed_read_id``: one snapshot, so a page holding a
        position written after a renewal carries the new id; None when the page is
        empty, or without ``with_id``)."""
        safe = await self.frontier()
        if safe <= after:
            return [], None
        name = "feed_read_id" if with_id else "feed_read"
        rows = await self.backend._query(name, (after, safe, limit), lsn=self.lsn)
        page = [
            FeedRecord(int(r[0]), r[1], RawEvent(int(r[2]), r[3], r[4], bytes(r[5]), bytes(r[6])))
            for r in rows
        ]
        marker = rows[0][7] if rows and with_id else None
        return page, None if marker is None else str(marker).rpartition(":")[2]

    async def bounds(self) -> tuple[int, int]:
        safe = await self.frontier()
        floor = int((await self.backend._query("feed_floor", ()))[0][0])
        return floor, max(safe, floor)

    async def committed(self) -> int:
        """The newest position committed (an upper bound on any cursor a reader of the
        feed handed out); the head of :meth:`bounds` is the safe frontier, which lags it
        while appends are in flight — for a reader that has not read before, by
        everything (it has no safe position of its own yet)."""
        await self.frontier()
        return self.newest

    async def handed_out(self) -> int:
        """The last position the feed's sequence handed out: an upper bound on every
        position a reader was ever given, whatever was deleted since (the newest
        committed one goes back when the agent holding it is deleted, and a consumer's
        own cursor past it looked like another store's). The newest committed position
        where the role may not read the sequence (a read-only role)."""
        newest = await self.committed()
        rows = await self.backend._primary_query("feed_handed_out", ())
        value = rows[0][0] if rows else None
        return max(newest, int(value or 0))

    async def position(self, agent_id: str, seq: int) -> int | None:
        """The position of ``agent_id``'s event ``seq`` (one lookup by key), None when
        it is at or below the floor or not stored."""
        rows = await self.backend._primary_query("feed_position", (agent_id, seq))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    async def trim(self, through: int) -> int:
        self.backend._check_writable()
        dropped = int((await self.backend._query("feed_trimmed", (through,)))[0][0])
        await self.backend._query("feed_trim", (through,))
        return dropped

    # -- waking up -----------------------------------------------------------------

    async def wait(self, after: int, max_wait: float) -> None:
        """Return on a notification on the channel (or a position already past
        ``after``), else after ``max_wait`` seconds (within :data:`LISTENER_RECHECK`
        of starting to listen: by then)."""
        loop = asyncio.get_running_loop()
        if self._listener is None or self._listener.closed:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.backend.dsn, **self.backend._connect_kwargs
                )
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                await conn.execute(_LISTEN, (self._key,))  # writers notify from now on
            except psycopg.Error:
                await asyncio.sleep(min(max_wait, self.backend.feed_poll_interval))
                return
            self._listener = conn
            self._listening_since = loop.time()
            self._quiet_until = 0.0  # this process's own writes notify at once
            # an append may have committed between the reader's last read and LISTEN
            if await self.frontier() > after:
                return
        # a writer that found nobody listening just before may not notify yet
        left = self._listening_since + LISTENER_RECHECK - loop.time()
        if left > 0:
            max_wait = min(max_wait, left)
        try:
            async for _ in self._listener.notifies(timeout=max_wait, stop_after=1):
                break
        except psycopg.Error:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None

    def poke(self) -> None:
        """After an append committed: make sure a NOTIFY follows (coalesced), unless
        nobody listened a moment ago."""
        if self._notifier is not None and not self._notifier.done():
            self._again = True
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._quiet_until:
            return
        self._again = False
        self._notifier = loop.create_task(self._notify())

    async def _notify(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            try:
                async with self.backend._connection() as conn:
                    cur = await conn.execute(_NOTIFY, (self.channel, self._key))
                    heard = cur.rowcount > 0
            except Exception:
                return
            if not heard:  # a listener that comes later re-reads by asked + RECHECK
                self._quiet_until = asked + LISTENER_RECHECK
                return
            await asyncio.sleep(NOTIFY_GAP)
            if not self._again:
                return
            self._again = False

    async def close(self) -> None:
        if self._notifier is not None and not self._notifier.done():
            self._notifier.cancel()
            with contextlib.suppress(BaseException):
                await self._notifier
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None


async def floor_over(
    conn: psycopg.AsyncConnection[Any], query: bytes, agent_id: str, base: int
) -> None:
    """Raise ``sk_feed_floor`` through the position of ``agent_id``'s event ``base + 1``
    inside the caller's transaction: the one writing a stream compacted at ``base``
    (``append_from_base(raise_floor=True)``). A reader's ``feed_read`` is one statement,
    so it sees those events with the floor over them, or neither; the floor row's lock
    is held to the commit (trims wait; appends never take it). A role that may not
    update the floor (a tenant's, under row security) leaves it, in a savepoint: the
    caller's warning says so."""
    try:
        async with conn.transaction():
            await conn.execute(query, (agent_id, base + 1))
    except psycopg.errors.InsufficientPrivilege:
        pass
