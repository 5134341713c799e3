"""Issue 14: instructions per migrated agent, counted by callgrind (load-independent).

A store of N agents at schema version 1 is made outside valgrind; then a process that
only opens the store and migrates it to version 2 runs under
``valgrind --tool=callgrind``, for two sizes: (instructions(N2) - instructions(N1)) /
(N2 - N1) is the cost of one agent, without the interpreter's start-up and imports.

Usage: ``.venv/bin/python benchmarks/bench_schema_callgrind.py [--sizes 500 1500]
[--method rewrite|append] [--baseline main]`` (``--baseline REF``: the same stores also
migrated by the code of git ref REF, extracted with ``git archive``, in the same run).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def populate(db: Path, n: int) -> None:
    sys.path.insert(0, str(HERE))
    import bench_schema

    asyncio.run(bench_schema.populate(f"sqlite:///{db}", n))


def run_one(db: Path, method: str, out: Path, src: Path | None = None) -> int:
    # with ``src``: that tree's statekeeper is imported first (so the benchmark's own
    # imports find it loaded), the code the baseline is measured with
    first = f"sys.path.insert(0, {str(src)!r}); import statekeeper\n" if src else ""
    code = (
        "import asyncio, sys\n" + first + "sys.path.insert(0, {!r})\n"
        "import bench_schema as b\n"
        "from statekeeper import StateStore\n"
        "from statekeeper.schema.migrate import migrate\n"
        "async def go():\n"
        "    async with StateStore({!r}, durability='group') as s:\n"
        "        r = await migrate(s, b.v2, check=False, method={!r})\n"
        "        assert not r.failed\n"
        "asyncio.run(go())\n"
    ).format(str(HERE), f"sqlite:///{db}", method)
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", code],
        check=True,
        capture_output=True,
    )
    text = subprocess.run(
        ["callgrind_annotate", str(out)], check=True, capture_output=True, text=True
    ).stdout
    match = re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", text) or re.search(
        r"([\d,]+)\s+PROGRAM TOTALS", text
    )
    assert match, text[:500]
    return int(match.group(1).replace(",", ""))


def checkout(ref: str, into: Path) -> Path:
    """``ref``'s ``src`` tree, extracted with ``git archive`` (the baseline's code)."""
    archive = subprocess.run(
        ["git", "-C", str(HERE.parent), "archive", ref, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[500, 1500])
    parser.add_argument("--method", default="rewrite", choices=["rewrite", "append"])
    parser.add_argument(
        "--baseline",
        metavar="GIT_REF",
        default=None,
        help="also count the code of GIT_REF (e.g. main) on the same stores, same run",
    )
    args = parser.parse_args()
    n1, n2 = args.sizes
    per: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path | None] = {"this tree": None}
        if args.baseline:
            trees[args.baseline] = checkout(args.baseline, Path(tmp))
        dbs = {}
        for n in args.sizes:
            dbs[n] = Path(tmp) / f"m{n}.db"
            populate(dbs[n], n)
        for name, src in trees.items():
            counts = []
            for n in args.sizes:
                db = Path(tmp) / f"run{n}.db"  # a fresh copy of the same store per run
                for suffix in ("", "-wal", "-shm"):
                    if Path(f"{dbs[n]}{suffix}").exists():
                        shutil.copyfile(f"{dbs[n]}{suffix}", f"{db}{suffix}")
                counts.append(run_one(db, args.method, Path(tmp) / f"cg{n}.out", src))
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{db}{suffix}").unlink(missing_ok=True)
            per[name] = (counts[1] - counts[0]) / (n2 - n1)
            totals = dict(zip(args.sizes, counts, strict=True))
            print(f"{name}: method={args.method} instructions {totals}")
            print(f"{name}: instructions per agent ({args.method}): {per[name]:,.0f}")
    if args.baseline:
        ratio = per["this tree"] / per[args.baseline]
        print(f"ratio this tree / {args.baseline}: {ratio:.3f}")


if __name__ == "__main__":
    main()
