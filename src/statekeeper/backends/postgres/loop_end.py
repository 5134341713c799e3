"""A PostgreSQL backend whose event loop ends while the backend is still open.

``asyncio.run`` (and ``asyncio.Runner``) ends by cancelling every task left on its loop
and waiting for all of them. An application that never closed its store (a LangGraph
saver of ``afrom_url`` it never ``aclose``\\ d) leaves the backend's connection pool
there, and on a server that refused connections ("too many clients already") that
went wrong twice:

* psycopg_pool's worker catches the ``CancelledError`` of the maintenance task it is
  running (a connection attempt, a ``reconnect_failed`` callback) and goes back to
  waiting on its queue, where nothing wakes it again: ``asyncio.run`` never returned;
* the other workers are cancelled with the rest, so the store's flush at the loop's
  end (the write-behind guard, :mod:`statekeeper.store.durability`) waited for a
  connection nobody would make — ``pool_timeout`` a try, ``retry_timeout`` in all,
  a minute by default — even when the server had a connection to give.

So an open backend keeps a watcher task on its loop (:class:`LoopEnd`). Cancelled with
the backend still open, it puts the backend in *ending* mode — a connection is one of
the pool's idle ones or one dialled for the operation, within ``connect_timeout``, and
an operation retries for at most ``min(retry_timeout, connect_timeout)`` — waits, for a
bounded time, for the loop's other tasks (the store's flush among them), then closes
the backend: the pool's ``StopWorker`` ends every worker, the ones that swallowed their
cancellation included.

A sync facade left open is flushed at interpreter exit on its own loop, whose pool
still runs (:mod:`statekeeper.store.sync_exit`); it says the process is exiting
(:func:`..recovery.process_exiting`) and the backend is in ending mode from then on
too: the flush tries for seconds, not for ``pool_timeout`` within ``retry_timeout``.

A worker that was opening a connection when the loop's end cancelled it (the pool's
``min_size`` fill, a replacement, a growth) has psycopg_pool log that cancellation as
a failed connection — "error connecting in 'statekeeper-<schema>': " with an empty
reason — though no connection failed and no operation of the application did:
:class:`_CancelledIsNoFailure` drops those records of this package's pools. A real
failure (an exception, not a cancellation) is still logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..recovery import exiting
from .connection import KeepsCursors, check_connection

if TYPE_CHECKING:
    from .backend import PostgresBackend

__all__ = ["POOL_PREFIX", "WATCHER", "LoopEnd", "open_pool"]

logger = logging.getLogger("statekeeper.backends.postgres")

#: the name of a backend's watcher task
WATCHER = "statekeeper-postgres-loop-end"

#: the tasks of every backend's pools (their workers and scheduler) and watchers: what
#: a watcher does not wait for at the loop's end (they end when their backend closes)
_OWN: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

#: the loop's other tasks are waited for at most this many retry budgets (plus
#: :data:`_SETTLE`): the store's flush, its settling of a lost reply and the tasks its
#: writes started each take one at most
_BUDGETS = 3
_SETTLE = 10.0


def _task_failed(args: tuple[Any, ...]) -> tuple[object, object]:
    pool = args[0].pool()  # (a maintenance task holds its pool by a weak reference)
    return getattr(pool, "name", None), args[2]


#: psycopg_pool's records of a maintenance task that raised: (the pool's name, the
#: exception) from each record's arguments
_POOL_FAILURES: dict[str, Callable[[tuple[Any, ...]], tuple[object, object]]] = {
    "error connecting in %r: %s": lambda args: (args[0], args[1]),
    "task run %s failed: %s: %s": _task_failed,
}


class _CancelledIsNoFailure(logging.Filter):
    """Drops psycopg_pool's warnings about a task of one of this package's pools that
    was cancelled (its loop ended), not failed: see the module's docstring."""

    def filter(self, record: logging.LogRecord) -> bool:
        take = _POOL_FAILURES.get(record.msg) if isinstance(record.msg, str) else None
        if take is None or not isinstance(record.args, tuple):
            return True
        try:
            name, exc = take(record.args)
        except Exception:  # pragma: no cover - another psycopg_pool's arguments
            return True
        cancelled = isinstance(exc, asyncio.CancelledError)
        return not (cancelled and isinstance(name, str) and name.startswith(POOL_PREFIX))


