"""Work in a thread that a cancellation does not leave running, and that a second
cancellation can always walk away from.

``await asyncio.to_thread(fn)`` cancelled (an asyncio cancel, a caller's timeout,
Ctrl-C under ``asyncio.run``) raises at once while the thread goes on: the caller's
``finally`` then closes what the thread still uses (a file it writes, a descriptor it
reads, a connection). :func:`run_joined` asks the thread to stop and waits for it
before the cancellation goes on (a backup's threads: ``governance/backup/joined.py``;
PostgreSQL's ``COPY`` out, ``backends/postgres/export.py``).

A thread its stop cannot reach (a write the kernel does not give back: a stalled
network file system) kept that wait going forever, Ctrl-C twice included (the second
one ends ``asyncio.run``, whose clean-up cancels the task again, and waited again; and
then for its default executor, which the thread was in). Now the thread is one of its
own (a daemon: never waited for by the interpreter's exit nor by ``asyncio.run``), and
a second cancellation while waiting raises
:class:`~statekeeper.errors.ThreadStillRunning` naming what the thread holds. Nothing
it holds is closed under it: the caller's clean-up hands its closing to the thread
(:func:`released_after`, :meth:`ThreadStillRunning.after`), which runs it when it ends.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from .errors import ThreadStillRunning

__all__ = [
    "ThreadScope",
    "Worker",
    "exited_after",
    "released_after",
    "run_joined",
    "run_owned",
    "start_worker",
    "thread_scope",
]

T = TypeVar("T")
_log = logging.getLogger("statekeeper")


class ThreadScope:
    """The :class:`Worker` threads started within a block (:func:`thread_scope`; in
    tasks it started too) that have not ended yet: what the block's clean-up closes
    is handed to them (:meth:`handed`), never closed under them, whatever leaves the
    block (a second cancel, a ``KeyboardInterrupt`` raised in the task's own code while
    a thread runs, any error)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[Worker[Any]] = set()

    def add(self, worker: Worker[Any]) -> None:
        with self._lock:
            self._live.add(worker)

    def discard(self, worker: Worker[Any]) -> None:
        with self._lock:
            self._live.discard(worker)

    def running(self) -> list[Worker[Any]]:
        with self._lock:
            live = list(self._live)
        return [worker for worker in live if not worker.ended()]

    def handed(
        self,
        release: Callable[[], None],
        leaving: BaseException | None = None,
        at_exit: Callable[[], None] | None = None,
    ) -> bool:
        """True: threads of the block still run, each asked to stop (nobody waits for
        them any more), ``release()`` left to the last of them to end (``leaving`` a
        :class:`ThreadStillRunning`: its thread's end first), ``at_exit()`` run at the
        interpreter's exit if they have not ended by then (a daemon: killed then; a
        temporary file's removal, safe under a writer); False: none does, ``release``
        not called (the caller's to call)."""
        if at_exit is not None and self.running():
            release = _at_exit_unless(release, at_exit)
        if isinstance(leaving, ThreadStillRunning):

            def then() -> None:  # (its thread ended: any other of the block next)
                if not self.handed(release):
                    release()

            leaving.after(then)
            return True
        live = self.running()
        if not live:
            return False
        for worker in live:
            worker.stop_soon()
        count = [len(live)]
        lock = threading.Lock()

        def one_ended() -> None:
            with lock:
                count[0] -= 1
                last = count[0] == 0
            if last:
                release()

        for worker in live:
            worker.after(one_ended)
        return True


#: what to remove at the interpreter's exit, left by threads that have not ended
_AT_EXIT: dict[int, Callable[[], None]] = {}
_AT_EXIT_LOCK = threading.Lock()


def _at_exit_unless(release: Callable[[], None], at_exit: Callable[[], None]) -> Callable[[], None]:
    """``at_exit`` registered for the interpreter's exit; ``release`` wrapped to drop it."""
    key = id(at_exit)
    with _AT_EXIT_LOCK:
        _AT_EXIT[key] = at_exit

    def released() -> None:
        with _AT_EXIT_LOCK:
            _AT_EXIT.pop(key, None)
        release()

    return released


@atexit.register
def _left_at_exit() -> None:
    """Run at the interpreter's exit, daemon threads still running (then killed): what
    they were left to remove (a backup's temporary file, a copy's folder: was left
    behind for ever)."""
    with _AT_EXIT_LOCK:
        left = list(_AT_EXIT.values())
        _AT_EXIT.clear()
    for remove in left:
        try:
            remove()
        except Exception:
            _log.warning("removing what a stopped thread left failed", exc_info=True)


