"""What a shared loop pays to know whether its tasks need it run (h/loopstop).

``SharedLoop._wait`` plans each sleep of the background thread (every ``_POLL`` seconds
while the loop holds a task) and ``_wanted`` runs after each sync call until that
thread is started; both ask whether a task on the loop needs it run. Before, they
walked ``asyncio.all_tasks(loop)``: every task of the process, every loop's. Now the
loop's task factory keeps its own tasks (``loop_steps.LoopTasks``), which costs each
task made on it a weak reference.

Prints, as JSON, the least thread CPU time over ``--rounds`` calls:

* ``wait_us``: one ``_wait`` with N tasks waiting on another event loop (an async
  application's requests), N in 0, 1 000, 10 000, 50 000;
* ``call_us``: one non-bare ``SharedLoop.call`` of a coroutine that returns at once
  (a task made, stepped, done: the factory's cost per task), over 2 000 calls.

``--calls N``: only N such calls, for ``valgrind --tool=callgrind`` (the difference of
two N's, over the calls between them: instructions a call).

Run it against both trees, interleaved, and compare::

    for i in 1 2 3; do
      PYTHONPATH=<old>/src .venv/bin/python benchmarks/bench_loop_tasks.py
      PYTHONPATH=src .venv/bin/python benchmarks/bench_loop_tasks.py
    done
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable

from statekeeper.store.shared_loop import SharedLoop


def _cpu(fn: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


async def _noop() -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--calls", type=int, default=None)
    args = parser.parse_args()
    shared = SharedLoop("bench-loop-tasks")
    shared.call(_noop())
    if args.calls is not None:
        for _ in range(args.calls):
            shared.call(_noop())
        shared.stop()
        return
    out: dict[str, object] = {}
    calls = 2000

    def many_calls() -> None:
        for _ in range(calls):
            shared.call(_noop())

    out["call_us"] = round(_cpu(many_calls, max(args.rounds // 10, 3)) / calls * 1e6, 3)
    waits: dict[int, float] = {}
    for n in (0, 1_000, 10_000, 50_000):
        other = asyncio.new_event_loop()
        released = asyncio.Event()

        async def waiting(event: asyncio.Event = released) -> None:
            await event.wait()

        async def spawn(n: int = n) -> list[asyncio.Task[None]]:
            return [asyncio.ensure_future(waiting()) for _ in range(n)]

        tasks = other.run_until_complete(spawn())
        other.run_until_complete(asyncio.sleep(0))
        waits[n] = round(_cpu(shared._wait, args.rounds) * 1e6, 2)

        async def finish(
            event: asyncio.Event = released, made: list[asyncio.Task[None]] = tasks
        ) -> None:
            event.set()
            await asyncio.gather(*made)

        other.run_until_complete(finish())
        other.close()
    out["wait_us"] = waits
    shared.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
