"""How :class:`.shared_loop.SharedLoop` steps its loop on a calling thread: rounds of what is
ready (no poll for I/O), the rest of a coroutine sent into bare handed to a task
(:class:`Rest`), the end of a call interrupted mid-step; whether tasks left on the
loop need it run (:func:`working`), and when its next timer is due (:func:`next_due`)."""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import weakref
from collections.abc import Coroutine
from typing import Any

from ..security.highwater import WAITING as WITNESS_WAITING
from .durability import GUARD
from .interrupts import Sigint

__all__ = [
    "LoopTasks",
    "Rest",
    "end_interrupted",
    "next_due",
    "nothing",
    "run_ready",
    "run_rounds",
    "working",
]

#: how many rounds of what is ready on the loop :meth:`.shared_loop.SharedLoop._step` runs before it
#: leaves a call not done yet to ``run_until_complete``
_STEPS = 4


#: how long a call interrupted mid-step may take to end once cancelled
_INTERRUPTED_END = 5.0


def end_interrupted(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
    """(Holding the loop, a ``KeyboardInterrupt`` raised in a step.) Cancel ``task``
    and run the loop until it ends (for at most ``_INTERRUPTED_END`` seconds; then it
    is left to whoever runs the loop next): its write is then done or not made."""
    if not task.done():
        task.cancel()
        loop.run_until_complete(asyncio.wait((task,), timeout=_INTERRUPTED_END))
    if task.done() and not task.cancelled():
        task.exception()  # (retrieved: no "never retrieved" report)


def run_ready(ready: Any) -> None:
    """Run what is ready on the loop as a round begins (the loop's ``_ready``)."""
    for _ in range(len(ready)):
        handle = ready.popleft()
        if not handle._cancelled:
            handle._run()


def nothing() -> None:
    """What a Ctrl-C cancels while a bare call has no task yet (it is counted)."""


def run_rounds(ready: Any, task: asyncio.Task[Any], sigint: Sigint | None) -> None:
    """Step the loop's ready callbacks (``task``'s first step among them) with no poll
    for I/O, as ``run_until_complete``'s passes would, up to ``_STEPS`` rounds."""
    for step in range(_STEPS):
        # a round after the task is done runs what its end made ready (other
        # callers' tasks woken by its commit), as run_until_complete's last pass
        done = task.done()
        run_ready(ready)
        if step == 0 and sigint is not None:
            # (after its first step: it then waits where its coroutine waits, and a
            # cancellation reaches the coroutine there)
            sigint.aim(task.cancel)
        if done or not ready:
            return


class Rest:
    """The rest of a coroutine sent into bare (:meth:`.shared_loop.SharedLoop._step`), which yielded
    ``first`` at its first wait: the coroutine of the task that runs it from there.
    The task's first step gets ``first`` (and waits for it, as it would have had it run
    the coroutine from its start); every later step goes to the coroutine as it is. A
    task cancelled before its first step throws into the coroutine where it waits
    (what it waited for cancelled, as a task cancels the future it waits for); a
    coroutine wrapper would have received that cancellation before its first line
    and left the coroutine suspended, never to end."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first: Any = first

    def send(self, value: Any) -> Any:
        first = self._first
        if first is not _TAKEN:
            self._first = _TAKEN
            return first
        return self._coro.send(value)

    def throw(self, exc: Any, *rest: Any) -> Any:
        first = self._first
        if first is not _TAKEN:
            self._first = _TAKEN
            if isinstance(first, asyncio.Future):
                first.cancel()
        return self._coro.throw(exc, *rest)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Rest:
        return self

    def __iter__(self) -> Rest:
        return self

    def __next__(self) -> Any:
        return self.send(None)


#: (``Rest._first`` once the task took it)
_TAKEN = object()


def working(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a task on ``loop`` may need the loop run: any but a write-behind
    buffer's guard, which only waits (its flush runs from a timer; polling the loop
    every ``_POLL`` seconds for it, for as long as writes stay buffered, cost CPU for
    nothing), and the witness's guard, which only waits for the loop's end (to write
    the marks of a store never closed). Looks at every task of the process (every
    loop's): :class:`LoopTasks` looks at one loop's."""
    return any(task.get_name() not in _WAITING for task in asyncio.all_tasks(loop))


class LoopTasks:
    """The tasks made on one loop, kept by its task factory: :meth:`working` looks at
    them only. ``asyncio.all_tasks(loop)`` walks every task of the process, every
    loop's, to pick this loop's: the background thread of a shared loop looked before
    each of its sleeps (every ``_POLL`` seconds while the loop holds a task), 1.7 ms of
    the GIL with 10 000 tasks on an application's loop (docs/benchmarks.md, h/loopstop).
    Costs a task made on the loop a weak reference (~0.5 us)."""

    __slots__ = ("_made",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._made: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        loop.set_task_factory(self._make)

    def _make(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Any,
        context: contextvars.Context | None = None,
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        # (3.13.3+ and 3.14 hand a factory every keyword of create_task: ``name``,
        # ``eager_start``; and no longer name the task after it)
        task = asyncio.Task(coro, loop=loop, context=context, **kwargs)
        self._made.add(task)
        return task

    def working(self, loop: asyncio.AbstractEventLoop) -> bool:
        """(Any thread.) :func:`working`, of the tasks made on ``loop`` (all of its
        tasks, unless its task factory was replaced: then :func:`working` itself)."""
        if loop.get_task_factory() != self._make:
            return working(loop)
        for _ in range(1000):
            try:  # (the thread running the loop may add one meanwhile: as all_tasks)
                made = list(self._made)
                break
            except RuntimeError:
                continue
        else:  # pragma: no cover - a thread making tasks all the time
            return working(loop)
        return any(not task.done() and task.get_name() not in _WAITING for task in made)


#: the names of the tasks that only wait (see :func:`working`)
_WAITING = frozenset((GUARD, WITNESS_WAITING))


#: how many cancelled timers :func:`next_due` looks past before it settles for a bound
_LOOK_PAST = 64


def next_due(loop: asyncio.AbstractEventLoop) -> float | None:
    """(Any thread.) When the earliest live timer of ``loop`` is due (loop time); None:
    no timer (or a loop without asyncio's heap). Its heap's first timer is its earliest:
    only the cancelled ones before the earliest live one are looked at, best first, and
    past ``_LOOK_PAST`` of them the earliest not looked at is the answer (early: the
    pass it wakes drops them). It listed and looked at every timer: milliseconds of
    the GIL per sleep planned with thousands. Another thread may hold the loop and
    change its heap meanwhile: a timer it arms, its leaving wakes the background
    thread for (``SharedLoop._nudge``); a heap read mid-change only errs then."""
    timers: list[Any] | None = getattr(loop, "_scheduled", None)
    if not timers:
        return None
    try:
        head = timers[0]
        if not head.cancelled():
            return float(head.when())
        frontier = [(head.when(), 0)]
        for _ in range(_LOOK_PAST):
            if not frontier:
                return None  # (all cancelled)
            _, at = heapq.heappop(frontier)
            for child in (2 * at + 1, 2 * at + 2):
                if child < len(timers):
                    timer = timers[child]
                    if not timer.cancelled():
                        heapq.heappush(frontier, (timer.when(), -1))  # (-1: live)
                    else:
                        heapq.heappush(frontier, (timer.when(), child))
            if frontier and frontier[0][1] == -1:
                return float(frontier[0][0])
        return float(frontier[0][0]) if frontier else None
    except IndexError:  # (emptied meanwhile: a pass ran them)
        return None
