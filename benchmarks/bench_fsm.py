"""State machine throughput: statekeeper vs transitions vs python-statemachine.

The same workload for every library: a 3-state cycle A -> B -> C -> A on one event
``next``, a guard on every rule that returns True, one callback that increments a
counter, and a bounded history (1000 entries) recorded on every transition:

- statekeeper: its built-in history (``history_limit=1000``), ``add_callback``;
- transitions: ``after_state_change`` appends ``(state, time.time())`` to a deque,
  ``after`` on each transition runs the callback, ``conditions`` is the guard;
- python-statemachine: a listener's ``after_transition`` appends
  ``(source, target, time.time())`` to a deque, ``after_next`` is the callback,
  ``cond`` is the guard.

Sync mode drives the sync API with sync callables. Async mode drives the async API
(``await machine.transition``, transitions' ``AsyncMachine``, python-statemachine's
async engine) with an ``async def`` callback (the guard stays sync).

Libraries and modes are interleaved within each round, in one process; the table
reports the median transitions/s over the rounds and statekeeper's ratio to the
faster peer. Run::

    .venv/bin/python benchmarks/bench_fsm.py --n 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import Any

HISTORY = 1000
Runner = Callable[[int], float]  # runs n transitions, returns elapsed seconds
AsyncRunner = Callable[[int], Awaitable[float]]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


# --------------------------------------------------------------------- statekeeper


def _statekeeper(async_callback: bool) -> tuple[Any, Callable[[], int]]:
    from statekeeper.machine import AgentStateMachine, TransitionRule

    counter = [0]

    def guard() -> bool:
        return True

    def callback(old: object, new: object, event: object) -> None:
        counter[0] += 1

    async def acallback(old: object, new: object, event: object) -> None:
        counter[0] += 1

    machine = AgentStateMachine(
        states=["A", "B", "C"],
        rules=[
            TransitionRule("A", "next", "B", guard=guard),
            TransitionRule("B", "next", "C", guard=guard),
            TransitionRule("C", "next", "A", guard=guard),
        ],
        initial="A",
        history_limit=HISTORY,
    )
    machine.add_callback(acallback if async_callback else callback)
    return machine, lambda: counter[0]


def sk_sync(n: int) -> float:
    machine, count = _statekeeper(False)
    fire = machine.fire
    t0 = time.perf_counter()
    for _ in range(n):
        fire("next")
    elapsed = time.perf_counter() - t0
    assert count() == n and machine.total_transitions == n
    assert len(machine.history) == min(n, HISTORY)
    return elapsed


async def sk_async(n: int) -> float:
    machine, count = _statekeeper(True)
    transition = machine.transition
    t0 = time.perf_counter()
    for _ in range(n):
        await transition("next")
    elapsed = time.perf_counter() - t0
    assert count() == n and machine.total_transitions == n
    assert len(machine.history) == min(n, HISTORY)
    return elapsed


# --------------------------------------------------------------------- transitions


class _TModel:
    state: str

    def __init__(self) -> None:
        self.count = 0
        self.history: deque[tuple[str, float]] = deque(maxlen=HISTORY)

    def ok(self) -> bool:
        return True

    def record(self) -> None:
        self.history.append((self.state, time.time()))

    def on_next(self) -> None:
        self.count += 1


class _TAsyncModel(_TModel):
    async def on_next(self) -> None:  # type: ignore[override]
        self.count += 1


def _transitions_spec() -> dict[str, Any]:
    return {
        "states": ["A", "B", "C"],
        "transitions": [
            {"trigger": "next", "source": "A", "dest": "B", "conditions": "ok", "after": "on_next"},
            {"trigger": "next", "source": "B", "dest": "C", "conditions": "ok", "after": "on_next"},
            {"trigger": "next", "source": "C", "dest": "A", "conditions": "ok", "after": "on_next"},
        ],
        "initial": "A",
        "after_state_change": "record",
        "auto_transitions": False,
    }


def tr_sync(n: int) -> float:
    from transitions import Machine

    model = _TModel()
    Machine(model=model, **_transitions_spec())
    trigger: Callable[[], bool] = model.next  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(n):
        trigger()
    elapsed = time.perf_counter() - t0
    assert model.count == n and len(model.history) == min(n, HISTORY)
    return elapsed


async def tr_async(n: int) -> float:
    from transitions.extensions.asyncio import AsyncMachine

    model = _TAsyncModel()
    AsyncMachine(model=model, **_transitions_spec())
    trigger: Callable[[], Awaitable[bool]] = model.next  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for _ in range(n):
        await trigger()
    elapsed = time.perf_counter() - t0
    assert model.count == n and len(model.history) == min(n, HISTORY)
    return elapsed


# ------------------------------------------------------------- python-statemachine


def _psm_classes() -> tuple[type[Any], type[Any], type[Any]]:
    from statemachine import State, StateMachine

    class Recorder:
        def __init__(self) -> None:
            self.history: deque[tuple[str, str, float]] = deque(maxlen=HISTORY)

        def after_transition(self, source: Any, target: Any) -> None:
            self.history.append((source.id, target.id, time.time()))

    class Cycle(StateMachine):
        a = State(initial=True)
        b = State()
        c = State()
        next = a.to(b, cond="ok") | b.to(c, cond="ok") | c.to(a, cond="ok")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.count = 0
            super().__init__(*args, **kwargs)

        def ok(self) -> bool:
            return True

        def after_next(self) -> None:
            self.count += 1

    class AsyncCycle(StateMachine):
        a = State(initial=True)
        b = State()
        c = State()
        next = a.to(b, cond="ok") | b.to(c, cond="ok") | c.to(a, cond="ok")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.count = 0
            super().__init__(*args, **kwargs)

        def ok(self) -> bool:
            return True

        async def after_next(self) -> None:
            self.count += 1

    return Recorder, Cycle, AsyncCycle


def psm_sync(n: int) -> float:
    recorder_cls, cycle_cls, _ = _psm_classes()
    recorder = recorder_cls()
    sm = cycle_cls(listeners=[recorder])
    trigger = sm.next
    t0 = time.perf_counter()
    for _ in range(n):
        trigger()
    elapsed = time.perf_counter() - t0
    assert sm.count == n and len(recorder.history) == min(n, HISTORY)
    return elapsed


async def psm_async(n: int) -> float:
    recorder_cls, _, cycle_cls = _psm_classes()
    recorder = recorder_cls()
    sm = cycle_cls(listeners=[recorder])
    await sm.activate_initial_state()
    trigger = sm.next
    t0 = time.perf_counter()
    for _ in range(n):
        await trigger()
    elapsed = time.perf_counter() - t0
    assert sm.count == n and len(recorder.history) == min(n, HISTORY)
    return elapsed


# ------------------------------------------------------------------------ driver

LIBRARIES = ("statekeeper", "transitions", "python-statemachine")
SYNC: dict[str, Runner] = {
    "statekeeper": sk_sync,
    "transitions": tr_sync,
    "python-statemachine": psm_sync,
}
ASYNC: dict[str, AsyncRunner] = {
    "statekeeper": sk_async,
    "transitions": tr_async,
    "python-statemachine": psm_async,
}


def measure(lib: str, mode: str, n: int) -> float:
    """Transitions per second for one run (after a short warm-up run)."""
    warm = max(n // 20, 100)
    gc.collect()
    if mode == "sync":
        SYNC[lib](warm)
        elapsed = SYNC[lib](n)
    else:
        asyncio.run(ASYNC[lib](warm))
        elapsed = asyncio.run(ASYNC[lib](n))
    return n / elapsed


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print a table and a JSON line; return the JSON payload."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=20_000, help="transitions per run")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args(argv)

    versions = {
        "python": platform.python_version(),
        "statekeeper": _version("statekeeper"),
        "transitions": _version("transitions"),
        "python-statemachine": _version("python-statemachine"),
    }
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"workload: 3-state cycle, guard + callback + history, n={args.n}, rounds={args.rounds}")

    samples: dict[tuple[str, str], list[float]] = {
        (lib, mode): [] for mode in ("sync", "async") for lib in LIBRARIES
    }
    for r in range(args.rounds):
        order = LIBRARIES if r % 2 == 0 else tuple(reversed(LIBRARIES))
        for mode in ("sync", "async"):
            for lib in order:
                samples[(lib, mode)].append(measure(lib, mode, args.n))
        print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr)

    results: dict[str, Any] = {}
    print()
    print(f"{'mode':<6} {'library':<20} {'median/s':>12} {'min/s':>12} {'max/s':>12}")
    for mode in ("sync", "async"):
        medians = {lib: statistics.median(samples[(lib, mode)]) for lib in LIBRARIES}
        for lib in LIBRARIES:
            s = samples[(lib, mode)]
            print(f"{mode:<6} {lib:<20} {medians[lib]:>12,.0f} {min(s):>12,.0f} {max(s):>12,.0f}")
        best_peer = max(LIBRARIES[1:], key=lambda lib: medians[lib])
        ratio = medians["statekeeper"] / medians[best_peer]
        print(f"{mode:<6} {'ratio vs ' + best_peer:<33} {ratio:>12.1f}x")
        results[mode] = {
            "median_per_s": {lib: round(medians[lib]) for lib in LIBRARIES},
            "best_peer": best_peer,
            "ratio": round(ratio, 2),
        }
    payload = {
        "benchmark": "fsm",
        "n": args.n,
        "rounds": args.rounds,
        "versions": versions,
        "results": results,
    }
    print(json.dumps(payload, sort_keys=True))
    return payload


if __name__ == "__main__":
    main()
