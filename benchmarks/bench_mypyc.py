"""Issue 11 experiment: the save path compiled with mypyc, pure against compiled.

Copies ``src/statekeeper`` to a temporary folder, compiles the chosen modules there
with mypyc (part of mypy, a dev dependency; needs a C compiler), and runs
:mod:`bench_save_instructions` (callgrind instructions per save, or ``--bytecodes``)
twice: with ``PYTHONPATH`` at the compiled copy and at the pure sources. Nothing in the
checkout is built or changed: the project's install stays pure Python (the measured
gain did not reach the bar for a compiled build; docs/benchmarks.md, "A compiled save
path (mypyc): measured, not adopted").

Module sets:

* ``a`` (default): the store's per-save Python that compiles and passes the store,
  codec and patch tests: ``arguments``, ``patch``, ``codec.pipeline``, ``store.body``,
  ``store.cache``, ``store.change``, ``store.snapshots``, ``store.state``,
  ``store.writes`` (with its parts ``write_args``, ``write_base``, ``write_build``,
  ``write_fast``);
* ``b``: ``a`` plus the SQLite engine (``backends.sqlite``; compiles, measured only).

Run::

    .venv/bin/python benchmarks/bench_mypyc.py --bytecodes            # seconds
    .venv/bin/python benchmarks/bench_mypyc.py --set b --large 30     # callgrind, long
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SET_A = [
    "statekeeper/arguments.py",
    "statekeeper/patch.py",
    # codec/pipeline.py and the parts it was split into (issue 11)
    "statekeeper/codec/pipeline.py",
    "statekeeper/codec/layout.py",
    "statekeeper/codec/links.py",
    "statekeeper/codec/options.py",
    "statekeeper/codec/compression.py",
    "statekeeper/codec/sealing.py",
    "statekeeper/codec/opening.py",
    "statekeeper/codec/decoding.py",
    "statekeeper/codec/appends.py",
    "statekeeper/codec/heads.py",
    "statekeeper/codec/renamed.py",
    "statekeeper/store/body.py",
    "statekeeper/store/cache.py",
    "statekeeper/store/change.py",
    "statekeeper/store/snapshots.py",
    "statekeeper/store/state.py",
    "statekeeper/store/writes.py",
    "statekeeper/store/write_args.py",
    "statekeeper/store/write_base.py",
    "statekeeper/store/write_build.py",
    "statekeeper/store/write_fast.py",
]
#: set b: set a and the SQLite engine's own modules (the one module it was before the split)
ENGINE_PARTS = (
    "backend",
    "opening",
    "schema",
    "connections",
    "checkpoints",
    "statements",
    "running",
    "appends",
    "changes",
    "lone",
    "commits",
    "engine",
)
SETS = {"a": SET_A, "b": [*SET_A, *(f"statekeeper/backends/sqlite/{m}.py" for m in ENGINE_PARTS)]}


def compile_copy(modules: list[str], into: Path) -> None:
    """``src/statekeeper`` copied to ``into`` with ``modules`` compiled in place."""
    shutil.copytree(ROOT / "src" / "statekeeper", into / "statekeeper")
    mypyc = Path(sys.executable).parent / "mypyc"
    subprocess.run([str(mypyc), *modules], cwd=into, check=True, capture_output=True)


def bench(pythonpath: Path, args: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    script = ROOT / "benchmarks" / "bench_save_instructions.py"
    out = subprocess.run(
        [sys.executable, str(script), *args], env=env, check=True, text=True, capture_output=True
    )
    return out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--set", choices=sorted(SETS), default="a")
    parser.add_argument("--bytecodes", action="store_true", help="bytecodes, not callgrind")
    parser.add_argument("--large", type=int, default=30)
    args = parser.parse_args()
    run = (
        ["--bytecodes", "sk-seq", "--top", "12"]
        if args.bytecodes
        else ["--sides", "sk-seq", "lg-seq", "--large", str(args.large)]
    )
    with tempfile.TemporaryDirectory(prefix="sk-mypyc-") as tmp:
        compile_copy(SETS[args.set], Path(tmp))
        print(f"compiled (set {args.set}):\n{bench(Path(tmp), run)}")
    print(f"pure:\n{bench(ROOT / 'src', run)}")


if __name__ == "__main__":
    main()
