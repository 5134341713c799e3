"""Python function calls per saver write, by module: statekeeper's saver against
``SqliteSaver`` (issue 12: the fixed cost of a write).

Instruction counts need callgrind and wall clocks a quiet machine; the number of
Python-level calls a write makes needs neither (``cProfile``'s call counts do not
depend on the load), and at ~1–3 k instructions a call it is most of a write's
fixed cost in Python. One thread calls the saver as a 30-step run does (each step's
checkpoint ``put``, then its ``put_writes``: ``bench_langgraph_flatput.py``'s
sequence, outside a LangGraph run, so every write commits alone), after warm-up
sequences; ``--release`` also counts a run's claim release (statekeeper only: a claim
stored, then released, single-threaded)::

    .venv/bin/python benchmarks/bench_langgraph_call_counts.py            # both savers
    .venv/bin/python benchmarks/bench_langgraph_call_counts.py --release

Prints, per ``put`` + ``put_writes`` pair, the Python calls (functions defined in
Python), the C calls (builtins and methods of C types) and the Python calls of the
modules making the most, and the process CPU per pair (load-dependent: for
orientation only). ``PYTHONPATH=<another tree's src>`` measures another tree.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)

SEQUENCES = 20
WARM = 3


def _module(path: str) -> str:
    for cut in ("/site-packages/", "/src/", "/lib/python3.11/"):
        if cut in path:
            path = path.split(cut, 1)[1]
    return path if path.startswith("statekeeper") else path.rsplit("/", 1)[0]


def counted(fn: Callable[[], None], units: int) -> tuple[float, float, Counter[str], float]:
    """(Python calls, C calls, Python calls by module — per unit, CPU µs per unit)."""
    profile = cProfile.Profile()
    cpu = time.process_time()
    profile.enable()
    fn()
    profile.disable()
    cpu = time.process_time() - cpu
    py, c = 0, 0
    by: Counter[str] = Counter()
    for (path, _, _), (_, calls, *_) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        if path == "~":
            c += calls
        else:
            py += calls
            by[_module(path)] += calls
    return py / units, c / units, by, cpu / units * 1e6


def report(name: str, result: tuple[float, float, Counter[str], float], units: int) -> None:
    py, c, by, cpu = result
    print(f"\n{name}: {py:.1f} Python calls, {c:.1f} C calls a unit (profiled CPU {cpu:.0f} µs)")
    for module, calls in by.most_common(12):
        print(f"  {calls / units:7.1f}  {module}")


def pairs(kind: str, tmp: Path) -> None:
    from bench_langgraph_flatput import STEPS, sequence  # type: ignore[import-not-found]
    from bench_langgraph_goals import sqlite_saver  # type: ignore[import-not-found]
    from statekeeper.integrations.langgraph import StatekeeperSaver

    saver: Any
    if kind == "sqlite":
        saver, close = sqlite_saver(tmp / f"{kind}.db", "NORMAL")
    else:
        saver = StatekeeperSaver.from_url(f"sqlite:///{tmp / kind}.db?synchronous=NORMAL")
        close = saver.close
    try:
        for i in range(WARM):
            sequence(saver, f"warm-{i}")
        units = SEQUENCES * STEPS

        def run() -> None:
            for i in range(SEQUENCES):
                sequence(saver, f"t-{i}")

        report(f"{kind}: a put + put_writes pair", counted(run, units), units)
    finally:
        close()


def releases(tmp: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from statekeeper.integrations.langgraph import StatekeeperSaver, runs

    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp / 'rel'}.db?synchronous=NORMAL")
    cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.put(cfg, empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}, {})
    n = 200
    try:
        profile = cProfile.Profile()
        cpu = 0.0
        for i in range(WARM + n):
            run = runs.Run("t", object(), addressed=False)
            saver._portal.call(saver._claim(run))
            start = time.process_time()
            if i >= WARM:
                profile.enable()
            saver._portal.call(saver._release(run))
            if i >= WARM:
                profile.disable()
                cpu += time.process_time() - start
        py = c = 0
        by: Counter[str] = Counter()
        for (path, _, _), (_, calls, *_) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
            if path == "~":
                c += calls
            else:
                py += calls
                by[_module(path)] += calls
        report("sk: a run's release", (py / n, c / n, by, cpu / n * 1e6), n)
    finally:
        saver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--release", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lg-calls-") as tmp_dir:
        tmp = Path(tmp_dir)
        for kind in ("sk", "sqlite"):
            pairs(kind, tmp)
        if args.release:
            releases(tmp)


if __name__ == "__main__":
    main()
