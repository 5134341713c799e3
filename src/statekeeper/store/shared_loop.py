"""An event loop run by whichever thread needs it (:class:`SharedLoop`): the loop of the
sync faces — the LangGraph saver's, and the sync store's (:class:`~.portal.Portal`).

Why not a loop thread of its own (what the sync store's portal was until issue 11):
every sync call then went from the caller's thread to the loop thread and back. That costs ~25 µs
of CPU per call, and with 16 threads busy in LangGraph the loop thread must win the GIL
for every call, waiting up to the interpreter's switch interval (5 ms) each time: 16
threads on one SQLite file ran at 0.34x ``SqliteSaver`` (``docs/benchmarks.md``, issue
12). Here a sync call runs its coroutine on the calling thread, as ``SqliteSaver`` does:
the store is still driven from one event loop (its asyncio objects belong to it), only
the thread running that loop changes. A SQLite write then commits inline on the caller's
thread and a read uses that thread's read connection (see
:mod:`statekeeper.backends.sqlite`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import heapq
import inspect
import math
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..backends.sqlite.loop import live_timers
from ..errors import StoreClosed
from . import forks
from .handing import Handed
from .interrupts import MAIN_THREAD, Sigint
from .loop_faces import _CLOSED, Faces
from .loop_steps import LoopTasks, Rest, end_interrupted, next_due, nothing, run_ready, run_rounds

__all__ = ["Faces", "SharedLoop"]

T = TypeVar("T")

_get_ident = threading.get_ident
_get_hooks, _set_hooks = sys.get_asyncgen_hooks, sys.set_asyncgen_hooks
_get_running_loop, _set_running_loop = asyncio._get_running_loop, asyncio._set_running_loop


#: how often the background thread runs the loop for timers and background tasks
#: (claim renewal, a flush of the store's ``group`` durability) while no call runs it
_POLL = 0.02
#: and how long it sleeps when the loop holds no task at all (woken early by async work)
_IDLE = 1.0
#: how long the background thread keeps running the loop after the last async call
#: handed to it is done: async callers come in streams (a graph's steps), and a loop
#: left unrun between two of them cost each a wake-up of this thread (PostgreSQL, 16
#: ``ainvoke`` tasks: 0.9x ``AsyncPostgresSaver`` instead of 2.8x)
_GRACE = 0.05


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Waiter:
    """A thread waiting for its work on the loop, or for its turn to run the loop."""

    __slots__ = ("done", "event")

    def __init__(self, done: Callable[[], bool], event: threading.Event) -> None:
        self.done = done
        self.event = event


class SharedLoop(Faces):
    """One asyncio event loop that the threads calling the saver take turns running.

    * A sync :meth:`call` takes the loop when nobody runs it and runs it on the calling
      thread until its coroutine is done: no thread hop.
    * When another thread runs the loop, the call hands its coroutine to the loop (the
      runner runs it along with its own: concurrent writes share commits) and waits; when
      the runner leaves with the call not done yet, the call takes the loop over
      (leader/follower: the loop is never left unrun while a caller waits on it).
    * Async callers (:meth:`run`, from another event loop) and a sync call made from a
      thread that runs another event loop hand their work to a background thread, which
      takes the loop like any caller and runs it until that work is done.
    * The background thread also runs the loop every ``_POLL`` seconds while it holds
      tasks (a ``group`` durability flush, a claim's renewal in progress), and when a
      timer of the loop is due (:meth:`later`'s, a write-behind flush's): background
      work never waits for the next call, and a timer alone does not wake it every ``_POLL``.
    """

    def __init__(self, name: str = "statekeeper-langgraph", *, instead: str = "saver") -> None:
        """``name``: the background thread's; ``instead``: what a fork's copy tells to
        open in the child instead (:func:`.forks.watch`)."""
        self._loop = loop = asyncio.new_event_loop()
        self._tasks = LoopTasks(loop)  # (its tasks: whether they need it run)
        self._hooks = (loop._asyncgen_firstiter_hook, loop._asyncgen_finalizer_hook)  # type: ignore[attr-defined]  # (its async generator hooks: _step)
        self._mutex = threading.Lock()
        #: the thread running the loop now (None: nobody)
        self._driver: int | None = None
        self._waiters: list[_Waiter] = []
        #: work handed to the background thread, not done yet
        self._outstanding: set[concurrent.futures.Future[Any]] = set()
        #: guards ``_outstanding`` (apart from ``_mutex``: a waiter's ``done()``, called
        #: under ``_mutex``, reads it)
        self._handed_lock = threading.Lock()
        self._kick = threading.Event()
        #: the timers of :meth:`later`, a heap (under ``_handed_lock``): the thread wakes for each
        self._due: list[asyncio.TimerHandle] = []
        #: when the last async call was handed over (time.monotonic)
        self._last_handed = 0.0
        #: resolved (on the loop) when the handed work is all done; see _settle
        self._drained: asyncio.Future[None] | None = None
        #: the background thread's wait for more async work (see _settle): stop()
        #: resolves it, so closing never waits out the grace period
        self._grace: asyncio.Future[None] | None = None
        self._closed = False
        #: (loop time) when the background thread means to look at the loop again:
        #: ``inf`` while it plans its sleep, ``-inf`` while it runs a pass (:meth:`_plan`)
        self._sleep_until = -math.inf
        self._thread = threading.Thread(target=self._thread_target(), name=name, daemon=True)
        #: the background thread is started by the first work it has to do (see
        #: _wanted): a saver that only reads never starts it (a new saver's open
        #: started it, one of the three threads its open and first read cost)
        self._started = False
        self._start_lock = threading.Lock()
        # a fork's copy refuses calls, and its stop() leaves the loop alone (a thread
        # that ran it at the fork, its driver, exists only in the parent)
        forks.watch(self, instead)

    @property
    def running(self) -> bool:
        """True until :meth:`stop` has been called."""
        return not self._closed and not self._loop.is_closed()

    def on_loop(self) -> bool:
        """Whether this thread runs the loop now (the calling code runs on it)."""
        return self._driver == _get_ident()

    def _start(self) -> None:
        """Start the background thread (once; not after :meth:`stop`)."""
        with self._start_lock:
            if not self._started and not self._closed:
                self._started = True
                self._thread.start()

    def _wanted(self) -> None:
        """(After a sync call ran the loop, while the background thread is not started.)
        Start it when the loop holds work nobody would run until the next call: tasks
        (not those that only wait, :func:`.loop_steps.working`), live timers, callbacks."""
        loop: Any = self._loop
        ready = getattr(loop, "_ready", None)
        # (a loop without asyncio's internals, uvloop's: it cannot tell, so start it)
        if (
            ready is None
            or ready
            or self._tasks.working(loop)
            or (loop._scheduled and self._timers_left())
        ):
            self._start()

    def _timers_left(self) -> bool:
        """Whether a timer is live, the cancelled ones first in the heap dropped as a pass
        drops them (:meth:`_step` makes none: an ``asyncio.wait``'s timeout stayed and
        started this thread). Holding the loop, else its runner looks when it leaves."""
        me = _get_ident()
        try:
            if not self._take():
                return False
            return live_timers(self._loop) != []  # (None: it cannot tell)
        finally:
            if self._driver == me:  # (also after an interrupt inside _take)
                self._driver = None
                self._release(me)

    # -- taking turns ----------------------------------------------------------------

    def _take(self) -> bool:
        with self._mutex:
            if self._driver is None and not self._loop.is_closed():
                self._driver = threading.get_ident()
                return True
            return False

    def _leave(self) -> None:
        with self._mutex:
            self._driver = None  # (first: an interrupt below leaves the loop free)
            self._wake_next()

    def _release(self, me: int) -> None:
        """(In a ``finally``, after ``_driver`` was set back to None inline when it was
        ``me``: no function call comes before, where an interrupt could land.) Wake
        the next waiter (none registered: no mutex; one registering later tries again)."""
        if self._waiters:
            with self._mutex:
                if self._driver is None:
                    self._wake_next()

    def _wake_next(self) -> None:
        """(Under the mutex.) Wake the first waiter whose work is not done: it takes the
        loop over (and wakes the next one when it leaves)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.event.set()
                return

    def _drive(
        self,
        done: Callable[[], bool],
        until: Callable[[], Coroutine[Any, Any, Any] | asyncio.Future[Any]] | None,
        event: threading.Event | None = None,
    ) -> None:
        """Until ``done()``: run the loop on this thread until ``until()`` (made while
        holding the loop) completes, or wait while another thread runs it. ``until``
        None: only take the loop (and leave it)."""
        waiter: _Waiter | None = None
        me = threading.get_ident()
        try:
            while not done():
                try:
                    if self._take():
                        if until is None:
                            return
                        try:
                            self._loop.run_until_complete(until())
                        finally:
                            if self._started and getattr(self._loop, "_scheduled", None):
                                self._nudge()
                        continue
                finally:
                    if self._driver == me:  # (also after an interrupt inside _take)
                        self._driver = None
                        self._release(me)
                if waiter is None:  # register, then try again: no wake-up is lost
                    waiter = _Waiter(done, event or threading.Event())
                    with self._mutex:
                        self._waiters.append(waiter)
                    continue
                waiter.event.wait()
                waiter.event.clear()
        finally:
            if waiter is not None:
                with self._mutex:
                    self._waiters.remove(waiter)
                    if self._driver is None:  # woken to take over, but done meanwhile
                        self._wake_next()

    # -- sync callers ----------------------------------------------------------------

    def call(self, coro: Coroutine[Any, Any, T], *, bare: bool = False) -> T:
        """Run ``coro`` on the loop and block until it returns (or raises); on the
        calling thread when nobody else runs the loop. ``bare``: run there, it is sent
        into with no task until it first waits (see :meth:`_step`): only for work
        that neither asks for its task nor sets a timeout before it first waits (the
        saver's writes and reads on a SQLite or memory store: ``asyncio.timeout``, used
        by the network backends, needs a task)."""
        if self._closed or self._loop.is_closed():  # (``running``, inline)
            coro.close()
            raise self._refusal()
        me = _get_ident()
        if self._driver == me:
            coro.close()
            raise self._reentered()
        # (``_get_running_loop``, exported by asyncio for this: None instead of the
        # RuntimeError ``get_running_loop`` raises and this call caught every time)
        if _get_running_loop() is not None:
            # this thread runs another loop, which cannot run ours: hand it over
            return self._handed(coro).result()
        try:
            if me != MAIN_THREAD:  # (signal handlers run there only: no Sigint needed)
                return self._call(coro, None, bare, me)
            # Ctrl-C cancels the call and is raised once it has ended (see .interrupts)
            with Sigint(self._loop) as sigint:
                return self._call(coro, sigint, bare, me)
        except BaseException:
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:  # (never run)
                coro.close()
            raise

    def _call(self, coro: Coroutine[Any, Any, T], sigint: Sigint | None, bare: bool, me: int) -> T:
        try:
            if self._take():
                try:
                    return self._step(coro, sigint, bare)
                finally:
                    if self._started and getattr(self._loop, "_scheduled", None):
                        self._nudge()  # (no timer at all, the usual put: not called)
        finally:
            if self._driver == me:  # (also after an interrupt inside _take)
                self._driver = None
                self._release(me)
            if not self._started:
                self._wanted()
        future = Handed(self._loop, coro).wait(self._drive, sigint)
        if not self._started:
            self._wanted()
        return future.result()

    def _step(
        self, coro: Coroutine[Any, Any, T], sigint: Sigint | None = None, bare: bool = False
    ) -> T:
        """(Holding the loop.) Run ``coro`` as a task of the loop, stepping the loop's
        ready callbacks (the task's first step among them) on this thread with no
        poll for I/O, as ``run_until_complete``'s passes would run them; a call that
        needs nothing else from the loop — a SQLite write committed inline, a read of
        a cached thread — is done then. One that waits (for I/O, an executor, a timer)
        is left to ``run_until_complete``. Saved per call: the done callback and
        ``run_forever``'s set-up, and an ``epoll`` per pass (measured in
        docs/benchmarks.md, "lgwrite12b"). A task all the same: ``current_task()``,
        ``asyncio.timeout`` and a context of its own work as they do in any task.

        ``bare``: no task until ``coro`` first waits. What was ready on the loop runs
        first (as the task's first round ran it), then ``coro`` is sent into directly,
        in a copy of the caller's context, as a task's first step would run it: a call
        done then (the saver's lone SQLite write, a cached read) made no task, handle
        nor round for itself (docs/benchmarks.md, "lgput": ~20 k of a call's ~50 k
        instructions on the loop). One that waits goes on as a task from where it
        waits (:class:`.loop_steps.Rest`), with ``current_task()``, cancellation and timeouts
        as in any task; before that ``current_task()`` is None, and a Ctrl-C is
        delivered at its first wait."""
        loop = self._loop
        ready: Any = getattr(loop, "_ready", None)
        if ready is None:  # a loop without asyncio's internals (uvloop's policy set)
            return loop.run_until_complete(coro)
        hooks = _get_hooks()
        # as run_forever: the loop's async generator hooks (bound once, set by
        # position), the running loop (its thread: ``is_running()``)
        _set_hooks(*self._hooks)
        loop._thread_id = _get_ident()  # type: ignore[attr-defined]
        _set_running_loop(loop)
        task: asyncio.Task[T] | None = None
        interrupted: BaseException | None = None
        try:
            if not bare:
                task = loop.create_task(coro)
                if sigint is not None:
                    sigint.aim(task.cancel)
                run_rounds(ready, task, None)
            else:
                if ready:  # (what was ready before the call: its task's first round ran it)
                    run_ready(ready)
                context = contextvars.copy_context()
                if sigint is not None:
                    sigint.aim(nothing)  # (counted: delivered at the first wait, below)
                try:
                    yielded = context.run(coro.send, None)
                except StopIteration as stop:
                    if ready:  # what its end made ready (other callers' tasks woken)
                        run_ready(ready)
                    return stop.value  # type: ignore[no-any-return]
                # it waits: the rest of it as a task, from there
                task = loop.create_task(Rest(coro, yielded), context=context)
                run_rounds(ready, task, sigint)
        except BaseException as exc:  # (with a task: an interrupt in spite of Sigint)
            if task is None:
                raise
            interrupted = exc
        finally:
            _set_running_loop(None)
            loop._thread_id = None  # type: ignore[attr-defined]
            _set_hooks(*hooks)
        if interrupted is not None:
            end_interrupted(loop, task)
            raise interrupted
        return self._finish(task)

    def _finish(self, task: asyncio.Task[T]) -> T:
        """(Holding the loop, no longer set as running.) ``task``'s result, once the
        loop has run it to its end."""
        try:
            if task.done():
                return task.result()
            return self._loop.run_until_complete(task)
        except BaseException:  # an interrupt in spite of Sigint (a second Ctrl-C)
            end_interrupted(self._loop, task)
            raise

    # -- async callers (other event loops) -------------------------------------------

    def _handed(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Hand ``coro`` to the background thread (it runs the loop until it is done)."""
        if not self._started:
            self._start()
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        with self._handed_lock:
            self._outstanding.add(future)
            self._last_handed = time.monotonic()
        future.add_done_callback(self._settled)
        self._kick.set()
        return future

    def _settled(self, future: concurrent.futures.Future[Any]) -> None:
        with self._handed_lock:
            self._outstanding.discard(future)
            drained = self._drained if not self._outstanding else None
        if drained is not None:  # (this may run on the caller's thread: a cancel)
            with contextlib.suppress(RuntimeError):  # the loop was closed
                self._loop.call_soon_threadsafe(_resolve, drained)

    # -- the background thread -------------------------------------------------------

    def _pending(self) -> list[concurrent.futures.Future[Any]]:
        with self._handed_lock:
            return [f for f in self._outstanding if not f.done()]

    async def _settle(self) -> None:
        """One pass: due timers and ready callbacks run, then the handed work is done
        and no more arrived for ``_GRACE`` seconds."""
        await asyncio.sleep(0)
        while True:
            with self._handed_lock:
                busy = bool(self._outstanding)
                if busy:
                    self._drained = drained = self._loop.create_future()
            if busy:
                try:
                    await drained
                finally:
                    self._drained = None
                continue
            quiet = time.monotonic() - self._last_handed
            if quiet >= _GRACE or self._closed:
                return
            self._grace = grace = self._loop.create_future()
            if self._closed:  # stop() looked before the future was there
                _resolve(grace)
            timer = self._loop.call_later(_GRACE - quiet, _resolve, grace)
            try:
                await grace
            finally:
                timer.cancel()
                self._grace = None

    def later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """(On the loop.) Call ``callback`` on the loop in ``delay`` seconds: run by a
        caller running the loop then, else by the background thread, which wakes for
        it (not once cancelled). A timer, not a task sleeping on the loop: a task has
        the background thread run the loop every ``_POLL`` seconds for as long as it
        lives (a claim's renewal task did so for the whole life of every run)."""
        handle = self._loop.call_later(delay, callback)
        if not self._started:
            self._start()
        with self._handed_lock:
            heapq.heappush(self._due, handle)
        if delay < _IDLE:  # sooner than the background thread's longest wait
            self._kick.set()
        return handle

    def _wait(self) -> float:
        """How long the background thread may sleep before its next pass: no later than
        the loop's next timer, :meth:`later`'s or one the store set itself (a
        write-behind flush, ``settle_after``: the saver's loop ran those up to ``_IDLE`` late)."""
        idle = not self._tasks.working(self._loop) and not self._pending()
        wait = _IDLE if idle else _POLL
        with self._handed_lock:
            while self._due and self._due[0].cancelled():  # (was: woken for it even so)
                heapq.heappop(self._due)
            if self._due:
                wait = min(wait, max(self._due[0].when() - self._loop.time(), 0.0))
        if (due := next_due(self._loop)) is not None:  # (read off the loop: see there)
            wait = min(wait, max(due - self._loop.time(), 0.0))
        return wait

    def _nudge(self) -> None:
        """(Holding the loop, leaving it, a timer in its heap.) Wake the background thread
        for a timer due before it means to look (:meth:`_plan`): one a call armed ran late."""
        timers = live_timers(self._loop)
        if timers and timers[0].when() < self._sleep_until:
            self._kick.set()

    def _plan(self) -> float:
        """(The background thread.) :meth:`_wait`, noting when it looks again (:meth:`_nudge`);
        0 once stopped (stop()'s kick may have woken a pass's wait for the loop instead)."""
        if self._closed:
            return 0.0
        self._sleep_until = math.inf
        now = self._loop.time()  # (before _wait's: a timer it sleeps till is not before)
        wait = self._wait()
        self._sleep_until = now + wait
        return wait

    def _thread_target(self) -> Callable[[], None]:
        """What the background thread runs (it holds this loop: see :class:`.portal.Portal`
        for one that does not)."""
        return self._background

    def _background(self) -> None:
        while True:
            self._kick.wait(self._plan())
            if not self._background_pass():
                return

    def _background_pass(self) -> bool:
        """(The background thread, woken.) One pass of the loop; False once stopped."""
        self._kick.clear()
        self._sleep_until = -math.inf  # (it looks at the loop once this pass is done)
        if self._closed:
            return False
        now = self._loop.time()
        self._one_pass()
        with self._handed_lock:  # the timers due before the pass have run
            while self._due and self._due[0].when() <= now:
                heapq.heappop(self._due)
        return True

    def _refusal(self) -> BaseException:
        """What a call made once closed raises."""
        return StoreClosed(
            self._closed_why if self._closed_why is not _CLOSED else self._closed_message
        )

    def _reentered(self) -> BaseException:
        """What a blocking call made from code running on this loop raises (it would
        wait for the loop it holds)."""
        return RuntimeError("a blocking saver call from inside the saver's loop would deadlock")

    def _one_pass(self) -> None:
        """Take the loop (waiting for a caller running it) and settle it once."""
        passes = [0]

        def settle() -> Coroutine[Any, Any, None]:
            passes[0] += 1
            return self._settle()

        self._drive(lambda: passes[0] > 0 and not self._pending(), settle, self._kick)

    def stop(self) -> None:
        """Stop the background thread and close the loop. Idempotent. From code running
        on the loop: :class:`ConfigurationError` (it would wait for the loop it runs),
        nothing changed; :meth:`stop_soon` stops it from there."""
        if self._loop.is_closed() or self._closed_why is not _CLOSED:
            return
        if self.on_loop():  # (it would wait for the loop this code runs on)
            if self._closed:  # stopping already (stop_soon's thread): it ends it
                return
            self.refuse_on_loop("stopping the loop")
        self._closed = True
        self._kick.set()
        grace = self._grace
        if grace is not None:  # end the background thread's grace wait now
            with contextlib.suppress(RuntimeError):  # the loop was closed
                self._loop.call_soon_threadsafe(_resolve, grace)
        with self._start_lock:  # (no start after this)
            started = self._started
        if started and threading.current_thread() is not self._thread:
            self._thread.join()
        self._drive(lambda: False, None)  # wait for a caller still running the loop
        self._last_rites()
        with self._mutex:
            self._loop.close()

    def stop_soon(self) -> None:
        """(Code running on the loop, done with it: an ``aclose`` there.) Refuse calls
        from now on and stop the loop on a thread of its own, once its runner has left
        it (control is back with the loop: :meth:`stop` waits for that)."""
        if self._loop.is_closed() or self._closed_why is not _CLOSED or self._closed:
            return
        self._closed = True  # (calls refused from here; the background thread ends)
        self._kick.set()
        name = f"{self._thread.name}-stop"
        threading.Thread(target=self.stop, name=name, daemon=True).start()

    def _last_rites(self) -> None:
        """(In :meth:`stop`, before the loop closes; nobody calls any more.) Nothing
        here: the saver closed its store's tasks before (see :class:`.portal.Portal`)."""
