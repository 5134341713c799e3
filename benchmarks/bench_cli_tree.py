"""CPU time of in-process CLI runs and of runs forked from a zygote (the CLI tests'
``tests/cli/_forked.py``), for two checkouts side by side, in alternated rounds.

Each measurement is a fresh interpreter with ``PYTHONPATH=<checkout>/src:<checkout>``
(its own statekeeper and its own tests), reporting CPU seconds (user + sys, children
included), so a loaded machine slows it down without skewing it much:

* ``inproc``: every command module loaded, then ``main([...])`` run ``--runs`` times
  in this process (what a test suite does thousands of times), CPU per run;
* ``forked``: ``--runs`` invocations through the checkout's own zygotes (4, as
  ``cli_many`` uses), CPU per invocation, zygote start-up included.

    python benchmarks/bench_cli_tree.py /tmp/base /work/wt/suite --rounds 3 --runs 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

#: run inside the measured interpreter: prints {"cpu": seconds per run}
_INPROC = r"""
import json, os, resource, sys
from click.testing import CliRunner
from statekeeper.cli.app import app, main
from statekeeper.cli._help import load_all
import typer
load_all(typer.main.get_command(app))
ARGS = ["agents", "--db", "memory://", "--json"]

def once():
    with CliRunner().isolation():
        try:
            main(ARGS)
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code

once()  # warm: imports, first tree
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
start = cpu()
runs = int(sys.argv[1])
for _ in range(runs):
    once()
print(json.dumps({"cpu": (cpu() - start) / runs}))
"""

#: the checkout's own zygotes (tests/cli/_forked.py) run a refusal ``runs`` times
_FORKED = r"""
import json, os, resource, sys, tempfile
from pathlib import Path
from tests.cli._forked import zygotes
runs = int(sys.argv[1])
env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEPER_")}
env.update({"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"})
with tempfile.TemporaryDirectory() as cwd:
    with zygotes(4, env) as pool:
        for i in range(runs):
            code, out, err = pool.run(["show", "nobody", "--db", "memory://"], env, Path(cwd))
            assert code == 1, (code, out, err)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"cpu": (r.ru_utime + r.ru_stime) / runs}))
"""


def measure(checkout: Path, script: str, runs: int) -> float:
    env = dict(os.environ, PYTHONPATH=f"{checkout / 'src'}{os.pathsep}{checkout}")
    env.pop("STATEKEEPER_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", script, str(runs)],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("branch", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    sides = {"base": args.base, "branch": args.branch}
    for name, script in (("inproc", _INPROC), ("forked", _FORKED)):
        got: dict[str, list[float]] = {side: [] for side in sides}
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                got[side].append(measure(sides[side], script, args.runs))
        for side, values in got.items():
            ms = [v * 1000 for v in values]
            print(
                f"{name:7s} {side:7s} CPU ms/run median {statistics.median(ms):8.1f}"
                f"  rounds {', '.join(f'{v:.1f}' for v in ms)}"
            )


if __name__ == "__main__":
    main()
