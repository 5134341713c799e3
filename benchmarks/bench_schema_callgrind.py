"""Issue 14: instructions per migrated agent, counted by callgrind (load-independent).

A store of N agents at schema version 1 is made outside valgrind; then a process that
only opens the store and migrates it to version 2 runs under
``valgrind --tool=callgrind``, for two sizes: (instructions(N2) - instructions(N1)) /
(N2 - N1) is the cost of one agent, without the interpreter's start-up and imports.

Usage: ``.venv/bin/python benchmarks/bench_schema_callgrind.py [--sizes 500 1500]
[--method rewrite|append]``
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def populate(db: Path, n: int) -> None:
    sys.path.insert(0, str(HERE))
    import bench_schema

    asyncio.run(bench_schema.populate(f"sqlite:///{db}", n))


def run_one(db: Path, method: str, out: Path) -> int:
    code = (
        "import asyncio, sys; sys.path.insert(0, {!r})\n"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[500, 1500])
    parser.add_argument("--method", default="rewrite", choices=["rewrite", "append"])
    args = parser.parse_args()
    counts = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            db = Path(tmp) / f"m{n}.db"
            populate(db, n)
            counts.append(run_one(db, args.method, Path(tmp) / f"cg{n}.out"))
    n1, n2 = args.sizes
    per = (counts[1] - counts[0]) / (n2 - n1)
    print(f"method={args.method} instructions: {dict(zip(args.sizes, counts, strict=True))}")
    print(f"instructions per agent ({args.method}): {per:,.0f}")


if __name__ == "__main__":
    main()
