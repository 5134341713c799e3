"""``ProjectionRunner``: keeps projections' read models up to date from the change feed.

The read models live in one SQLite database (``path``) with the table
``sk_projections``: per projection its position, its state (``live``,
``rebuilding``, ``failed``), how many events it applied and its last error. A batch of
events is applied in one transaction that also writes the new position: the read
model and the position commit together. The transaction starts by reading the stored
position and skips events at or below it, so a batch that is delivered again (after a
crash between the feed read and the commit, or by a second runner on the same
database) is never applied twice: exactly once, whatever crashes.

A handler that raises rolls its batch back (read model and position exactly as before
it), marks the projection ``failed`` with the error and the event's position, and
stops that projection only: the store and the other projections carry on. Running it
again (after fixing the handler) retries from the same position.

On a sharded store (Redis ``shards=N``) the position is a
:class:`~statekeeper.store.feed_cursor.FeedCursor`, one position per shard: its string
form is stored in the ``cursor`` column in the same transaction, and an event is
skipped when its shard's position is covered; ``position`` then holds the sum of the
cursor's positions (a progress measure). The ``cursor`` column is added to a database
made before it (``ALTER TABLE ... ADD COLUMN``, NULL: a plain store never sets it).

A rebuild empties the projection's tables and replays the feed from position 0 up to
the head it finds; it commits as it goes, so an interrupted rebuild resumes where it
stopped (state ``rebuilding``) instead of starting over. On a feed that retention
trimmed, a projection that can start from the agents' current states is rebuilt from
them and the rest of the feed (:mod:`.seeding`, state ``seeding`` first); one that
cannot raises :class:`~statekeeper.errors.ProjectionNeedsHistory`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._files import create_private
from ..errors import (
    ConfigurationError,
    InvalidArgument,
    ProjectionError,
    ProjectionFailed,
    StatekeeperError,
    UnknownProjection,
)
from ..records import FeedEvent
from ..store.feed import feed_shards, store_feed_bounds
from ..store.feed_cursor import FeedCursor, as_cursor, check_count
from . import feedcheck
from .builtins import BUILTINS
from .projection import Projection, check_projection_name, with_deletes
from .rebuild_lock import abandoned
from .rebuilding import rebuild, resume_seeding
from .seeding import SEEDS, forget_seed, has_seeds, seeded_seq

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["Progress", "ProjectionRunner", "ProjectionStatus"]

#: ``progress(position, target)`` after each batch of a rebuild or catch-up
Progress = Callable[[int, int], None]

_TRACKING = """
CREATE TABLE IF NOT EXISTS sk_projections (
    name           TEXT PRIMARY KEY,
    position       INTEGER NOT NULL DEFAULT 0,
    applied        INTEGER NOT NULL DEFAULT 0,
    state          TEXT NOT NULL DEFAULT 'live',
    rebuild_target INTEGER,
    error          TEXT,
    error_position INTEGER,
    updated_at     REAL,
    cursor         TEXT
)
"""
_ERROR_CHARS = 500
#: seconds between two looks of a live runner at a projection being seeded
_SEEDING_POLL = 0.1
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProjectionStatus:
    """One projection's row of ``statekeeper projections status``."""

    name: str
    #: the last feed position applied (or passed over)
    position: int
    #: the store's feed head when the status was taken
    head: int
    #: ``live`` (following), ``rebuilding`` (a rebuild that has not finished: run
    #: ``rebuild`` again to resume it), ``seeding`` (the same, of a rebuild from the
    #: agents' states, still reading them), ``failed`` (see ``error``) or ``new`` (no
    #: read-model database yet: never run)
    state: str
    #: events applied since the projection was created or last rebuilt
    applied: int
    error: str | None = None
    #: the position of the event the handler raised on
    error_position: int | None = None
    updated_at: float | None = None
    #: on a sharded store, the position per shard (``str`` of a FeedCursor); the
    #: ``position`` and ``head`` above are then sums over the shards
    cursor: str | None = None

    @property
    def behind(self) -> int:
        """Feed positions between the projection and the head (an upper bound on the
        events still to apply: positions have gaps)."""
        return max(0, self.head - self.position)


