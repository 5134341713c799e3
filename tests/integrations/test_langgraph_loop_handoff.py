"""What a sync call on :class:`SharedLoop` pays besides its coroutine (issue 12, the
small graph's writes; docs/benchmarks.md, "lgonepath"): off the main thread no
:class:`Sigint` is made (Python runs signal handlers on the main thread only, so it had
nothing to do there), the loop's async generator hooks are set for the call and the
caller's put back after it, and a call that hands the loop over with nobody waiting
for it takes no mutex to wake anyone — the leader/follower hand-over between threads
still finishes every call."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from statekeeper.integrations.langgraph.loop import SharedLoop
from statekeeper.store import interrupts
from statekeeper.store import shared_loop as loop


@pytest.fixture
def shared() -> Iterator[SharedLoop]:
    made = SharedLoop("test-loop-handoff")
    yield made
    made.stop()


def _count_sigints(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made = [0]

    class Counted(interrupts.Sigint):
        __slots__ = ()

        def __init__(self, *args: Any) -> None:
            made[0] += 1
            super().__init__(*args)

    monkeypatch.setattr(loop, "Sigint", Counted)
    return made


async def _value(x: int) -> int:
    return x


def _on_worker(work: Any) -> Any:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(work()))
    worker.start()
    worker.join()
    return out[0]


@pytest.mark.parametrize("bare", [True, False])
def test_a_call_off_the_main_thread_makes_no_sigint(
    shared: SharedLoop, monkeypatch: pytest.MonkeyPatch, bare: bool
) -> None:
    made = _count_sigints(monkeypatch)
    assert _on_worker(lambda: [shared.call(_value(i), bare=bare) for i in range(5)]) == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert made[0] == 0


def test_a_call_on_the_main_thread_still_makes_its_sigint(
    shared: SharedLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert threading.current_thread() is threading.main_thread()
    made = _count_sigints(monkeypatch)
    assert shared.call(_value(7), bare=True) == 7
    assert made[0] == 1


@pytest.mark.parametrize("bare", [True, False])
def test_the_loop_hooks_are_set_for_a_call_and_the_callers_put_back(
    shared: SharedLoop, bare: bool
) -> None:
    def firstiter(agen: Any) -> None:
        pass

    def finalizer(agen: Any) -> None:
        pass

    async def hooks_inside() -> tuple[Any, Any]:
        hooks = sys.get_asyncgen_hooks()
        return hooks.firstiter, hooks.finalizer

    def work() -> tuple[Any, Any, Any]:
        sys.set_asyncgen_hooks(firstiter, finalizer)
        try:
            inside = shared.call(hooks_inside(), bare=bare)
            after = sys.get_asyncgen_hooks()
            return inside, after.firstiter, after.finalizer
        finally:
            sys.set_asyncgen_hooks(None, None)

    inside, first_after, final_after = _on_worker(work)
    mine: Any = shared._loop
    assert inside == (mine._asyncgen_firstiter_hook, mine._asyncgen_finalizer_hook)
    assert first_after is firstiter and final_after is finalizer


def test_an_async_generator_left_open_in_a_bare_call_is_closed_by_the_loop(
    shared: SharedLoop,
) -> None:
    """The hooks are the loop's: an async generator a call leaves unfinished is
    tracked by the loop and finalized there (its ``finally`` runs)."""
    closed = threading.Event()

    async def agen() -> Any:
        try:
            yield 1
            yield 2
        finally:
            closed.set()

    holder: list[Any] = []

    async def first_only() -> int:
        gen = agen()
        holder.append(gen)
        first: int = await gen.__anext__()
        return first

    assert _on_worker(lambda: shared.call(first_only(), bare=True)) == 1
    mine: Any = shared._loop
    assert holder[0] in mine._asyncgens
    holder.clear()  # collected: its finalizer schedules aclose() on the loop
    assert shared.call(asyncio.sleep(0)) is None
    assert shared.call(asyncio.sleep(0)) is None
    assert closed.wait(10)


def test_a_release_with_nobody_waiting_takes_no_mutex(shared: SharedLoop) -> None:
    taken = [0]
    real = shared._mutex

    class Counted:
        def __enter__(self) -> Any:
            taken[0] += 1
            return real.__enter__()

        def __exit__(self, *exc: Any) -> Any:
            return real.__exit__(*exc)

    shared._mutex = Counted()  # type: ignore[assignment]
    assert _on_worker(lambda: shared.call(_value(3), bare=True)) == 3
    assert taken[0] == 1  # the take; the release found no waiter


def test_threads_calling_at_once_all_finish(shared: SharedLoop) -> None:
    """Many threads calling at once: each call is run by whoever holds the loop or
    taken over when it leaves (a release that looked for waiters without the mutex
    must not strand one)."""
    gate = threading.Barrier(6)

    async def hop(x: int) -> int:
        await asyncio.sleep(0)
        return x

    def caller(k: int, out: list[int]) -> None:
        gate.wait()
        for i in range(200):
            out.append(shared.call(hop(k * 1000 + i), bare=i % 2 == 0))

    outs: list[list[int]] = [[] for _ in range(6)]
    threads = [threading.Thread(target=caller, args=(k, outs[k])) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert outs == [[k * 1000 + i for i in range(200)] for k in range(6)]
