"""A private event loop on a background thread, for calling async code from sync code.

The sync facades (:class:`~statekeeper.store.sync.SyncStateStore`) run the one async
implementation through a portal instead of keeping a second, blocking copy of it.

Where the async core calls the user's code (a durable step's function, an update's
change function), the sync face runs that code in the *user's* thread, not on the
portal's loop: :meth:`Portal.serve` runs a coroutine that hands such calls back through
a :class:`Handoff`, and executes them in the thread that waits for it. The loop stays
free meanwhile (a lease's heartbeat keeps beating while the user's code blocks), and
the user's code sees its own thread (its thread-locals, a web framework's request).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, ParamSpec, TypeVar, cast

from ..errors import ConfigurationError, StoreClosed

__all__ = ["Handoff", "Portal", "iterate_with", "next_item"]

logger = logging.getLogger("statekeeper.store.portal")

T = TypeVar("T")
P = ParamSpec("P")


class Handoff:
    """The thread blocked in one :meth:`Portal.serve` call, seen from its coroutine:
    ``await handoff.run(fn, *args)`` runs ``fn`` in that thread and returns its result
    (or raises its exception) on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: (fn, args, kwargs, future) to run, or None: the coroutine is done
        self.inbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        #: (on the loop) the futures of the functions handed over and not yet settled;
        #: None once the serving thread has gone
        self._waiting: set[asyncio.Future[Any]] | None = set()

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, called in the serving thread (:class:`StoreClosed`
        once that thread has left, interrupted: nothing runs it)."""
        waiting = self._waiting
        if waiting is None:
            raise _left()
        future: asyncio.Future[T] = self._loop.create_future()
        waiting.add(future)
        self.inbox.put((fn, args, kwargs, future))
        try:
            return await future
        finally:
            waiting.discard(future)

    def leave(self) -> None:
        """(On the loop.) The serving thread was interrupted and has gone: the functions
        it did not finish (the one it ran when interrupted, those left in the inbox),
        and whatever is handed over later, fail with :class:`StoreClosed`. Its own
        coroutine is cancelled by then, but a task working for it is not — a coalesced
        ``update``'s runner applying its change function waited for ever, and every
        later update of the agent behind it."""
        waiting, self._waiting = self._waiting, None
        for future in waiting or ():
            _settle(future, None, _left())


def _left() -> StoreClosed:
    return StoreClosed("the thread that called this was interrupted: its function did not run")


def _on_own_loop(what: str) -> ConfigurationError:
    return ConfigurationError(
        f"{what} from code running on its own event loop (a state machine's guard, "
        "action, hook or callback) would wait for that loop for ever: make that code "
        "async and await the async store (the sync store's .store), or call it after the transition"
    )


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # (its coroutine was cancelled meanwhile)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Call:
    """One call in flight on the portal's loop, as its waiting thread sees it: it ends
    exactly once — with the coroutine's outcome, or cancelled — and ``ended`` is set."""

    __slots__ = (
        "cancelled",
        "coro",
        "ended",
        "error",
        "interruptible",
        "on_end",
        "result",
        "task",
        "thread",
    )

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        interruptible: bool,
        on_end: Callable[[], object] | None,
    ) -> None:
        self.coro: Coroutine[Any, Any, Any] | None = coro  # (until its task starts)
        self.thread = threading.get_ident()
        self.interruptible = interruptible
        self.on_end = on_end
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False  # cancelled before its task started
        self.ended = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def end(self, result: Any, error: BaseException | None) -> None:
        if self.ended.is_set():
            return
        self.result, self.error = result, error
        self.ended.set()
        if self.on_end is not None:
            self.on_end()

    def settle(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.end(None, asyncio.CancelledError())
        elif (error := task.exception()) is not None:
            self.end(None, error)
        else:
            self.end(task.result(), None)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The portal's thread (it holds the loop, not the portal: a portal nobody holds
    any more is collected, and its finalizer ends the loop). Once the loop stops,
    every task left on it is cancelled and run to its end, then the loop closes."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            rest = asyncio.all_tasks(loop)
            for task in rest:
                task.cancel()
            if rest:
                loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _abandon(
    loop: asyncio.AbstractEventLoop,
    pid: int,
    closers: list[Callable[[], Coroutine[Any, Any, object]]],
) -> None:
    """A portal was collected without :meth:`Portal.stop`: close what it served (a
    store, flushed) on its loop, then stop the loop. Never blocks (a collection may run
    on any thread, the loop's own included)."""
    if os.getpid() != pid:  # a copy in a forked child: the loop is the parent's
        return
    with contextlib.suppress(RuntimeError):  # (the loop is closed already)
        loop.call_soon_threadsafe(lambda: loop.create_task(_close_then_stop(loop, closers)))


