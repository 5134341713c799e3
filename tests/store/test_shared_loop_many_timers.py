"""The background thread's sleep plan does not scan every timer of the loop.

``SharedLoop._wait`` (run before each sleep of the background thread: every ``_POLL``
seconds while the loop holds tasks) sleeps no longer than the loop's earliest live
timer. It listed the whole timer heap and looked at every timer in it: with thousands
of timers (a claim renewal per run, a timeout per request in flight) each plan cost
milliseconds of the GIL, more than ``_POLL`` with a hundred thousand. The heap's
first timer is its earliest: only cancelled ones before the earliest live one are
looked at. Measured in this thread's CPU time (not wall time: the machine is shared),
the best of a few rounds, against the same loop with few timers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from statekeeper.store import shared_loop
from statekeeper.store.shared_loop import SharedLoop

_MANY = 40_000


def _cpu(fn: Callable[[], object], rounds: int = 20) -> float:
    """The least CPU time of this thread over ``rounds`` calls of ``fn``."""
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


async def _arm(n: int, first: float, *, cancel_first: int = 0) -> None:
    loop = asyncio.get_running_loop()
    handles = [loop.call_later(first + i, lambda: None) for i in range(n)]
    for handle in handles[:cancel_first]:
        handle.cancel()


@pytest.mark.parametrize("cancelled", [0, 10])
def test_planning_a_sleep_costs_no_more_with_many_timers(cancelled: int) -> None:
    few, many = SharedLoop("statekeeper-test-few"), SharedLoop("statekeeper-test-many")
    try:
        few.call(_arm(10 + cancelled, 100.0, cancel_first=cancelled))
        many.call(_arm(_MANY, 100.0, cancel_first=cancelled))
        for loop in (few, many):
            planned = loop._wait()
            assert 0.0 < planned <= 1.0  # (the idle sleep: the timers are later)
        few_cost = min(_cpu(few._wait) for _ in range(2))
        many_cost = min(_cpu(many._wait) for _ in range(2))
        # a scan of every timer costs ~1000 times as much; a look at the first few, ~1
        assert many_cost < 20 * few_cost + 50e-6, (few_cost, many_cost)
    finally:
        few.stop()
        many.stop()


@pytest.mark.parametrize("cancelled", [1, 40, 500])
def test_the_sleep_is_planned_for_the_earliest_live_timer(
    monkeypatch: pytest.MonkeyPatch, cancelled: int
) -> None:
    """Cancelled timers first in the heap are passed over, the live one after them is
    found wherever the heap keeps it; past many of them, the sleep ends no later."""
    monkeypatch.setattr(shared_loop, "_IDLE", 10_000.0)
    loop = SharedLoop("statekeeper-test-earliest")
    try:

        async def arm() -> None:
            running = asyncio.get_running_loop()
            handles = [running.call_later(5 + i * 1e-3, lambda: None) for i in range(cancelled)]
            for handle in handles:
                handle.cancel()
            running.call_later(8.0, lambda: None)  # (later ones, live)
            running.call_later(6.0, lambda: None)
            running.call_later(7.0, lambda: None)

        loop.call(arm())
        before = loop._loop.time()
        planned = loop._wait()
        after = loop._loop.time()
        assert planned <= 6.0 - (after - before)  # never after the earliest live timer
        if cancelled <= 40:  # (past a few cancelled ones, not woken for them)
            assert planned >= 6.0 - (after - before) - 0.5
        else:  # (past many: woken early, once: the pass drops them)
            assert planned >= 5.0 - (after - before) - 0.5
    finally:
        loop.stop()
