"""The sync store's event loop, for calling async code from sync code (:class:`Portal`).

The sync facades (:class:`~statekeeper.store.sync.SyncStateStore`) run the one async
implementation through a portal instead of keeping a second, blocking copy of it. A
portal is a :class:`~.shared_loop.SharedLoop`: a blocking call runs its coroutine on the
*calling* thread when nobody else runs the loop (no thread hop: issue 11), hands it to
the thread running the loop otherwise (calls from many threads share the loop, so
their writes share commits), and a background thread runs the loop for timers and
background tasks (a ``group`` flush, a heartbeat, ``settle_after``) while no call does.
The portal adds the sync store's contract on top: closing with calls in flight
(:meth:`Portal.begin_close`, :meth:`Portal.drain`), waits that closing may end
(``interruptible``), and closing a store that was dropped without ``close``.

Where the async core calls the user's code (a durable step's function, an update's
change function), the sync face runs that code in the *user's* thread, not on the
portal's loop: :meth:`Portal.serve` runs a coroutine that hands such calls back through
a :class:`Handoff`, and executes them in the thread that waits for it. The loop stays
free meanwhile (a lease's heartbeat keeps beating while the user's code blocks), and
the user's code sees its own thread (its thread-locals, a web framework's request).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import os
import queue
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, ParamSpec, TypeVar

from ..errors import ConfigurationError, StoreClosed
from .iterating import iterate_with, next_item
from .portal_ends import Remains, abandon, end_tasks, weak_background
from .shared_loop import SharedLoop

__all__ = ["Handoff", "Portal", "iterate_with", "next_item"]

logger = logging.getLogger("statekeeper.store.portal")

_get_running_loop = asyncio._get_running_loop

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


#: what a call still in flight when its portal stops raises
_STOPPED_UNDER = "the sync facade was closed while this call ran"
#: how often :meth:`Portal.stop` cancels again what still runs on the loop (a call
#: registered as the stop began may have made its task after the first cancel)
_RECANCEL = 0.05


class _Call:
    """One call in flight (registered for :meth:`Portal.drain` and :meth:`Portal.stop`)."""

    __slots__ = ("cancelled", "ended", "interruptible", "task", "thread")

    def __init__(self, thread: int, interruptible: bool) -> None:
        self.thread = thread
        self.interruptible = interruptible
        #: its task (calls that closing may cancel: interruptible and served ones)
        self.task: asyncio.Task[Any] | None = None
        self.cancelled = False
        self.ended = False


async def _cancellable(call: _Call, coro: Coroutine[Any, Any, T]) -> T:
    """``coro``, its task known to ``call`` (for :meth:`Portal._cancel`)."""
    call.task = asyncio.current_task()
    if call.cancelled:  # (cancelled before it started)
        coro.close()
        raise asyncio.CancelledError
    return await coro


class Portal(SharedLoop):
    """The sync store's :class:`~.shared_loop.SharedLoop`, with the sync store's
    contract on top.

    Every call ends — with its coroutine's outcome, or :class:`StoreClosed` when the
    portal stops under it — and never waits on a loop that is gone. Closing a sync
    store is :meth:`begin_close` (new calls from other threads are refused),
    :meth:`drain` (the calls in flight finish; see there), the store's own close, then
    :meth:`stop`. A portal in a process forked from the one that made it refuses every
    call (the threads running its loop exist only in the parent). A portal collected
    without :meth:`stop` closes what :meth:`on_abandon` registered, then ends its loop
    (:mod:`.portal_ends`).
    """

    _closed_message = "the sync facade has been closed"

    def __init__(self, name: str = "statekeeper-portal") -> None:
        self._remains = remains = Remains()  # (before the thread is made: see _thread_target)
        super().__init__(name, instead="SyncStateStore")
        remains.loop = self._loop
        self._pid = remains.pid
        self._lock = threading.Lock()
        #: notified when a call ends (``drain``, ``stop`` and an interrupt wait on it)
        self._call_ended = threading.Condition(self._lock)
        self._calls: set[_Call] = set()
        self._closing = False  # calls from threads other than the closer's are refused
        self._closer: int | None = None  # the closing thread's ident
        self._stopped = False
        self._done = threading.Event()  # stop() has finished
        self._finalizer = weakref.finalize(self, abandon, remains, self._thread, self._kick)
        self._finalizer.atexit = False  # (at exit, sync_exit flushes the stores still open)

    def _thread_target(self) -> Callable[[], None]:
        return functools.partial(weak_background, weakref.ref(self), self._kick, self._remains)

    def _reentered(self) -> BaseException:
        return _on_own_loop("a blocking call of a sync store")

    def refuse_on_loop(self, what: str) -> None:
        if self.on_loop() and not self.forked:  # (a forked child's close only marks it)
            raise _on_own_loop(what)

    @property
    def forked(self) -> bool:
        """True in a process forked from the one that made this portal."""
        return os.getpid() != self._pid

    @property
    def running(self) -> bool:
        """True until a close begins (:meth:`begin_close`) or :meth:`stop`; False in a
        forked child."""
        return not self._closing and super().running

    def on_abandon(self, closer: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Run ``closer()`` on the loop if this portal is collected without :meth:`stop`
        (``closer`` must not hold what holds the portal)."""
        self._remains.closers.append(closer)

    def _register(self, interruptible: bool) -> _Call:
        """A call of this thread, registered; or raise why not."""
        if self._closed:  # (before the lock: in a fork, another thread may have held it)
            raise self._refusal()
        call = _Call(threading.get_ident(), interruptible)
        with self._lock:
            if self._closing and (self._stopped or call.thread != self._closer):
                raise self._refusal()
            self._calls.add(call)
        return call

    def _end(self, call: _Call) -> None:
        with self._lock:
            call.ended = True
            self._calls.discard(call)
            self._call_ended.notify_all()  # (nobody waiting: a look at an empty list)

    def _wait_ended(self, calls: list[_Call], recancel: bool = False) -> None:
        with self._lock:
            while any(not call.ended for call in calls):
                if not self._call_ended.wait(_RECANCEL if recancel else None) and recancel:
                    with contextlib.suppress(RuntimeError):  # (its loop is closed already)
                        self._loop.call_soon_threadsafe(_cancel_all, self._loop)
                    self._kick.set()

    def _refusal(self) -> BaseException:
        if self.forked:  # (its message names the fork: forks.watch)
            return super()._refusal()
        return StoreClosed(self._closed_message)

    def call(
        self, coro: Coroutine[Any, Any, T], *, interruptible: bool = False, bare: bool = False
    ) -> T:
        """Run ``coro`` on the loop and block until it returns (or raises): on this
        thread when nobody else runs the loop (see :meth:`SharedLoop.call`).

        ``interruptible``: a wait that may not end by itself (a live subscription's
        next event): closing the portal cancels it instead of waiting for it. An
        interrupt here (``KeyboardInterrupt``) cancels the coroutine, lets it end, and
        is raised."""
        try:
            call = self._register(interruptible)
        except BaseException:
            coro.close()
            raise
        inner = coro
        try:
            if _get_running_loop() is not None and self._driver != call.thread:
                coro = _cancellable(call, coro)
                return self._from_another_loop(call, coro)
            if interruptible:
                coro = _cancellable(call, coro)
            return super().call(coro, bare=bare)
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            raise StoreClosed(_STOPPED_UNDER) from None
        finally:
            if inner is not coro and inspect.getcoroutinestate(inner) == inspect.CORO_CREATED:
                inner.close()  # (its wrapper never ran)
            self._end(call)

    def _from_another_loop(self, call: _Call, coro: Coroutine[Any, Any, T]) -> T:
        """(A thread running another event loop, a notebook's cell: it cannot run this
        one.) ``coro`` handed to the background thread; an interrupt cancels it, waits
        for its end and is raised (it went on unseen: a save interrupted still landed)."""
        future = self._handed(coro)
        try:
            return future.result()
        except BaseException:
            if not future.done():
                self._cancel(call)
                concurrent.futures.wait((future,))  # (a second interrupt: at once)
            raise

    def serve(self, make: Callable[[Handoff], Coroutine[Any, Any, T]]) -> T:
        """Run ``make(handoff)`` on the loop, like :meth:`call`, and meanwhile run here,
        in the calling thread, every function it hands over with ``await
        handoff.run(fn, ...)``: the loop is run by its background thread meanwhile (a
        lease's heartbeat goes on while the function blocks). An exception of such a
        function is raised in the coroutine (where the async core handles it as its
        own); an interrupt (``KeyboardInterrupt``) cancels the coroutine and is raised
        here. If the portal stops while such a function runs, its result is dropped
        (nothing records it) and :class:`StoreClosed` is raised once it returns."""
        if self._driver == threading.get_ident():
            raise self._reentered()
        call = self._register(False)
        handoff = Handoff(self._loop)
        future: concurrent.futures.Future[T] | None = None
        try:
            future = self._handed(_cancellable(call, make(handoff)))
            future.add_done_callback(lambda _: self._end(call))
            future.add_done_callback(lambda _: handoff.inbox.put(None))
            while (item := handoff.inbox.get()) is not None:
                fn, args, kwargs, settled = item
                if settled.done():  # its call was cancelled meanwhile: not run
                    continue
                try:
                    result = fn(*args, **kwargs)
                except Exception as exc:
                    self._hand_back(settled, None, exc)
                else:
                    self._hand_back(settled, result, None)
        except BaseException:
            if future is None:
                self._end(call)
            self._cancel(call)
            self._wait_ended([call])
            self._call_soon(handoff.leave)
            raise
        try:
            return future.result()
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            raise StoreClosed(_STOPPED_UNDER) from None

    def _call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the loop soon, unless the portal has stopped."""
        with self._lock:
            if not self._stopped:
                with contextlib.suppress(RuntimeError):  # (its loop is closed already)
                    self._loop.call_soon_threadsafe(fn)
        self._kick.set()  # (the background thread runs it, should no call run the loop)

    def _cancel(self, call: _Call) -> None:
        """Cancel ``call`` (an interruptible or served one: it knows its task)."""
        call.cancelled = True
        task = call.task
        if task is not None:
            self._call_soon(task.cancel)

    def _hand_back(
        self, future: asyncio.Future[Any], result: Any, error: BaseException | None
    ) -> None:
        with self._lock:
            if self._stopped:  # nobody waits for it any more
                return
            self._loop.call_soon_threadsafe(_settle, future, result, error)

    # -- closing -------------------------------------------------------------------------

    def begin_close(self) -> bool:
        """Refuse new calls from any thread but this one; True for the one caller that
        begins the close (False: it has begun, or this is a forked child)."""
        if self.forked:
            return False
        if self._driver == threading.get_ident():
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
            calls = [call for call in self._calls if not call.ended]
        for call in calls:
            if call.interruptible or call.thread == me:
                self._cancel(call)
        self._wait_ended(calls)

    def wait_stopped(self) -> None:
        """Wait for a close another thread began (not when this thread has a call in
        flight: that close may be waiting for it)."""
        me = threading.get_ident()
        if self.forked or self._driver == me:
            return
        with self._lock:
            mine = any(c.thread == me and not c.ended for c in self._calls)
        if not mine:
            self._done.wait()

    def stop(self) -> None:
        """Stop the loop (and its background thread); a call still in flight is
        cancelled and its caller gets :class:`StoreClosed`. Idempotent. From code
        running on the loop: :class:`ConfigurationError`, nothing changed."""
        self.refuse_on_loop("closing a sync store")
        self._finalizer.detach()
        if self.forked:  # nothing of the parent's is touched from here
            self._stopped = self._closing = True
            return
        with self._lock:
            if self._stopped:
                stopping = False
            else:
                stopping = self._stopped = self._closing = True
                me = threading.get_ident()
                rest = [call for call in self._calls if call.thread != me]
        if not stopping:
            self.wait_stopped()
            return
        try:
            if rest:  # (stopped under calls: they are cancelled, and end)
                with contextlib.suppress(RuntimeError):  # (its loop is closed already)
                    self._loop.call_soon_threadsafe(_cancel_all, self._loop)
                self._kick.set()
                self._wait_ended(rest, recancel=True)
            super().stop()
        finally:
            self._done.set()

    def _last_rites(self) -> None:
        """Whatever is left on the loop (the store closed its own tasks: a portal
        stopped under calls, a store that failed to close) is cancelled and run to its
        end (on a thread of its own when this one runs another loop: it cannot run
        this one)."""
        if asyncio._get_running_loop() is not None:
            ender = threading.Thread(target=self._last_rites, name=self._thread.name)
            ender.start()
            ender.join()
            return
        if self._take():
            try:
                end_tasks(self._loop)
            finally:
                self._driver = None

    # -- sync faces of async constructs -------------------------------------------------

    @contextlib.contextmanager
    def enter(self, manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
        """Drive an async context manager from sync code: its ``__aenter__`` and
        ``__aexit__`` run on the loop, the ``with`` block in this thread. The block's
        own exception wins over a :class:`StoreClosed` of the exit (the store was
        closed under the block)."""
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
        """Drive an async iterator from sync code, one item per call
        (``interruptible``: see :meth:`call`)."""
        return iterate_with(functools.partial(self.call, interruptible=interruptible), agen)


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """(On the loop.) Cancel every task on it (the portal stops under calls) but the
    background thread's pass (:meth:`SharedLoop._settle`), which ends by itself."""
    settle = SharedLoop._settle.__code__
    for task in asyncio.all_tasks(loop):
        if getattr(task.get_coro(), "cr_code", None) is not settle:
            task.cancel()
