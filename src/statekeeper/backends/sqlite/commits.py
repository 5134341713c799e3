"""The commit queue: the appends of one event loop made in the same tick share one
commit (group commit), inline on the loop or with the ``COMMIT`` on the commit
thread; each queued append's future settled with its own outcome."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import Awaitable, Sequence
from typing import Any

from ...errors import StoreClosed
from ...records import AppendRequest
from ..base import NextRow
from .appends import _agent_of
from .base import translated as _translated
from .checkpoints import _pages
from .connections import _Busy
from .engine import SQLiteEngine, _Outcome, _Queued
from .lone import _BUSY
from .loop import nothing_waits as _nothing_waits
from .running import PASS_EVERY, _monotonic, _running_loop
from .statements import _one_statement

#: a batch of the commit queue is committed on the event loop itself (BEGIN to COMMIT,
#: its fsync included) when it and the loop's ready callbacks (the saves the last
#: commit woke) are at most this many: then too little could use the loop during the
#: fsync for handing the COMMIT to the commit thread to pay for its two thread hops
#: (the thread's wake-up, then the loop's: ~100-250 us quiet, milliseconds on a loaded
#: machine, against a ~230 us fsync). A few agents then settle into one group a
#: commit, made on the loop, instead of two alternating groups handed off
#: (docs/benchmarks.md, "group3"). A batch of any size is also committed on the loop
#: when nothing else of the loop is ready or waiting (``SQLiteBackend._loop_idle``:
#: 16 or 64 agents in one group, every saver waiting for this commit;
#: docs/benchmarks.md, "group3: a batch committed on the loop"); with other work
#: ready, the batch is handed off so the loop runs it during the fsync.
INLINE_BATCH = 4


#: ``Future.set_result`` unbound, for :func:`_settle`'s ``map``
_set_result = asyncio.Future.set_result


def _settle(
    futures: Sequence[asyncio.Future[_Outcome]],
    outcome: Sequence[_Outcome] | BaseException,
) -> None:
    """Hand each queued append's future its result (``outcome[i]``), or the whole
    commit's failure. A future already done (its caller was cancelled) is left as it
    is: the append itself stands. (Futures and outcomes zipped: no index, no
    ``isinstance`` a future.)"""
    if isinstance(outcome, BaseException):
        for future in futures:
            if not future.done():
                future.set_exception(outcome)
        return
    assert len(futures) == len(outcome)
    try:
        # every future set by C code (``map`` of the C method, consumed by ``any``: no
        # bytecode an append); a future already done — its caller was cancelled —
        # raises InvalidStateError, a future of another class TypeError: then the
        # checked loop below settles the rest (those set here are done, skipped there)
        any(map(_set_result, futures, outcome))
        return
    except (asyncio.InvalidStateError, TypeError):
        pass
    for future, result in zip(futures, outcome, strict=True):
        if not future.done():
            future.set_result(result)


#: ``Future.cancelled`` unbound, for :func:`_any_cancelled`'s ``map``
_cancelled = asyncio.Future.cancelled


def _any_cancelled(futures: Sequence[asyncio.Future[_Outcome]]) -> bool:
    """Whether the caller of one of ``futures`` was cancelled: checked by C code (no
    bytecode a future), or a loop for futures of another class."""
    try:
        return any(map(_cancelled, futures))
    except TypeError:
        return any(f.cancelled() for f in futures)


def _outcome(
    future: asyncio.Future[list[_Outcome]],
) -> list[_Outcome] | BaseException:
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()


#: the entry of a commit queue while its first append lets the loop run once
_OPENED: Any = (None, None)
#: what a loop without asyncio's ``_ready`` queue answers for it: "others are ready"
_ALWAYS = (None,)


class SQLiteCommitQueue(SQLiteEngine):
    """The commit queue of each event loop: group commits."""

    # -- the commit queue: group commit of the appends of one event loop ----------------
    #
    # An append joins its loop's queue; the first one schedules a flush with call_soon,
    # so every append made by the tasks ready in the same tick joins before the flush
    # runs (a loop of saves also yields to the loop once per save: it cannot starve
    # other tasks). The flush commits the queue as one transaction: inline, on the
    # loop, when the writer is idle and the batch is one append, a few, or the loop
    # would have nothing else to run during the commit (every saver waits for it: no
    # thread hop, the loop blocked for that transaction only); else its statements on
    # the loop and its COMMIT on the commit thread (or all of it on the writer thread
    # when the writer is busy), so the loop runs its other work while this one is
    # fsync'd. While a batch of a loop is in flight, that loop's new appends wait in
    # its queue and go together as the next batch the moment it is done (group commit:
    # one commit in flight, the next one filling up) — at most MAX_BATCH a commit.

    #: the most appends one commit of the queue takes
    MAX_BATCH = 512

    def _join_commit(
        self, request: _Queued, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[_Outcome]:
        """``request`` joins ``loop``'s queue (the running loop: the caller asked for
        it already — in CPython 3.11 each ``get_running_loop`` is a ``getpid`` system
        call)."""
        if self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        future: asyncio.Future[_Outcome] = loop.create_future()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = []
            if loop not in self._in_flight:  # else the batch in flight flushes it
                loop.call_soon(self._flush, loop)
        queue.append((request, future))
        return future

    def _commit_one(
        self, request: AppendRequest | None, row: NextRow | None
    ) -> Awaitable[_Outcome]:
        """One append to commit, as :meth:`append` (``request``) and :meth:`append_next`
        (``row``, its arguments as they are) commit it; awaited, what it comes to (the
        result, None for a ``row``; or the refusal or error to raise). On the writer
        thread without inline writes; else it joins the running loop's queue when one
        is open (appends waiting, or a batch in flight), or opens it
        (:meth:`_open_commit`). A plain call handing back what to await, not a
        coroutine of its own, through which every suspension of the append would pass:
        that cost an ``append`` or ``append_next`` 7-14 bytecodes more than the two
        written out, this call 4-9 (``sys.settrace`` opcode counts, 1,000 appends)."""
        if not self.inline_writes:
            return self._write_one(request if request is not None else row)  # type: ignore[arg-type]
        loop = _running_loop()
        if loop in self._queues or loop in self._in_flight:
            return self._join_commit(request if request is not None else row, loop)  # type: ignore[arg-type]
        return self._open_commit(loop, request, row)

    async def _write_one(self, queued: _Queued) -> _Outcome:
        """``queued`` committed alone on the writer thread."""
        done: list[_Outcome] = await self._write(self._append_batch_sync, [queued])
        return done[0]

    async def _open_commit(
        self, loop: asyncio.AbstractEventLoop, request: AppendRequest | None, row: NextRow | None
    ) -> _Outcome:
        """The first append of an empty queue (``request``, or ``row`` from
        :meth:`append_next`). When another task of the loop is ready to run, it lets
        the loop run once (the appends of the tasks ready now join it; a flush
        scheduled with call_soon and a wake-up from its future took two passes), then
        flushes the queue itself. Alone after that pass — or with nothing else ready
        and a pass made less than :data:`PASS_EVERY` ago: no other task could join it
        or is kept waiting for it, and the I/O and timers the pass would poll wait at
        most that long —, it is committed here without the queue's bookkeeping (no
        future, no request list, no _flush or _settle); the result of a ``row`` is
        None. (Whether another task is ready is the loop's ``_ready`` queue: asyncio's
        event loops have one; a loop without it gets a pass every time.) Once
        :data:`PASS_EVERY` went by, the loop is polled first (:func:`_nothing_waits`: one
        poll of its selector and a look at its earliest timer): the pass is made when
        it would run something — I/O ready, a timer due —, and skipped (the bound
        starting again) when it would only have polled: at ``synchronous=FULL`` every
        save outlasts ``PASS_EVERY`` (its fsync) and starts on cold caches, where the
        pass's code (``_run_once``, the task's step) cost 7–11 % of a save's CPU
        (docs/benchmarks.md, "savecpu").

        During the pass the queue holds a placeholder: nothing else flushes a queue
        this method opened (a flush is scheduled only with a queue's first append, and
        no batch of this loop is in flight), so it is replaced by the real entry
        before any flush sees it."""
        if self._closed:
            raise StoreClosed(f"sqlite backend {self.path} is closed")
        queue = None
        skip = not getattr(loop, "_ready", _ALWAYS)  # no other task is ready
        if skip and _monotonic() >= self._pass_due:  # PASS_EVERY went by: anything waiting?
            skip = _nothing_waits(loop)
            if skip:  # polled: the bound starts again from here
                self._pass_due = _monotonic() + PASS_EVERY
        if not skip:
            queue = self._queues[loop] = [_OPENED]
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                if self._queues.get(loop) is queue:  # the others that joined still go
                    del queue[0]
                    if queue:
                        loop.call_soon(self._flush, loop)
                    else:
                        del self._queues[loop]
                raise
            self._pass_due = _monotonic() + PASS_EVERY
        if queue is None or (len(queue) == 1 and not self._closed):
            if queue is not None:
                del self._queues[loop]
            if request is not None:
                result = (
                    self._commit_statement(request)
                    if self._save_next and _one_statement(request)
                    else self._commit_lone(
                        _pages((request,)), self._append_one, self._append_cursor, request
                    )
                )
            else:
                assert row is not None
                result = (
                    self._row_statement(row)
                    if self._save_next and row[1] != 1
                    else self._commit_lone(
                        3 + ((len(row[3]) + 1100) >> 11),
                        self._append_row,
                        self._append_cursor,
                        *row,
                    )
                )
            if result is not _BUSY:
                self._committed(1)
                return result  # type: ignore[no-any-return]
            # the writer is busy: the thread takes it
            queue = self._queues[loop] = [_OPENED] if queue is None else queue
        future: asyncio.Future[_Outcome] = loop.create_future()
        queue[0] = (request if request is not None else row, future)  # type: ignore[assignment]
        self._flush(loop)
        return await future

    def _inline(self, requests: Sequence[_Queued]) -> list[_Outcome] | None:
        """Commit ``requests`` on this thread when the writer is idle and no checkpoint
        waits; None (nothing written) when the writer or the file's lock is busy."""
        if self._checkpoint_due or not self._writer_busy.acquire(blocking=False):
            return None
        local = self._local
        local.inline = True
        try:
            return self._append_batch_sync(requests)
        except _Busy:
            return None  # nothing written: wait for the lock on the writer thread
        finally:
            local.inline = False
            self._writer_busy.release()

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        pending = self._queues.pop(loop, None)
        if not pending:
            return
        if len(pending) > self.MAX_BATCH:
            self._queues[loop] = pending[self.MAX_BATCH :]
            del pending[self.MAX_BATCH :]
        # the queue's requests and their futures, apart (one C-level pass: every entry
        # is a pair); an append whose caller was cancelled before this flush is
        # dropped (nothing written)
        requests, futures = zip(*pending, strict=False)
        if _any_cancelled(futures):
            kept = [(r, f) for r, f in pending if not f.cancelled()]
            if not kept:
                return self._next(loop)
            requests, futures = zip(*kept, strict=False)
        if self._closed:
            _settle(futures, StoreClosed(f"sqlite backend {self.path} is closed"))
            return self._next(loop)
        # As in _write: a checkpoint queued on the writer thread goes first, and this
        # commit queues behind it there. (Winning the idle lock inline here instead let
        # a loop of saves starve the checkpoint on a loaded machine: the WAL grew by
        # every commit made while it waited, 14-17 MB instead of ~7 MB in CI.)
        ready = getattr(loop, "_ready", None)  # (None: a loop without it, e.g. uvloop)
        inline = (
            len(requests) == 1
            or (ready is not None and len(requests) + len(ready) <= INLINE_BATCH)
            or (ready is not None and not ready and self._loop_idle(loop))
        )
        try:  # committed here, or its statements written here and COMMIT handed off
            results = self._inline(requests) if inline else self._write_batch(requests)
        except BaseException as exc:
            _settle(futures, exc)
            if not isinstance(exc, Exception):
                raise
            return self._next(loop)
        if results is not None:  # (None: nothing written, the writer thread takes it)
            if inline:
                _settle(futures, results)
                self._committed(len(requests))
                return self._next(loop)
            # the transaction is open, _writer_busy held
            if not self._hand_commit(loop, futures, requests, results):
                _settle(futures, StoreClosed(f"sqlite backend {self.path} is closed"))
                return self._next(loop)
            self._in_flight.add(loop)  # (its landing runs on this loop: after this)
            return None
        try:
            done = loop.run_in_executor(
                self._writer_pool, self._locked, self._append_batch_sync, requests
            )
        except RuntimeError:  # the writer pool was shut down by close()
            _settle(futures, StoreClosed(f"sqlite backend {self.path} is closed"))
            return self._next(loop)
        self._in_flight.add(loop)
        done.add_done_callback(functools.partial(self._landed_future, loop, futures, len(requests)))
        return None

    def _loop_idle(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether ``loop`` would sit idle during a batch's commit: no other callback
        ready (checked by the caller) and no I/O or timer waiting — not polled when a
        pass of the loop was made less than :data:`PASS_EVERY` ago (as a lone append's
        :meth:`commit_next`). Then the batch is committed on the loop, its fsync
        included (:meth:`_flush`): handing its COMMIT to the commit thread would leave
        the loop nothing to do but wait for the landing, and the two thread hops cost
        more than the overlap they allow (docs/benchmarks.md, "group3: a batch
        committed on the loop")."""
        now = _monotonic()
        if now < self._pass_due:
            return True
        if not _nothing_waits(loop):
            return False
        self._pass_due = now + PASS_EVERY
        return True

    def _landed_future(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        appends: int,
        f: asyncio.Future[list[_Outcome]],
    ) -> None:
        self._landed(loop, futures, appends, _outcome(f))

    def _landed(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        appends: int,
        outcome: list[_Outcome] | BaseException,
    ) -> None:
        """A batch of ``loop``'s queue is done (committed, or failed as a whole): its
        appends learn their outcomes and the appends that queued meanwhile go next."""
        self._in_flight.discard(loop)
        _settle(futures, outcome)
        if not isinstance(outcome, BaseException):
            self._committed(appends)
        self._next(loop)

    def _write_batch(self, requests: Sequence[_Queued]) -> list[_Outcome] | None:
        """BEGIN and the statements of several appends, on this thread (the event loop),
        the transaction left open for :meth:`_hand_commit` with ``_writer_busy`` held;
        None (nothing written, nothing held) when the writer or the file's lock is busy
        or a checkpoint waits.

        Why the loop writes the batch itself: on the writer thread, every statement
        releases the GIL and must take it back from the loop, which holds it while it
        prepares the next batch's saves — so the writer's statements ran only once the
        loop went idle, and the commit never overlapped the loop's work
        (docs/benchmarks.md, "group11"). Written here, only the COMMIT (the fsync,
        GIL released) is left for another thread."""
        if self._checkpoint_due or not self._writer_busy.acquire(blocking=False):
            return None
        local = self._local
        local.inline = True
        conn = self._writer
        assert conn is not None
        cur = self._append_cursor
        try:
            try:
                self._begin(cur)
                try:
                    try:
                        results = self._append_all(cur, requests)
                    except sqlite3.IntegrityError:
                        # a constraint fired after some rows of a request were written
                        cur.execute("ROLLBACK")
                        self._begin(cur)
                        results = self._append_all(cur, requests, savepoints=True)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error:
                with _translated(self.path, _agent_of(self.path, requests)):
                    raise
        except _Busy:
            local.inline = False
            self._writer_busy.release()
            return None  # nothing written: wait for the lock on the writer thread
        except BaseException:
            local.inline = False
            self._writer_busy.release()
            raise
        local.inline = False
        return results

    def _hand_commit(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        requests: Sequence[_Queued],
        results: list[_Outcome],
    ) -> bool:
        """COMMIT the transaction :meth:`_write_batch` left open, on the commit thread;
        the loop waits until that thread runs (it holds the GIL then, and lets go of it
        in the COMMIT's fsync) instead of letting it wait for the GIL until the loop is
        idle. The thread hands the outcome back to ``loop`` itself (:meth:`_landed`,
        with ``call_soon_threadsafe``: no executor future, nor the asyncio future
        chained to it, nor the extra pass of the loop that chain took). False when the
        commit pool was shut down (rolled back here).

        The wait is a bare lock the thread releases (no ``threading.Event``: its
        condition variable, waiter lock and ``with`` blocks were Python run on both
        threads at every commit)."""
        entered = threading.Lock()
        entered.acquire()
        try:
            self._commit_pool.submit(
                self._commit_written, loop, futures, requests, results, entered
            )
        except RuntimeError:  # shut down by close()
            conn = self._writer
            if conn is not None and conn.in_transaction:
                conn.execute("ROLLBACK")
            self._writer_busy.release()
            return False
        entered.acquire()  # released by the commit thread once it runs
        return True

    def _commit_written(
        self,
        loop: asyncio.AbstractEventLoop,
        futures: Sequence[asyncio.Future[_Outcome]],
        requests: Sequence[_Queued],
        results: list[_Outcome],
        entered: threading.Lock,
    ) -> None:
        entered.release()  # first: the loop waits for it
        outcome: list[_Outcome] | BaseException = results
        try:
            conn = self._writer
            try:
                assert conn is not None  # (closing takes _writer_busy first: held here)
                try:
                    try:
                        self._append_cursor.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                except sqlite3.Error:
                    with _translated(self.path, _agent_of(self.path, requests)):
                        raise
                self.append_commits += 1
            finally:
                self._writer_busy.release()
            self._wrote(_pages(requests))
        except BaseException as exc:  # the whole commit failed: every append learns it
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(self._landed, loop, futures, len(requests), outcome)

    def _committed(self, appends: int) -> None:
        for listener in self.commit_listeners:
            listener(appends)

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        """After a commit of ``loop``'s queue: the appends that joined meanwhile go next."""
        if loop in self._queues and loop not in self._in_flight:
            self._flush(loop)