#: every pool of this package is named so (the backend's, its replica's)
POOL_PREFIX = "statekeeper-"

logging.getLogger("psycopg.pool").addFilter(_CancelledIsNoFailure())


async def open_pool(pool: AsyncConnectionPool[Any]) -> None:
    """Open ``pool`` (without waiting for its connections), its tasks noted as the
    backends' own (:data:`_OWN`)."""
    before = asyncio.all_tasks()
    await pool.open(wait=False)
    _OWN.update(asyncio.all_tasks() - before)


class LoopEnd:
    """The watcher of one backend (see the module's docstring)."""

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend
        self._ending = False
        self._stop: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def ending(self) -> bool:
        """The backend's loop ends with the backend open, or the interpreter exits
        (:func:`..recovery.exiting`): connections come from :meth:`connection`."""
        return self._ending or exiting()

    def budget(self) -> float:
        """How long an operation retries after lost connections: ``retry_timeout``,
        and at most ``connect_timeout`` while the loop ends."""
        backend = self._backend
        if self.ending:
            return min(backend.retry_timeout, backend.connect_timeout)
        return backend.retry_timeout

    def watch(self) -> None:
        """Watch the running loop (once: again only on another loop)."""
        loop = asyncio.get_running_loop()
        stop = self._stop
        if stop is not None and not stop.done() and stop.get_loop() is loop:
            return
        self._stop = stop = loop.create_future()
        self._task = task = loop.create_task(self._run(stop), name=WATCHER)
        _OWN.add(task)

    def check_loop(self) -> None:
        """Raise :class:`StoreClosed` when the loop the backend's pool runs on was closed
        without being ended (``run_until_complete`` then ``close``, a loop per job: no
        cancellation, so :meth:`_run` never ran). Was: an operation from the next loop
        took the dead loop's idle connection (working by luck), or raised an untyped
        ``RuntimeError: Event loop is closed`` (the pool growing), or waited
        ``retry_timeout`` for a connection the dead loop's workers would never make
        (30 s, then a ``BackendError`` blaming the server)."""
        if not self.dead():
            return
        self.bury(
            "was closed when the event loop it ran on was closed, with its connections "
            "(a loop closed without asyncio.run's end). A store serves one event loop: "
            "open a new store in this one"
        )
        self._backend._check_open()  # (raises)

    def dead(self) -> bool:
        """Was the loop the backend's pool runs on closed without being ended (see
        :meth:`check_loop`; a LangGraph saver's own loop, closed by ``saver.close()``
        with a store it was given still open, too)?"""
        stop = self._stop
        return stop is not None and not stop.done() and stop.get_loop().is_closed()

    def bury(self, why: str) -> None:
        """(The pool's loop is :meth:`dead`.) The backend is closed, ``why``, without
        that loop: its tasks (the pools' workers and scheduler, the watcher), which never
        run again, are closed here quietly — was: ``close()`` from another loop raised
        an untyped ``RuntimeError: Event loop is closed``, and each task's coroutine,
        closed by the garbage collector, printed that error once more — and the pools'
        idle connections are ended (libpq's ``finish``: no loop needed)."""
        dead = self._stop.get_loop() if self._stop is not None else None
        backend = self._backend
        backend._closed = True
        backend._closed_why = why
        pools = [backend._pool]
        if backend._replica is not None:
            pools.append(backend._replica.pool)
        tasks = [t for t in _OWN if t.get_loop() is dead]  # (they never run again)
        # and the pool schedulers' waits (wait_for's task of their Event.wait)
        events = [getattr(getattr(pool, "_sched", None), "_event", None) for pool in pools]
        for task in asyncio.all_tasks(dead) if dead is not None else ():
            frame = getattr(task.get_coro(), "cr_frame", None)
            if frame is not None and any(frame.f_locals.get("self") is e for e in events if e):
                tasks.append(task)
        for task in tasks:
            task._log_destroy_pending = False  # type: ignore[attr-defined]
            with contextlib.suppress(Exception):  # (its waits cancelled: a closed loop)
                task.get_coro().close()
        for pool in pools:
            for conn in list(getattr(pool, "_pool", ())):  # (psycopg_pool's idle ones)
                with contextlib.suppress(Exception):
                    conn.pgconn.finish()

    async def stop(self) -> None:
        """The backend was closed: the watcher ends (on its loop, when that is running)."""
        stop, task = self._stop, self._task
        if stop is None or stop.done() or task is None:
            return
        loop = stop.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - close is a coroutine
            running = None
        if running is not loop:
            with contextlib.suppress(RuntimeError):  # its loop was closed
                loop.call_soon_threadsafe(_resolve, stop)
            return
        stop.set_result(None)
        if task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, stop: asyncio.Future[None]) -> None:
        try:
            await stop
        except asyncio.CancelledError:
            if stop.done() and not stop.cancelled():
                raise  # closed just before: nothing to do
            await self._end()
            raise

    async def _end(self) -> None:
        """The loop ends with the backend open: let the loop's other tasks finish with
        connections had without the pool's (cancelled) workers, then close."""
        backend = self._backend
        self._ending = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _BUDGETS * self.budget() + _SETTLE
        me = asyncio.current_task()
        while True:
            others = {t for t in asyncio.all_tasks() if t is not me and t not in _OWN}
            left = deadline - loop.time()
            if not others or left <= 0:
                break
            await asyncio.wait(others, timeout=left)
        if others:
            logger.warning(
                "postgresql schema %r: %d task(s) still running when its event loop "
                "ended were not waited for any longer; closing its connections",
                backend.schema,
                len(others),
            )
        await _close(backend)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """(Ending.) One of the pool's idle connections, else one dialled for this use
        within ``connect_timeout`` and closed after it: the pool's workers, which would
        make new ones, were cancelled with the loop's other tasks (or the interpreter
        exits, and a wait for the pool's backoff would outlast the flush's budget)."""
        backend = self._backend
        pool = backend._pool
        while not pool.closed and pool.get_stats().get("pool_available", 0):
            conn = await pool.getconn(timeout=backend.connect_timeout)  # one is ready
            try:
                await check_connection(conn)
            except psycopg.Error:
                with contextlib.suppress(Exception):
                    await conn.close()
                await pool.putconn(conn)
                continue
            try:
                yield conn
            finally:
                await pool.putconn(conn)
            return
        try:
            async with asyncio.timeout(backend.connect_timeout):
                dialled = await KeepsCursors.connect(backend.dsn, **backend._connect_kwargs)
        except TimeoutError:
            raise psycopg.OperationalError(
                f"no answer within {backend.connect_timeout:g}s (connect_timeout)"
            ) from None
        try:
            await backend._configure(dialled)
            yield dialled
        finally:
            with contextlib.suppress(Exception):
                await dialled.close()


async def _close(backend: PostgresBackend) -> None:
    """Close ``backend`` at its loop's end: each part whatever the others do (closing a
    pool whose workers were cancelled raises the CancelledError of their gathering,
    after it told each worker to stop)."""
    backend._closed = True
    backend._closed_why = (
        "was closed when the event loop it ran on ended, with its connections. A store "
        "serves one event loop: open a new store in this one (for example one per "
        "asyncio.run)"
    )
    parts = [backend._feed.close()]
    if backend._replica is not None:
        parts.append(backend._replica.pool.close())
    parts.append(backend._pool.close())
    for part in parts:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await part


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
