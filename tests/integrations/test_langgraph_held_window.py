"""How long a held write waits for its run's next write grows with the runs live on the
saver (issue 12).

A task's regular writes inside a run wait up to ``writes_wait`` for the run's next
write (its checkpoint), so that one commit stores both. Runs at once share one
interpreter: with 16 runs on one SQLite file, the first held write of every turn
missed a fixed 5 ms window and was committed alone (docs/benchmarks.md, "lgceil").
The window is now ``writes_wait`` for each live run, at most ``HOLD_RUNS`` of them.

No timing: the windows are read where the waits take them (the on-loop hold's
``asyncio.wait`` and a parked write's lock), with ``writes_wait`` far longer than any
run takes, and barriers in the graph's nodes keep every run live while the writes of
its first node are held.
"""

from __future__ import annotations

import asyncio
import threading
import types
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import commits as commits_module

from .conftest import new_thread

#: no held write waits out its window: every one is taken by its run's next write
WAIT = 60.0
GUARD = 120.0


class _N(TypedDict):
    n: int


def _two_steps(first: threading.Barrier, second: threading.Barrier) -> StateGraph[Any]:
    """Two nodes, each waiting for every run at its barrier: no run ends before all the
    runs' first steps are done (their writes held while every run is live)."""

    def one(state: _N) -> dict[str, Any]:
        first.wait(GUARD)
        return {"n": state["n"] + 1}

    def two(state: _N) -> dict[str, Any]:
        second.wait(GUARD)
        return {"n": state["n"] + 1}

    builder = StateGraph(_N)
    builder.add_node("one", one)
    builder.add_node("two", two)
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    builder.add_edge("two", END)
    return builder


class _Recorded:
    """A parked write's lock, recording the timeout its caller waits with."""

    def __init__(self, lock: Any, windows: list[float]) -> None:
        self.lock, self.windows = lock, windows

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.windows.append(timeout)
        return bool(self.lock.acquire(blocking, timeout))

    def release(self) -> None:
        self.lock.release()

    def locked(self) -> bool:
        return bool(self.lock.locked())


def _windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: int
) -> tuple[list[float], list[dict[str, int]]]:
    """Run ``runs`` two-step graphs at once on one saver; the windows its held writes
    waited with, and each run's final state."""
    saver = StatekeeperSaver.from_url(
        f"sqlite:///{tmp_path}/lg.db", writes_wait=WAIT, run_lease=3600
    )
    windows: list[float] = []
    real_wait = asyncio.wait

    async def wait(fs: Any, **kw: Any) -> Any:
        windows.append(kw.get("timeout") or 0.0)  # the on-loop hold of a held write
        return await real_wait(fs, **kw)

    # (the module's own name for asyncio, not asyncio itself: only the hold's wait)
    proxy = types.SimpleNamespace(**{k: getattr(asyncio, k) for k in dir(asyncio)})
    proxy.wait = wait
    monkeypatch.setattr(commits_module, "asyncio", proxy)
    park = saver._park

    def parked(*args: Any) -> Any:
        mine = park(*args)
        mine.parked = _Recorded(mine.parked, windows)  # type: ignore[assignment]
        return mine

    saver._park = parked  # type: ignore[method-assign, assignment]
    first, second = threading.Barrier(runs), threading.Barrier(runs)
    graph = _two_steps(first, second).compile(checkpointer=saver)
    done: list[dict[str, int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            cfg: Any = {"configurable": {"thread_id": new_thread()}}
            done.append(graph.invoke({"n": 0}, cfg, durability="sync"))
        except BaseException as exc:
            errors.append(exc)
            first.abort()
            second.abort()

    workers = [threading.Thread(target=run, daemon=True) for _ in range(runs)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(GUARD)
        assert not errors, errors
        assert not any(w.is_alive() for w in workers)
    finally:
        saver.close()
    return windows, done


def test_a_held_write_waits_writes_wait_for_each_live_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows, done = _windows(tmp_path, monkeypatch, runs=4)
    assert done == [{"n": 2}] * 4
    assert windows, "no write was held"
    # the first step's writes were held while the 4 runs were live (the second
    # step's, while 1 to 4 of them were)
    assert max(windows) == pytest.approx(4 * WAIT), windows
    assert all(WAIT * 0.999 <= w <= 4 * WAIT * 1.001 for w in windows), windows


def test_one_run_alone_waits_writes_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    windows, done = _windows(tmp_path, monkeypatch, runs=1)
    assert done == [{"n": 2}]
    assert windows and all(w == pytest.approx(WAIT) for w in windows), windows


def test_the_window_stops_growing_at_hold_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commits_module, "HOLD_RUNS", 2)
    windows, done = _windows(tmp_path, monkeypatch, runs=4)
    assert done == [{"n": 2}] * 4
    assert max(windows) == pytest.approx(2 * WAIT), windows
