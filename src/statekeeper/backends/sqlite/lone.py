"""The lone append: ``append_next`` / ``commit_next`` and ``commit_keyed`` — the store's
common save — as one statement in autocommit on the event loop when the writer is
idle, else handed to the commit queue or the writer thread."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from ...errors import ConflictError, LeaseLost, ReadOnlyStore, StoreClosed
from ...records import AppendRequest, AppendResult, RawSnapshot
from ..base import KeyedRow, NextRow, validate_next
from .appends import _PATCH, _agent_of, _bind, _bind_tag
from .base import translated as _translated
from .checkpoints import _SMALL_PAYLOAD, _pages
from .connections import _Busy, _busy
from .engine import SQLiteEngine, _Queued
from .loop import nothing_waits as _nothing_waits
from .running import PASS_EVERY, _get_ident, _last_loop, _monotonic, _running_loop
from .statements import (
    _APPEND_NEXT,
    _HEAD_SEQ,
    _KEY_RANGE,
    _MOVED,
    _SAVE_NEXT,
    _SNAP_NEXT,
)


def _lone(args: tuple[Any, ...]) -> _Queued:
    """The append of :meth:`SQLiteBackend._commit_lone`'s ``args`` (after the cursor:
    a request, or an ``append_next``'s row)."""
    return args[1] if isinstance(args[1], AppendRequest) else args[1:]


def _snap_params(row: NextRow) -> tuple[Any, ...]:
    """:data:`_SNAP_NEXT`'s parameters of an ``append_next`` row with a snapshot (its
    BLOBs bound as ``bytearray``: see ``SQLiteBackend._append_row``)."""
    agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot = row
    assert snapshot is not None
    return (
        agent_id,
        seq,
        _PATCH,
        timestamp,
        _bind(payload),
        _bind(checksum),
        _bind_tag(head_tag),
        _bind_tag(expected_tag),
        None,
        snapshot.seq,
        snapshot.timestamp,
        _bind(snapshot.payload),
        _bind(snapshot.checksum),
    )


#: a lone append found the writer busy: nothing was written, the writer thread takes it
_BUSY: Any = object()


