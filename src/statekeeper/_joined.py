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
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from .errors import ThreadStillRunning

__all__ = ["Worker", "released_after", "run_joined", "run_owned", "start_worker"]

T = TypeVar("T")
_log = logging.getLogger("statekeeper")


class Worker(Generic[T]):
    """``fn(*args)`` in a daemon thread of its own (the caller's context variables
    copied, as ``asyncio.to_thread``); :attr:`future` is its outcome on the loop."""

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], holds: str) -> None:
        self.loop = asyncio.get_running_loop()
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
        self.thread.start()

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


def start_worker(fn: Callable[..., T], *args: Any, holds: str = "") -> Worker[T]:
    """:class:`Worker`: ``fn(*args)`` started in its own thread (from the loop)."""
    return Worker(fn, args, holds)


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
    worker = start_worker(fn, *args, holds=holds)
    try:
        return await worker.outcome()
    except asyncio.CancelledError:
        stop()
        await _ended(worker)
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
    worker = start_worker(fn, *args, holds=holds)
    try:
        return await worker.outcome()
    except asyncio.CancelledError:
        if stop is not None:
            stop()

        def owned() -> None:
            if worker.result is not None:
                release(worker.result[0])

        try:
            await _ended(worker)
        except ThreadStillRunning:
            worker.after(owned)
            raise
        owned()
        raise


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
def released_after(release: Callable[[], None]) -> Iterator[None]:
    """``release()`` when the block ends; a :class:`ThreadStillRunning` leaving it:
    handed to that thread, which runs it when it ends (never closed under it)."""
    try:
        yield
    except ThreadStillRunning as exc:
        exc.after(release)
        raise
    except BaseException:
        release()
        raise
    release()