async def _close_then_stop(
    loop: asyncio.AbstractEventLoop, closers: list[Callable[[], Coroutine[Any, Any, object]]]
) -> None:
    try:
        for closer in closers:
            try:
                await closer()
            except Exception as exc:  # nobody to tell but the log
                logger.warning("closing an abandoned sync store failed: %s", exc)
    finally:
        loop.stop()


class Portal:
    """Owns an event loop running on a daemon thread until :meth:`stop`.

    Every call ends — with its coroutine's outcome, or :class:`StoreClosed` when the
    portal stops under it — and never waits on a loop that is gone. Closing a sync
    store is :meth:`begin_close` (new calls from other threads are refused),
    :meth:`drain` (the calls in flight finish; see there), the store's own close, then
    :meth:`stop`. A portal in a process forked from the one that made it refuses every
    call (its thread exists only in the parent). A portal collected without
    :meth:`stop` closes what :meth:`on_abandon` registered, then ends its thread.
    """

    def __init__(self, name: str = "statekeeper-portal") -> None:
        self._loop = asyncio.new_event_loop()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._calls: set[_Call] = set()
        self._closing = False  # calls from threads other than the closer's are refused
        self._closer: int | None = None  # the closing thread's ident
        self._stopped = False
        self._done = threading.Event()  # stop() has finished
        self._closers: list[Callable[[], Coroutine[Any, Any, object]]] = []
        self._thread = threading.Thread(
            target=_run_loop, args=(self._loop,), name=name, daemon=True
        )
        self._thread.start()
        self._finalizer = weakref.finalize(self, _abandon, self._loop, self._pid, self._closers)
        self._finalizer.atexit = False  # (at exit, sync_exit flushes the stores still open)

    @property
    def forked(self) -> bool:
        """True in a process forked from the one that made this portal."""
        return os.getpid() != self._pid

    @property
    def running(self) -> bool:
        """True until a close begins (:meth:`begin_close`) or :meth:`stop`; False in a
        forked child."""
        return (
            not self.forked
            and not self._closing
            and self._thread.is_alive()
            and not self._loop.is_closed()
        )

    def on_abandon(self, closer: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Run ``closer()`` on the loop if this portal is collected without :meth:`stop`
        (``closer`` must not hold what holds the portal)."""
        self._closers.append(closer)

    def call(self, coro: Coroutine[Any, Any, T], *, interruptible: bool = False) -> T:
        """Run ``coro`` on the portal's loop and block until it returns (or raises).

        ``interruptible``: a wait that may not end by itself (a live subscription's
        next event): closing the portal cancels it instead of waiting for it. An
        interrupt here (``KeyboardInterrupt``) cancels the coroutine on the loop,
        waits for it to end, and is raised."""
        call = _Call(coro, interruptible, None)
        try:  # (from before it is registered: an interrupt anywhere cancels it)
            self._register(call)
            call.ended.wait()
        except BaseException:
            self._interrupt(call)
            raise
        return cast("T", self._outcome(call))

    def serve(self, make: Callable[[Handoff], Coroutine[Any, Any, T]]) -> T:
        """Run ``make(handoff)`` on the portal's loop, like :meth:`call`, and meanwhile
        run here, in the calling thread, every function it hands over with
        ``await handoff.run(fn, ...)``. An exception of such a function is raised in
        the coroutine (where the async core handles it as its own); an interrupt
        (``KeyboardInterrupt``) cancels the coroutine and is raised here. If the portal
        stops while such a function runs, its result is dropped (nothing records it)
        and :class:`StoreClosed` is raised once it returns."""
        handoff = Handoff(self._loop)
        call = _Call(make(handoff), False, lambda: handoff.inbox.put(None))
        try:
            self._register(call)
            while (item := handoff.inbox.get()) is not None:
                fn, args, kwargs, future = item
                if future.done():  # its call was cancelled meanwhile: not run
                    continue
                try:
                    result = fn(*args, **kwargs)
                except Exception as exc:
                    self._hand_back(future, None, exc)
                else:
                    self._hand_back(future, result, None)
            call.ended.wait()
        except BaseException:
            self._interrupt(call)
            self._call_soon(handoff.leave)
            raise
        return cast("T", self._outcome(call))

    def _call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the loop, unless the portal has stopped."""
        with self._lock:
            if not self._stopped:
                with contextlib.suppress(RuntimeError):  # (its loop is closed already)
                    self._loop.call_soon_threadsafe(fn)

    def _refusal(self) -> StoreClosed:
        if self.forked:
            return StoreClosed(
                f"this sync store was opened in process {self._pid}, and this process "
                f"({os.getpid()}) is a fork of it: its event loop runs only in the parent. "
                "Open a new SyncStateStore in this process"
            )
        return StoreClosed("the sync facade has been closed")

    def _register(self, call: _Call) -> None:
        """Have ``call`` start on the loop, or raise why not (its coroutine closed)."""
        if self.forked:  # (before the lock: another thread may have held it at the fork)
            raise self._refusal()
        if threading.current_thread() is self._thread:
            raise _on_own_loop("a blocking call of a sync store")
        with self._lock:
            if (
                self._stopped
                or (self._closing and call.thread != self._closer)
                or not self._thread.is_alive()
            ):
                raise self._refusal()
            self._calls.add(call)
            # (scheduled under the lock: before stop()'s loop.stop, so it starts)
            self._loop.call_soon_threadsafe(self._start, call)

    def _start(self, call: _Call) -> None:
        """Start ``call``'s task (on the loop; a second time, nothing)."""
        coro, call.coro = call.coro, None
        if coro is None:
            return
        if call.cancelled:
            coro.close()
            call.end(None, asyncio.CancelledError())
            return
        call.task = self._loop.create_task(coro)
        call.task.add_done_callback(call.settle)

    def _cancel_on_loop(self, call: _Call) -> None:
        if call.task is not None:
            call.task.cancel()
        else:
            call.cancelled = True

    def _cancel(self, call: _Call) -> None:
        with self._lock:
            if call.ended.is_set() or self._stopped:  # (stop() ends every call)
                return
            self._loop.call_soon_threadsafe(self._cancel_on_loop, call)

    def _hand_back(
        self, future: asyncio.Future[Any], result: Any, error: BaseException | None
    ) -> None:
        with self._lock:
            if self._stopped:  # nobody waits for it any more
                return
            self._loop.call_soon_threadsafe(_settle, future, result, error)

    def _interrupt(self, call: _Call) -> None:
        """The calling thread was interrupted (or the call refused): cancel the call and
        wait for its end (the store is then as if it never ran, or ran whole)."""
        with self._lock:
            if call not in self._calls:  # never registered: it never reached the loop
                if call.coro is not None:
                    call.coro.close()
                return
            if not call.ended.is_set() and not self._stopped:  # (stop() ends every call)
                self._loop.call_soon_threadsafe(self._cancel_on_loop, call)
                # (and started, if the interrupt came before its start was scheduled)
                self._loop.call_soon_threadsafe(self._start, call)
        call.ended.wait()
        self._forget(call)

    def _forget(self, call: _Call) -> None:
        with self._lock:
            self._calls.discard(call)

    def _outcome(self, call: _Call) -> Any:
        self._forget(call)
        error = call.error
        if isinstance(error, asyncio.CancelledError):
            raise StoreClosed("the sync facade was closed while this call ran") from None
        if error is not None:
            raise error
        return call.result

    # -- closing -------------------------------------------------------------------------

    def begin_close(self) -> bool:
        """Refuse new calls from any thread but this one; True for the one caller that
        begins the close (False: it has begun, or this is a forked child)."""
        if self.forked:
            return False
        if threading.current_thread() is self._thread:
            raise _on_own_loop("closing a sync store")
        with self._lock:
            if self._closing or self._stopped:
                return False
            self._closing, self._closer = True, threading.get_ident()
            return True

    def drain(self) -> None:
        """Wait for the calls in flight to end. They finish — a save lands and its caller
        gets its result; a step's or an update's function, running in its caller's
        thread, returns and is recorded — except the waits that may not end by
        themselves (``interruptible`` calls: a live subscription's next event) and the
        closing thread's own calls (it closed from inside one: a step's function),
        which are cancelled: their callers get :class:`StoreClosed`."""
        me = threading.get_ident()
        with self._lock:
            calls = [call for call in self._calls if not call.ended.is_set()]
        for call in calls:
            if call.interruptible or call.thread == me:
                self._cancel(call)
        for call in calls:
            call.ended.wait()

    def wait_stopped(self) -> None:
        """Wait for a close another thread began (not when this thread has a call in
        flight: that close may be waiting for it)."""
        if self.forked or threading.current_thread() is self._thread:
            return
        me = threading.get_ident()
        with self._lock:
            mine = any(c.thread == me and not c.ended.is_set() for c in self._calls)
        if not mine:
            self._done.wait()

    def stop(self) -> None:
        """Stop the loop and join its thread; a call still in flight is cancelled and its
        caller gets :class:`StoreClosed`. Idempotent."""
        self._finalizer.detach()
        if self.forked:  # nothing of the parent's is touched from here
            self._stopped = self._closing = True
            return
        with self._lock:
            if self._stopped:
                stopping = False
            else:
                stopping = self._stopped = self._closing = True
                with contextlib.suppress(RuntimeError):  # (its loop is closed already)
                    self._loop.call_soon_threadsafe(self._loop.stop)
        if not stopping:
            self.wait_stopped()
            return
        try:
            if threading.current_thread() is not self._thread:
                self._thread.join()
        finally:
            with self._lock:
                rest = list(self._calls)
            for call in rest:  # (the loop is gone: whatever did not end, ends here)
                if call.coro is not None:
                    call.coro.close()
                call.end(None, asyncio.CancelledError())
            self._done.set()

    # -- sync faces of async constructs -------------------------------------------------

    @contextlib.contextmanager
    def enter(self, manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
        """Drive an async context manager from sync code: its ``__aenter__`` and
        ``__aexit__`` run on the portal's loop, the ``with`` block in this thread.
        The block's own exception wins over a :class:`StoreClosed` of the exit (the
        store was closed under the block)."""
        value = self.call(manager.__aenter__())
        try:
            yield value
        except BaseException as exc:
            try:
                suppress = self.call(manager.__aexit__(type(exc), exc, exc.__traceback__))
            except StoreClosed:
                suppress = False
            if not suppress:
                raise
        else:
            self.call(manager.__aexit__(None, None, None))

    def iterate(self, agen: AsyncIterator[T], *, interruptible: bool = False) -> Iterator[T]:
        """Drive an async iterator from sync code, one item per round trip
        (``interruptible``: see :meth:`call`)."""
        return iterate_with(functools.partial(self.call, interruptible=interruptible), agen)


async def next_item(agen: AsyncIterator[T]) -> tuple[bool, T | None]:
    """One step of ``agen``, to run on its own loop: ``(True, item)``, or
    ``(False, None)`` once it is exhausted."""
    try:
        return True, await agen.__anext__()
    except StopAsyncIteration:
        return False, None


def iterate_with(
    call: Callable[[Coroutine[Any, Any, tuple[bool, Any]]], tuple[bool, Any]],
    agen: AsyncIterator[T],
) -> Iterator[T]:
    """Drive ``agen`` from sync code through ``call`` (a portal's or a shared loop's
    ``call``), one item per call; the async iterator never leaves its loop."""
    while True:
        more, item = call(next_item(agen))
        if not more:
            return
        yield item