#: the scopes of the block running (:func:`thread_scope`), innermost last
_SCOPES: contextvars.ContextVar[tuple[ThreadScope, ...]] = contextvars.ContextVar(
    "statekeeper_thread_scopes", default=()
)


@contextlib.contextmanager
def thread_scope() -> Iterator[ThreadScope]:
    """Within: every :class:`Worker` started (by this task or one it starts) is in the
    scope until its thread ends."""
    scope = ThreadScope()
    previous = _SCOPES.get()
    _SCOPES.set((*previous, scope))
    try:
        yield scope
    finally:
        _SCOPES.set(previous)


class Worker(Generic[T]):
    """``fn(*args)`` in a daemon thread of its own (the caller's context variables
    copied, as ``asyncio.to_thread``); :attr:`future` is its outcome on the loop."""

    def __init__(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        holds: str,
        stop: Callable[[], None] | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop = stop
        self.future: asyncio.Future[T] = self.loop.create_future()
        self.holds = holds or getattr(fn, "__qualname__", repr(fn))
        self._lock = threading.Lock()
        self._ended = False
        self._after: list[Callable[[], None]] = []
        self.result: tuple[T] | None = None  # (set in the thread, once fn returned)
        context = contextvars.copy_context()
        self.thread = threading.Thread(
            target=self._run, args=(context, fn, args), name="sk-joined", daemon=True
        )
        self._scopes = _SCOPES.get()
        for scope in self._scopes:
            scope.add(self)
        try:
            self.thread.start()
        except BaseException:  # (no thread: nothing to hand a clean-up to, ever)
            self._ended = True
            for scope in self._scopes:
                scope.discard(self)
            raise

    def _run(
        self, context: contextvars.Context, fn: Callable[..., T], args: tuple[Any, ...]
    ) -> None:
        error: BaseException | None = None
        try:
            self.result = (context.run(fn, *args),)
        except BaseException as exc:  # (handed to the waiting task, as to_thread does)
            error = exc
        with self._lock:
            self._ended = True
            after, self._after = self._after, []
        for scope in self._scopes:
            scope.discard(self)
        for release in after:  # (the caller walked away: what it left to this thread)
            try:
                release()
            except Exception:
                _log.warning("releasing what %s held failed", self.holds, exc_info=True)
        with contextlib.suppress(RuntimeError):  # (the loop is closed: nobody waits)
            self.loop.call_soon_threadsafe(self._settle, error)

    def _settle(self, error: BaseException | None) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            assert self.result is not None
            self.future.set_result(self.result[0])

    async def outcome(self) -> T:
        """:attr:`future`'s outcome (shielded: a cancellation leaves the thread be),
        the thread ended by then: joined (it only had to return), so a caller that
        counts threads finds none left."""
        try:
            return await asyncio.shield(self.future)
        finally:
            if self.future.done():
                self.thread.join()

    def stop_soon(self) -> None:
        """Ask the thread to stop (its ``stop``, if any; never raises: a clean-up's)."""
        if self.stop is not None:
            try:
                self.stop()
            except BaseException:  # (one more Ctrl-C: this is its clean-up already)
                _log.warning("stopping the thread of %s failed", self.holds, exc_info=True)

    def ended(self) -> bool:
        with self._lock:
            return self._ended

    def after(self, release: Callable[[], None]) -> None:
        """``release()`` once the thread has ended: by the thread, or now if it has."""
        with self._lock:
            if not self._ended:
                self._after.append(release)
                return
        release()

    def left(self) -> ThreadStillRunning:
        self.future.add_done_callback(_retrieved)  # (nobody awaits it any more)
        return ThreadStillRunning(self.holds, self.after)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def start_worker(
    fn: Callable[..., T],
    *args: Any,
    holds: str = "",
    stop: Callable[[], None] | None = None,
) -> Worker[T]:
    """:class:`Worker`: ``fn(*args)`` started in its own thread (from the loop)."""
    return Worker(fn, args, holds, stop)


async def run_joined(
    stop: Callable[[], None], fn: Callable[..., T], *args: Any, holds: str = ""
) -> T:
    """``fn(*args)`` in a thread, as ``asyncio.to_thread``; cancelled, ``stop()`` is
    called (it makes ``fn`` return or raise soon: a page backup's after the chunk in
    hand; it must not block: the loop runs it) and the thread is waited for, then the
    cancellation raised; what the stopped thread raised is dropped. Cancelled again
    meanwhile: :class:`~statekeeper.errors.ThreadStillRunning` (``holds``: what the
    thread holds, for its message), the thread left running, its
    :meth:`ThreadStillRunning.after` closing things once it ends."""
    worker = start_worker(fn, *args, holds=holds, stop=stop)
    try:
        return await worker.outcome()
    except asyncio.CancelledError:
        try:
            stop()
            await _ended(worker)
        except BaseException as exc:  # (ThreadStillRunning; a KeyboardInterrupt meanwhile)
            _interrupted(worker, exc)
            raise
        raise
    except BaseException as exc:  # (see _interrupted)
        _interrupted(worker, exc)
        raise


async def run_owned(
    fn: Callable[..., T],
    release: Callable[[T], None],
    *args: Any,
    stop: Callable[[], None] | None = None,
    holds: str = "",
) -> T:
    """``fn(*args)`` in a thread that opens what the caller then owns (a page snapshot:
    read transactions of the store); cancelled, ``stop()`` is called (if given), the
    thread is waited for (as :func:`run_joined`) and what it returned meanwhile given to
    ``release`` (was: left open, never closed), then the cancellation raised. Cancelled
    again: :class:`~statekeeper.errors.ThreadStillRunning`, and what the thread returns
    once it ends is released by the thread."""
    worker = start_worker(fn, *args, holds=holds, stop=stop)

    def owned() -> None:
        if worker.result is not None:
            release(worker.result[0])

    try:
        return await worker.outcome()
    except asyncio.CancelledError:
        try:
            if stop is not None:
                stop()
            await _ended(worker)
        except BaseException as exc:  # (ThreadStillRunning; a KeyboardInterrupt meanwhile)
            _interrupted(worker, exc)
            worker.after(owned)
            raise
        owned()
        raise
    except BaseException as exc:  # (what it opened: closed once it ends, if it did)
        _interrupted(worker, exc)
        worker.after(owned)
        raise


def _interrupted(worker: Worker[Any], exc: BaseException) -> bool:
    """True: ``exc`` (a ``KeyboardInterrupt``: Ctrl-C raised in the task's own code,
    not in the loop's wait; ``SystemExit``, ``GeneratorExit``) leaves while the thread
    still runs, treated as a second cancel: the thread asked to stop and left running,
    nothing it holds closed under it (the callers' clean-ups hand theirs to it:
    :func:`released_after`, :class:`ThreadScope`). False: the thread's own error."""
    if isinstance(exc, Exception) and worker.future.done():
        return False  # (what fn raised, handed over by the thread)
    if worker.ended():
        return False
    worker.stop_soon()
    worker.left()
    return True


async def _ended(worker: Worker[Any]) -> None:
    """Wait for ``worker``'s thread, its outcome retrieved (never logged as unhandled);
    cancelled meanwhile while it still runs: :class:`ThreadStillRunning`. So too when
    the task was cancelled twice before it ran (two quick Ctrl-C: the second ends
    ``asyncio.run``, whose clean-up cancels the task again before the first reached
    it; the task meets one ``CancelledError`` for both)."""
    running = worker.future
    task = asyncio.current_task()
    if task is not None and task.cancelling() > 1 and not worker.ended():
        raise worker.left()
    try:
        await worker.outcome()
    except asyncio.CancelledError:
        if not running.done() and not worker.ended():
            raise worker.left() from None
    except Exception:
        pass  # (what the stopped thread raised: the cancellation wins)
    if running.done() and not running.cancelled():
        running.exception()


@contextlib.contextmanager
def released_after(
    release: Callable[[], None], at_exit: Callable[[], None] | None = None
) -> Iterator[None]:
    """``release()`` when the block ends; a thread started within still running (a
    :class:`ThreadStillRunning` leaving it, a ``KeyboardInterrupt`` raised in the
    task's code meanwhile): handed to the threads, the last to end runs it (never
    closed under them); ``at_exit()`` at the interpreter's exit if none has ended."""
    with thread_scope() as scope:
        try:
            yield
        except BaseException as exc:  # (a KeyboardInterrupt with a thread running too)
            if not scope.handed(release, exc, at_exit):
                release()
            raise
        if not scope.handed(release, None, at_exit):
            release()


@contextlib.contextmanager
def exited_after(stack: contextlib.ExitStack) -> Iterator[contextlib.ExitStack]:
    """As :func:`released_after` for an :class:`~contextlib.ExitStack` entered as a
    ``with`` would: when no thread of the block runs, its contexts see the exception
    leaving the block (one that renames it: ``named_as_given``; was lost, the stack only
    closed); else the stack's closing is handed to the threads."""
    with thread_scope() as scope:
        try:
            yield stack
        except BaseException as exc:
            if scope.handed(stack.close, exc):
                raise
            if not stack.__exit__(type(exc), exc, exc.__traceback__):
                raise
            return
        if not scope.handed(stack.close):
            stack.close()
