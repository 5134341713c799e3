"""One HybridClock shared by the threads of a process (a sync web app's workers, the
threads of a SyncStateStore's callers) still hands out unique, increasing stamps: two
writes stamped alike tie in last-write-wins and collapse into one item of an
AppendOnlyList (the same message appended by two threads was kept once)."""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from statekeeper.concurrency import AppendOnlyList, HybridClock, Timestamp

THREADS = 4
CALLS = 20_000


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    """Threads switch as often as the interpreter allows (races show up, if any)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _stamps_from_threads(make: Callable[[], Timestamp]) -> list[list[Timestamp]]:
    out: list[list[Timestamp]] = [[] for _ in range(THREADS)]
    start = threading.Barrier(THREADS)

    def work(i: int) -> None:
        start.wait()
        for _ in range(CALLS):
            out[i].append(make())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.usefixtures("tiny_switch_interval")
def test_now_from_many_threads_never_repeats_a_stamp() -> None:
    clock = HybridClock("proc-1")
    per_thread = _stamps_from_threads(clock.now)
    stamps = [s for part in per_thread for s in part]
    assert len(set(stamps)) == THREADS * CALLS
    for part in per_thread:  # each thread's stamps grow
        assert all(a < b for a, b in itertools.pairwise(part))
    # the same message appended by every thread is kept once per append
    assert len(AppendOnlyList((s, "ok") for s in stamps)) == THREADS * CALLS


@pytest.mark.usefixtures("tiny_switch_interval")
def test_observe_and_now_from_many_threads_never_repeat_a_stamp() -> None:
    clock = HybridClock("proc-1")
    remote = Timestamp(clock.now().wall, 5, "other")
    calls = [0]

    def either() -> Timestamp:
        calls[0] += 1
        return clock.observe(remote) if calls[0] % 2 else clock.now()

    stamps = [s for part in _stamps_from_threads(either) for s in part]
    assert len(set(stamps)) == THREADS * CALLS
    assert all(s > remote for s in stamps)