class SQLiteLoneAppends(SQLiteEngine):
    """The lone append as one statement, on the loop when the writer is idle."""

    async def append_next(
        self,
        agent_id: str,
        seq: int,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        head_tag: bytes | None,
        expected_tag: bytes | None,
        snapshot: RawSnapshot | None = None,
    ) -> None:
        """:meth:`Backend.append_next`: as :meth:`append` — the same commit queue, the
        same statements —, and when the append is alone, its row bound from the
        arguments as they are (no request, event or result object; the store's common
        save, ``benchmarks/bench_save_instructions.py``)."""
        if self.readonly:
            raise ReadOnlyStore(f"{self.path} is open read-only")
        validate_next(agent_id, seq, snapshot)
        row = (agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot)
        result = await self._commit_one(None, row)
        if isinstance(result, BaseException):
            raise result

    def commit_next(self, row: NextRow) -> bool:
        """:meth:`Backend.commit_next`: the lone append :meth:`_open_commit` commits
        without a pass of the loop, as one plain call (no coroutine of its own nor of
        :meth:`append_next`, no argument check: the store's common save). False, with
        nothing done, unless it is that case: the backend writable and open with inline
        writes, no commit queue open nor batch in flight (of any loop), no other task of
        the loop ready, no pass due (:data:`PASS_EVERY` went by and the loop's poll finds
        I/O or a timer waiting), the writer idle; :meth:`append_next` then makes it.

        An existing agent's append without a snapshot is ONE statement in autocommit
        (:data:`_SAVE_NEXT`: the same compare-and-set and event row, made by a TEMP
        view's trigger; a busy write lock fails it with nothing written, and the
        writer thread then makes it). Any other (a create, a snapshot with it) is
        :meth:`_append_row` (the row's statements, one place) in a transaction made
        here: :meth:`_commit_lone` written out in this frame (the same statements,
        errors and accounting). Its call, the row's arguments packed and unpacked
        through it and the writer's ``threading.local`` flag set and cleared per save
        were, with :meth:`_append_row`'s own call, ~150 of the save's ~1,100 bytecodes
        when this was the common save (docs/benchmarks.md, "seqfloor"). The flag
        matters only to :meth:`_begin`, which is called here only when the first
        ``BEGIN IMMEDIATE`` failed."""
        if (
            self.readonly
            or self._closed
            or not self.inline_writes
            or self._queues
            or self._in_flight
        ):
            return False
        loop = _last_loop[0]
        if loop is None or loop._thread_id != _get_ident():  # type: ignore[attr-defined]
            running = asyncio.get_running_loop()  # (RuntimeError outside a loop, as before)
            if not isinstance(running, asyncio.BaseEventLoop):
                return False  # no _ready queue (uvloop, say): append_next makes it
            _last_loop[0] = loop = running
        if loop._ready:  # type: ignore[attr-defined]
            return False  # another task is ready: append_next lets it run first
        if (now := _monotonic()) >= self._pass_due:
            if not _nothing_waits(loop):
                return False  # something waits: append_next makes the pass
            self._pass_due = now + PASS_EVERY  # (the clock read once: the poll is short)
        if self._checkpoint_due or self._moved() or not self._writer_busy.acquire(False):
            return False  # the writer thread takes it (_begin raises StoreLost if moved)
        agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot = row
        cur = self._append_cursor
        execute = cur.execute
        refused: ConflictError | None = None
        failure: BaseException | None = None
        if seq != 1 and self._save_next:
            # the common save: one statement, its own transaction (_SAVE_NEXT; with a
            # snapshot, _SNAP_NEXT)
            try:
                if snapshot is None:
                    execute(
                        _SAVE_NEXT,
                        (
                            agent_id,
                            seq,
                            timestamp,
                            _bind(payload),
                            _bind(checksum),
                            None if head_tag is None else _bind(head_tag),
                            None if expected_tag is None else _bind(expected_tag),
                        ),
                    )
                else:
                    execute(_SNAP_NEXT, _snap_params(row))
                self.append_commits += 1
                outcome = None
            except BaseException as exc:
                outcome = self._statement_failed(exc, agent_id, seq, None)
            finally:
                self._writer_busy.release()
            if outcome is not None:  # (rolled back: nothing written)
                if outcome is _BUSY:
                    return False  # the writer thread waits for the lock
                if isinstance(outcome, ConflictError):
                    refused = outcome
                else:
                    failure = outcome
            return self._next_done(payload, failure, refused)
        try:
            try:
                try:
                    execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError:
                    local = self._local
                    local.inline = True  # (busy: _begin raises _Busy; else it began)
                    try:
                        self._begin(cur)
                    finally:
                        local.inline = False
                try:
                    try:
                        self._append_row(cur, *row)
                    except ConflictError as exc:
                        refused = exc  # refused, nothing written
                    except sqlite3.IntegrityError as exc:
                        execute("ROLLBACK")
                        failure = self._failure(exc)  # (rolled back: no WAL pages)
                    if failure is None:
                        execute("COMMIT")  # (a refusal commits the empty transaction)
                        self.append_commits += 1
                except BaseException:
                    conn = self._writer
                    if conn is not None and conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error:
                with _translated(self.path, agent_id):
                    raise
        except _Busy:
            return False  # nothing written: wait for the lock on the writer thread
        finally:
            self._writer_busy.release()
        return self._next_done(payload, failure, refused)

    def _next_done(
        self, payload: bytes, failure: BaseException | None, refused: ConflictError | None
    ) -> bool:
        """:meth:`commit_next`'s accounting once its append's statements ran: the
        failure raised, the WAL pages counted (a checkpoint queued when due), the
        commit listeners told, the refusal raised; True."""
        if failure is not None:
            if self.commit_listeners:
                self._committed(1)
            raise failure
        self._wal_pages += (
            self._wal_small
            if len(payload) < _SMALL_PAYLOAD
            else (3 + ((len(payload) + 1100) >> 11)) * self._wal_scale
        )
        if self._wal_pages >= self._wal_limit:
            self._wrote(0)
        if self.commit_listeners:
            self._committed(1)
        if refused is not None:
            raise refused
        return True

    def join_next(self, row: NextRow) -> Awaitable[BaseException | None] | None:
        """:meth:`Backend.join_next`: ``row`` joins the running loop's queue when it is
        open (appends waiting, or a batch in flight), as :meth:`append_next` would. The
        row is not checked, as :meth:`commit_next` does not check it (the store hands
        it only rows it built on a cached record; :meth:`append_next` checks): on the
        group committer's common save at 16 agents the check was 46 of ~1,380
        bytecodes a save (``bench_save_instructions.py --bytecodes sk-group-16``).
        :meth:`_join_commit`, written out for a row (one lookup of the queue)."""
        if not self.groups_appends:  # (read-only, or no inline writes: set once)
            return None
        # (_running_loop, written out: once a batched save)
        last = _last_loop[0]
        running = last is not None and last._thread_id == _get_ident()  # type: ignore[attr-defined]
        loop: asyncio.AbstractEventLoop = last if running else _running_loop()  # type: ignore[assignment]
        queue = self._queues.get(loop)
        if queue is None:
            if loop not in self._in_flight:
                return None
            if self._closed:
                raise StoreClosed(f"sqlite backend {self.path} is closed")
            queue = self._queues[loop] = []  # (the batch in flight flushes it)
        elif self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        future: asyncio.Future[BaseException | None] = loop.create_future()
        queue.append((row, future))  # type: ignore[arg-type]
        return future

    def _commit_statement(self, request: AppendRequest) -> Any:
        """:meth:`_commit_lone` of :meth:`_append_one` for :func:`_one_statement`'s
        case, as ONE statement in autocommit (:data:`_APPEND_NEXT`; with a snapshot,
        :data:`_SNAP_NEXT`): what it returns — the result, a duplicate's result, the
        refusal (nothing written), the constraint's error, or :data:`_BUSY` (nothing
        written: the writer or the file's lock busy; the writer thread then makes it
        with its statements)."""
        event = request.events[0]
        snap = request.snapshot
        if snap is not None:
            params = (
                request.agent_id,
                event.seq,
                event.type,
                event.timestamp,
                _bind(event.payload),
                _bind(event.checksum),
                _bind_tag(request.head_tag),
                _bind_tag(request.expected_tag),
                request.idempotency_key,
                snap.seq,
                snap.timestamp,
                _bind(snap.payload),
                _bind(snap.checksum),
            )
            return self._statement(_SNAP_NEXT, params, request.idempotency_key, _pages((request,)))
        row = (
            request.agent_id,
            event.seq,
            event.type,
            event.timestamp,
            event.payload,
            event.checksum,
            request.head_tag,
            request.expected_tag,
            request.idempotency_key,
        )
        return self._one_row(row, _pages((request,)))

    def _one_row(self, row: KeyedRow, pages: int) -> Any:
        """:data:`_APPEND_NEXT` of one event's columns, committed now
        (:meth:`_commit_statement`, :meth:`commit_keyed`): what
        :meth:`_commit_statement` returns."""
        agent_id, seq, event_type, timestamp, payload, checksum, head_tag, expected_tag, key = row
        params = (
            agent_id,
            seq,
            event_type,
            timestamp,
            _bind(payload),
            _bind(checksum),
            _bind_tag(head_tag),
            _bind_tag(expected_tag),
            key,
        )
        return self._statement(_APPEND_NEXT, params, key, pages)

    def _statement(self, sql: str, params: tuple[Any, ...], key: str | None, pages: int) -> Any:
        """One append's ONE statement ``sql`` (:data:`_APPEND_NEXT`, :data:`_SAVE_NEXT`,
        :data:`_SNAP_NEXT`; the agent and seq its first two ``params``) committed now,
        in autocommit: what :meth:`_commit_statement` returns (``key``: the append's
        idempotency key, read back when the statement fails on it)."""
        if self._checkpoint_due or self._moved() or not self._writer_busy.acquire(blocking=False):
            return _BUSY  # (moved: the writer thread's _begin raises StoreLost)
        agent_id, seq = params[0], params[1]
        try:
            self._append_cursor.execute(sql, params)
        except BaseException as exc:
            return self._statement_failed(exc, agent_id, seq, key)
        finally:
            self._writer_busy.release()
        self.append_commits += 1
        self._wal_pages += pages * self._wal_scale
        if self._wal_pages >= self._wal_limit:
            self._wrote(0)
        return AppendResult(agent_id, seq, seq)

    def _row_statement(self, row: NextRow) -> Any:
        """:meth:`_commit_lone` of :meth:`_append_row` for an ``append_next`` row on an
        existing stream (``seq`` > 1) as ONE statement in autocommit (:data:`_SAVE_NEXT`,
        or :data:`_SNAP_NEXT` with its snapshot): None (committed), the refusal, the
        constraint's error (nothing written), or :data:`_BUSY` (nothing written: the
        writer thread then makes it with its statements)."""
        agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot = row
        if snapshot is None:
            sql = _SAVE_NEXT
            params: tuple[Any, ...] = (
                agent_id,
                seq,
                timestamp,
                _bind(payload),
                _bind(checksum),
                _bind_tag(head_tag),
                _bind_tag(expected_tag),
            )
        else:
            sql, params = _SNAP_NEXT, _snap_params(row)
        result = self._statement(sql, params, None, 3 + ((len(payload) + 1100) >> 11))
        return result if result is _BUSY or isinstance(result, BaseException) else None

    def _statement_failed(
        self, exc: BaseException, agent_id: str, seq: int, key: str | None
    ) -> Any:
        """What ONE statement in autocommit (:data:`_SAVE_NEXT`, :data:`_APPEND_NEXT`)
        that raised ``exc`` comes to, the writer still held: the refusal (the head
        moved: :class:`ConflictError`), a duplicate's result (``key`` stored already),
        the constraint's error, or :data:`_BUSY` (the file's lock busy) — nothing
        written in each case (the statement rolled back). Anything else is raised
        (a SQLite error translated), the writer's transaction rolled back if open."""
        try:
            if isinstance(exc, sqlite3.IntegrityError):
                cur = self._append_cursor
                if exc.args and exc.args[0] == _MOVED:  # refused
                    found = cur.execute(_HEAD_SEQ, (agent_id,)).fetchone()
                    return ConflictError(agent_id, seq - 1, found[0] if found is not None else 0)
                row = None if key is None else cur.execute(_KEY_RANGE, (agent_id, key)).fetchone()
                if row is None:
                    return self._failure(exc)
                return AppendResult(agent_id, row[0], row[1], duplicate=True)
            if isinstance(exc, sqlite3.OperationalError) and _busy(exc):
                return _BUSY
            conn = self._writer
            if conn is not None and conn.in_transaction:
                conn.execute("ROLLBACK")
            raise exc
        except sqlite3.Error:
            with _translated(self.path, agent_id):
                raise

    def commit_keyed(self, row: KeyedRow) -> AppendResult | None:
        """:meth:`Backend.commit_keyed`: in :meth:`commit_next`'s case (writable, inline
        writes, no commit queue nor batch in flight, no other task of the loop ready, no
        pass due, the writer idle) and on an existing stream (``seq`` > 1), the event
        committed now as ONE statement (:data:`_APPEND_NEXT`: the key claimed, the
        head's compare-and-set, the event row): its result — a duplicate's when the key
        was there (nothing written) —, the refusal raised (nothing written). None, with
        nothing done, otherwise (a busy write lock too): the caller then makes the
        append by :meth:`append`."""
        seq = row[1]
        if (
            seq < 2
            or not self._save_next
            or self.readonly
            or self._closed
            or not self.inline_writes
            or self._queues
            or self._in_flight
        ):
            return None
        loop = _last_loop[0]
        if loop is None or loop._thread_id != _get_ident():  # type: ignore[attr-defined]
            running = asyncio.get_running_loop()
            if not isinstance(running, asyncio.BaseEventLoop):
                return None
            _last_loop[0] = loop = running
        if loop._ready:  # type: ignore[attr-defined]
            return None  # another task is ready: append lets it run first
        if (now := _monotonic()) >= self._pass_due:
            if not _nothing_waits(loop):
                return None
            self._pass_due = now + PASS_EVERY
        result = self._one_row(row, 3 + ((len(row[4]) + 1100) >> 11))
        if result is _BUSY:
            return None
        self._committed(1)
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]

    def _commit_lone(self, pages: int, write: Callable[..., Any], *args: Any) -> Any:
        """``write(*args)`` (one append's statements: :meth:`_append_one` or
        :meth:`_append_row`) committed on this thread when the writer is idle, as
        :meth:`_inline` and :meth:`_append_batch_sync` do it, written out for one
        append (no list of requests, no results list, no per-request loop): what
        ``write`` returns, the refusal it raised (nothing written), or :data:`_BUSY`
        (nothing written) when the writer or the file's lock is busy. ``pages`` are
        the WAL pages it adds (as :func:`_pages`)."""
        if self._checkpoint_due or self._moved() or not self._writer_busy.acquire(blocking=False):
            return _BUSY  # (moved: the writer thread's _begin raises StoreLost)
        local = self._local
        local.inline = True
        conn = self._writer
        assert conn is not None
        cur = self._append_cursor
        try:
            try:
                try:
                    cur.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError:
                    self._begin(cur)  # (busy: raises _Busy; else the error, or it began)
                try:
                    try:
                        result = write(*args)
                    except (ConflictError, LeaseLost) as exc:
                        result = exc  # refused before anything was written
                    except sqlite3.IntegrityError as exc:
                        cur.execute("ROLLBACK")
                        return self._failure(exc)
                    cur.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                self.append_commits += 1
            except sqlite3.Error:
                with _translated(self.path, _agent_of(self.path, [_lone(args)])):
                    raise
        except _Busy:
            return _BUSY  # nothing written: wait for the lock on the writer thread
        finally:
            local.inline = False
            self._writer_busy.release()
        self._wal_pages += pages * self._wal_scale  # (_wrote, its common case written out)
        if self._wal_pages >= self._wal_limit:
            self._wrote(0)
        return result
