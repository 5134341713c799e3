"""Start-up cost of the ``statekeeper`` command, as a user meets it: whole processes.

Each case is a subprocess (``python -m statekeeper.cli ...`` with the venv's python,
which is what the ``statekeeper`` console script runs) timed from spawn to exit, paired
with a bare ``python -c pass`` spawned right before or after it (the order alternates
per round). The reported overhead is the median over rounds of (case - its paired
bare run), with the spread (min, max) of those differences.

Cases: ``--help``; ``agents`` on a small SQLite store (3 agents, built once in a temp
dir); ``import statekeeper`` (``python -c "import statekeeper"``).

    .venv/bin/python benchmarks/bench_startup.py [--rounds 30]

Also reports the children's CPU time (user + system) over bare Python, which a
loaded machine inflates far less than wall time. Prints a Markdown table and one
JSON line. Targets (issue 10 item 8): ``--help``
under 0.15 s and ``agents`` under 0.3 s over bare Python.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine

TARGETS = {"--help": 0.15, "agents (3 agents, SQLite)": 0.30}


def _build_store(path: Path) -> None:
    code = (
        "from statekeeper import SyncStateStore, StateTransition\n"
        f"s = SyncStateStore('sqlite:///{path}')\n"
        "for i in range(3):\n"
        "    a = s.agent(f'agent-{i}', initial_data={'task': 'research', 'n': i})\n"
        "    a.transition(StateTransition.START_PROCESSING)\n"
        "s.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1"}
    env.pop("STATEKEEPER_URL", None)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="sk-startup-") as tmp:
        db = Path(tmp) / "small.db"
        _build_store(db)
        cases = {
            "--help": [py, "-m", "statekeeper.cli", "--help"],
            "agents (3 agents, SQLite)": [py, "-m", "statekeeper.cli", "agents", "--db", str(db)],
            "import statekeeper": [py, "-c", "import statekeeper"],
        }
        bare = [py, "-c", "pass"]
        for argv in [*cases.values(), bare]:  # warm the OS caches and .pyc files
            _time(argv, env)
        diffs: dict[str, list[float]] = {name: [] for name in cases}
        cpu_diffs: dict[str, list[float]] = {name: [] for name in cases}
        totals: dict[str, list[float]] = {name: [] for name in cases}
        bares: list[float] = []
        for r in range(args.rounds):
            for name, argv in cases.items():
                if r % 2 == 0:
                    base, case = _time(bare, env), _time(argv, env)
                else:
                    case, base = _time(argv, env), _time(bare, env)
                bares.append(base[0])
                totals[name].append(case[0])
                diffs[name].append(case[0] - base[0])
                cpu_diffs[name].append(case[1] - base[1])
    rows = []
    print(f"bare `python -c pass`: median {statistics.median(bares) * 1000:.0f} ms")
    print()
    print(
        "| command | median total | median over bare | min | max | CPU over bare "
        "(median) | target | met |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in cases:
        d = diffs[name]
        med = statistics.median(d)
        target = TARGETS.get(name)
        met = "" if target is None else ("yes" if med < target else "**no**")
        print(
            f"| `{name}` | {statistics.median(totals[name]) * 1000:.0f} ms | "
            f"{med * 1000:.0f} ms | {min(d) * 1000:.0f} ms | {max(d) * 1000:.0f} ms | "
            f"{statistics.median(cpu_diffs[name]) * 1000:.0f} ms | "
            f"{'' if target is None else f'< {target * 1000:.0f} ms'} | {met} |"
        )
        rows.append(
            {
                "case": name,
                "median_total_s": statistics.median(totals[name]),
                "median_over_bare_s": med,
                "min_over_bare_s": min(d),
                "max_over_bare_s": max(d),
                "median_cpu_over_bare_s": statistics.median(cpu_diffs[name]),
                "target_s": target,
            }
        )
    print()
    print(
        json.dumps(
            {
                "bench": "startup",
                "rounds": args.rounds,
                "bare_median_s": statistics.median(bares),
                "rows": rows,
                "machine": machine("typer", "rich"),
            }
        )
    )


if __name__ == "__main__":
    main()
