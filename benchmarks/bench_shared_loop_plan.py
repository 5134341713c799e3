"""CPU time of one sleep plan of a shared loop's background thread (``SharedLoop._wait``'s
look at the loop's timers) against the number of timers on the loop: the heap's first
timers (:func:`statekeeper.store.loop_steps.next_due`) beside the scan of every timer it
replaced (inlined here, the peer), in the same process, rounds interleaved.

    PYTHONPATH=src python benchmarks/bench_shared_loop_plan.py [rounds]

Prints, per timer count and cancelled share, the median CPU time (this thread's) of
each and their ratio with the spread (min..max of the per-round ratios)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable

from statekeeper.store.loop_steps import next_due


def _scan(loop: asyncio.AbstractEventLoop) -> float | None:
    """The plan before: every timer listed and looked at."""
    timers = list(getattr(loop, "_scheduled", ()))
    live = [h.when() for h in timers if not h.cancelled()]
    return min(live) if live else None


def _cpu(fn: Callable[[], object], calls: int) -> float:
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls


def main(rounds: int) -> None:
    for n in (10, 1_000, 10_000, 40_000):
        for cancelled in (0, 10):
            loop = asyncio.new_event_loop()
            handles = [loop.call_later(100.0 + i, lambda: None) for i in range(n + cancelled)]
            for handle in handles[:cancelled]:
                handle.cancel()
            assert next_due(loop) == _scan(loop)
            calls = max(3, 20_000 // n)  # (the scan's: ~20 k timers looked at a round)
            new, old = [], []
            for _ in range(rounds):
                old.append(_cpu(lambda loop=loop: _scan(loop), calls))  # type: ignore[misc]
                new.append(_cpu(lambda loop=loop: next_due(loop), 2_000))  # type: ignore[misc]
            ratios = [o / max(w, 1e-9) for o, w in zip(old, new, strict=True)]
            scan, due = statistics.median(old) * 1e6, statistics.median(new) * 1e6
            spread = f"({min(ratios):.0f}..{max(ratios):.0f})"
            print(
                f"timers {n:>6} cancelled first {cancelled:>2}: scan {scan:9.1f} us"
                f"  next_due {due:6.2f} us  scan/next_due {statistics.median(ratios):7.1f} {spread}"
            )
            loop.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