class _Reset(StatekeeperError):
    """The stored position went back under a follower (a rebuild reset it): control
    flow inside the runner, never raised to a caller."""

    applied = 0


class ProjectionRunner:
    """Applies the change feed of ``store`` to ``projections`` (default: the built-ins,
    see :mod:`.builtins`), whose read models live in the SQLite database ``path``.

    Use it as an async context manager, or call :meth:`open` and :meth:`close`.
    """

    def __init__(
        self,
        store: StateStore,
        path: str | os.PathLike[str],
        projections: Iterable[Projection] | None = None,
        *,
        batch_size: int = 256,
    ) -> None:
        check_count("batch_size", batch_size)
        chosen = list(projections) if projections is not None else [p() for p in BUILTINS.values()]
        self.projections: dict[str, Projection] = {}
        for projection in chosen:
            if not isinstance(projection, Projection):
                raise InvalidArgument(
                    "projections", f"{projection!r} is not a statekeeper.feed.Projection"
                )
            name = check_projection_name(getattr(projection, "name", None))
            if name in self.projections:
                raise ConfigurationError(f"two projections are named {name!r}")
            self.projections[name] = projection
        self.store = store
        self.path = os.fspath(path)
        self.batch_size = batch_size
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        #: agents the last :meth:`rebuild` seeded from their states (0: from the feed)
        self.seeded = 0

    # -- the database --------------------------------------------------------------

    async def open(self) -> None:
        """Open (create) the read-model database and every projection's tables."""
        if self._db is None:
            await asyncio.to_thread(self._open_sync)

    def _open_sync(self) -> None:
        if self.store.codec.encrypted and self.path != ":memory:":
            with contextlib.suppress(OSError):  # (no such folder: SQLite's error says so)
                create_private(self.path)  # decrypted states: not for other users to read
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            try:
                db.execute("PRAGMA journal_mode = WAL")
            except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
                raise ConfigurationError(f"cannot keep read models in {self.path}: {exc}") from None
            db.execute("PRAGMA busy_timeout = 30000")
            db.execute("BEGIN IMMEDIATE")
            db.execute(_TRACKING)
            db.execute(SEEDS)
            columns = {row[1] for row in db.execute("PRAGMA table_info(sk_projections)")}
            if "cursor" not in columns:  # a database made before sharded feeds
                db.execute("ALTER TABLE sk_projections ADD COLUMN cursor TEXT")
            feedcheck.add_column(db, columns)
            for name, projection in self.projections.items():
                projection.setup(db)
                db.execute("INSERT OR IGNORE INTO sk_projections (name) VALUES (?)", (name,))
            db.execute("COMMIT")
        except BaseException:
            db.close()
            raise
        self._db = db

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            with self._lock:
                db.close()

    async def __aenter__(self) -> ProjectionRunner:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _in_db(self, fn: Callable[..., Any], *args: Any) -> Any:
        await self.open()

        def locked() -> Any:
            with self._lock:
                assert self._db is not None, "the runner is closed"
                return fn(self._db, *args)

        return await asyncio.to_thread(locked)

    def get(self, name: str) -> Projection:
        """The registered projection ``name`` (else :class:`UnknownProjection`)."""
        try:
            return self.projections[name]
        except (KeyError, TypeError):
            raise UnknownProjection(str(name), sorted(self.projections)) from None

    # -- reading -------------------------------------------------------------------

    async def status(self) -> list[ProjectionStatus]:
        """Every registered projection's position, state and last error."""
        head = sum(h for _, h in await store_feed_bounds(self.store))
        rows = await self._in_db(
            lambda db: db.execute(
                "SELECT name, position, state, applied, error, error_position, updated_at,"
                " cursor FROM sk_projections ORDER BY name"
            ).fetchall()
        )
        return [
            ProjectionStatus(r[0], r[1], head, r[2], r[3], r[4], r[5], r[6], r[7])
            for r in rows
            if r[0] in self.projections
        ]

    async def consumed(self, names: Iterable[str] | None = None) -> FeedCursor:
        """The feed cursor every registered projection (or each of ``names``) has
        applied: per shard, the lowest stored position. What may be trimmed without
        any of them hitting :class:`~statekeeper.errors.FeedPositionCompacted`:
        ``await store.trim_feed(await runner.consumed())``. A projection being rebuilt
        counts with its rebuild position (a trim past it would break the rebuild)."""
        chosen = [self.get(n).name for n in names] if names is not None else list(self.projections)
        shards = feed_shards(self.store.backend)
        found: list[FeedCursor] = []
        for name in chosen:
            cursor, _, _ = await self._position(name)
            found.append(cursor)
        return FeedCursor.earliest(found) if found else FeedCursor.start(shards)

    async def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query on the read models."""
        return list(await self._in_db(lambda db: db.execute(sql, tuple(params)).fetchall()))

    # -- applying --------------------------------------------------------------------

    @staticmethod
    def _stored(row: Sequence[Any], shards: int) -> FeedCursor:
        """The cursor of a tracking row (``position``, ``cursor``)."""
        if shards == 1:
            return FeedCursor((int(row[0]),))
        return FeedCursor.start(shards) if row[1] is None else as_cursor(str(row[1]), shards)

    def _apply_sync(
        self,
        db: sqlite3.Connection,
        projection: Projection,
        events: Sequence[FeedEvent],
        through: FeedCursor,
        seeded: bool = False,
        committed: FeedCursor | None = None,
    ) -> int:
        """One transaction: the events past the stored cursor, then the cursor.
        ``seeded``: a rebuild from the agents' states, whose seeded events are skipped
        (:mod:`.seeding`). ``committed``: where the caller's subscription stood before
        these events (the stored cursor was at least there); a stored cursor now below
        it was reset by a rebuild since, and :class:`_Reset` is raised, nothing written
        (committing would move the position over the events the rebuild has yet to
        apply again: they were lost from the read model)."""
        name = projection.name
        shards = through.shards
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                "SELECT position, cursor, state FROM sk_projections WHERE name = ?", (name,)
            ).fetchone()
            stored = self._stored(row, shards)
            if committed is not None and any(
                s < c for s, c in zip(stored.positions, committed.positions, strict=True)
            ):
                raise _Reset
            if row[2] == "seeding" or (not seeded and has_seeds(db, name)):
                # a rebuild from the states began since this runner started (its reset
                # need not move the position back: the feed may be trimmed right there);
                # applying now could land an event under a seed read before it (lost)
                # or after it (doubled)
                raise _Reset
            applied = 0
            for change in events:
                if stored.covers(change.shard, change.position):
                    continue  # applied by an earlier commit: exactly once
                if change.deleted:
                    # never within a seed (an agent seeded at its head, then deleted:
                    # the tombstone's seq is that head); a new stream of the id is
                    # not in the seed either
                    if seeded:
                        forget_seed(db, name, change.agent_id)
                elif seeded and change.seq <= seeded_seq(db, name, change.agent_id):
                    continue  # in the state the agent was seeded from
                try:
                    if change.deleted:
                        projection.deleted(db, change)
                    else:
                        projection.apply(db, change)
                except Exception as exc:
                    db.execute("ROLLBACK")
                    error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
                    db.execute(
                        "UPDATE sk_projections SET state = 'failed', error = ?,"
                        " error_position = ?, updated_at = ? WHERE name = ?",
                        (error, change.position, time.time(), name),
                    )
                    raise ProjectionFailed(
                        name, change.position, change.agent_id, change.seq, error
                    ) from exc
                applied += 1
            if any(t > s for t, s in zip(through.positions, stored.positions, strict=True)):
                new = FeedCursor(
                    tuple(
                        max(t, s) for t, s in zip(through.positions, stored.positions, strict=True)
                    )
                )
                db.execute(
                    "UPDATE sk_projections SET position = ?, cursor = ?, applied = applied + ?,"
                    " state = CASE state WHEN 'failed' THEN 'live' ELSE state END,"
                    " error = NULL, error_position = NULL, updated_at = ? WHERE name = ?",
                    (new.total, None if shards == 1 else str(new), applied, time.time(), name),
                )
            db.execute("COMMIT")
            return applied
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def _position(self, name: str) -> tuple[FeedCursor, str, int | None]:
        row = await self._in_db(
            lambda db: db.execute(
                "SELECT position, cursor, state, rebuild_target FROM sk_projections WHERE name = ?",
                (name,),
            ).fetchone()
        )
        return self._stored(row, feed_shards(self.store.backend)), str(row[2]), row[3]

    async def _follow(
        self, projection: Projection, *, stop_at_head: bool, progress: Progress | None = None
    ) -> int:
        total = 0
        while True:
            try:
                return total + await self._follow_from_stored(projection, stop_at_head, progress)
            except _Reset as reset:
                # rebuilt (reset) by another runner meanwhile: follow from its position
                total += reset.applied

    async def _follow_from_stored(
        self, projection: Projection, stop_at_head: bool, progress: Progress | None
    ) -> int:
        position, state, _ = await self._position(projection.name)
        waited = False
        while state == "seeding":
            if stop_at_head:
                raise ProjectionError(
                    f"projection {projection.name!r} is being rebuilt from the agents' states"
                    f" (the rebuild was interrupted): run `rebuild {projection.name}` to finish"
                    " it"
                )
            # live: wait for the rebuild (in another task or process) to finish seeding,
            # then follow from where it stands, its seeds known; one that died (its
            # lock free: rebuild_lock.py) is finished here, then followed on
            if await asyncio.to_thread(abandoned, self.path, projection.name):
                _log.warning(
                    "projection %r: its rebuild from the agents' states was interrupted;"
                    " finishing it",
                    projection.name,
                )
                await resume_seeding(self, projection.name)
            elif not waited:
                waited = True
                _log.warning(
                    "projection %r is being rebuilt from the agents' states: waiting for the"
                    " rebuild to finish (if it was interrupted, run `rebuild %s`)",
                    projection.name,
                    projection.name,
                )
            await asyncio.sleep(_SEEDING_POLL)
            position, state, _ = await self._position(projection.name)
        if (
            state == "rebuilding"
            and not stop_at_head
            and await asyncio.to_thread(abandoned, self.path, projection.name)
        ):
            # a rebuild that died past its seeding (or a plain one): finished here, so
            # the projection is live again (was: followed to the head and beyond, still
            # reported ``rebuilding`` until someone ran ``rebuild`` by hand)
            _log.warning(
                "projection %r: its rebuild was interrupted; finishing it", projection.name
            )
            await resume_seeding(self, projection.name)
            position, state, _ = await self._position(projection.name)
        seeded = await self._in_db(has_seeds, projection.name)  # (kept while failed too)
        # a position of another feed (the store restored, re-created) names other
        # events here: refused (FeedChanged), and the subscription checks it again
        feed = await self.store.backend.feed_id()
        mark = feedcheck.store_mark(self.store.backend)
        await self._in_db(feedcheck.claim, projection.name, feed, mark)
        sub = self.store.subscribe(
            position.on_feed(feed),
            event_types=with_deletes(projection.event_types),
            batch_size=self.batch_size,
            stop_at_head=stop_at_head,
        )
        target = sum(h for _, h in await store_feed_bounds(self.store))
        total = 0
        committed = position

        async def idle(cursor: FeedCursor) -> None:
            # live, before waiting: every position up to the cursor was applied (the
            # batches before were committed) or is of other types: it is the position
            nonlocal committed
            if cursor == committed:
                return
            await self._in_db(self._apply_sync, projection, [], cursor, seeded, committed)
            committed = cursor

        if not stop_at_head:
            sub.on_idle(idle)
        try:
            while True:
                batch = await sub.next_batch(self.batch_size)
                if not batch:
                    break
                through = sub.cursor
                total += await self._in_db(
                    self._apply_sync, projection, batch, through, seeded, committed
                )
                committed = through
                if progress is not None:
                    done = through.total
                    progress(done, max(target, done))
            if sub.cursor != committed:
                # events of other types passed over at the end: the position moves past them
                await self._in_db(self._apply_sync, projection, [], sub.cursor, seeded, committed)
        except _Reset as reset:
            reset.applied = total
            raise
        if progress is not None:
            done = max(target, sub.cursor.total)
            progress(done, done)
        return total

    async def catch_up(
        self, names: Iterable[str] | None = None, *, progress: Progress | None = None
    ) -> dict[str, int]:
        """Apply every event up to the current feed head to the projections (all, or
        ``names``); returns how many events each applied. Raises
        :class:`ProjectionFailed` at the first handler error (that projection is
        marked failed; the ones before it were brought up to date)."""
        chosen = (
            [self.get(n) for n in names] if names is not None else list(self.projections.values())
        )
        done: dict[str, int] = {}
        for projection in chosen:
            done[projection.name] = await self._follow(
                projection, stop_at_head=True, progress=progress
            )
        return done

    async def run(self, names: Iterable[str] | None = None) -> list[ProjectionFailed]:
        """Follow the feed live with every projection (or ``names``) until cancelled.
        A projection whose handler raises stops (recorded for ``status``); the others
        go on. Returns the failures once every projection has stopped."""
        chosen = (
            [self.get(n) for n in names] if names is not None else list(self.projections.values())
        )
        failures: list[ProjectionFailed] = []

        async def one(projection: Projection) -> None:
            try:
                await self._follow(projection, stop_at_head=False)
            except ProjectionFailed as exc:
                failures.append(exc)

        # structured (asyncio.TaskGroup's way, its error raised as it is): one that
        # raises, or run() cancelled, cancels the others and awaits them first; none
        # goes on following the feed on its own (was: gather left them running)
        tasks = [asyncio.create_task(one(p)) for p in chosen]
        done: set[asyncio.Task[None]] = set()
        try:
            if tasks:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:  # (in their order: the same error each time)
            error = task.exception() if task in done and not task.cancelled() else None
            if error is not None:
                raise error
        return failures

    async def rebuild(
        self,
        name: str,
        *,
        progress: Progress | None = None,
        from_states: bool = False,
        since_floor: bool = False,
    ) -> int:
        """Empty projection ``name`` and apply the feed from position 0 up to the head;
        resumes an interrupted rebuild (one the feed was trimmed past since starts over,
        as below). Returns how many events it applied (this run).

        When the feed was trimmed (retention), its start is gone: a projection that
        implements :meth:`Projection.seed` is rebuilt from every agent's current state
        and then the feed from its floor (:mod:`.seeding`; ``from_states=True`` does
        that on an untrimmed feed too; :attr:`seeded` says how many agents); one that
        does not raises :class:`~statekeeper.errors.ProjectionNeedsHistory` (a
        :class:`~statekeeper.errors.FeedPositionCompacted`) and changes nothing.
        ``since_floor=True`` rebuilds it from the events still in the feed alone.

        A floor raised past the rebuild while it runs (retention beside it) starts it
        over from that floor by itself, a few times at most (:mod:`.rebuilding`), then
        raises :class:`~statekeeper.errors.ProjectionRebuildOutpaced`.
        """
        return await rebuild(self, name, progress, from_states, since_floor)
