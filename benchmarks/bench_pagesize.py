"""CPU per load and per save of a many-agent store, by the page size of its file.

For each ``--page-sizes`` value, a store of ``--agents`` agents (``bench_scaling.py``'s
bulk build: 3 events each, ~1.4 KB of file per agent) is built once under ``--dir``
with ``statekeeper.backends.sqlite.PAGE_SIZE`` set to that value in this harness only
(the library keeps its own constant). Then, ``--rounds`` times, the page sizes in
alternating order, a child process opens each store (``cache_size=0``,
``durability="sync"``) and makes ``--ops`` cold loads and saves of random agents
(seeded by round), timing each with ``time.process_time`` (CPU seconds: on a loaded
machine wall time measures the share of CPU the run got). Reports CPU µs per load and
per save (p50 over all rounds, and the spread of the per-round p50s), the file's pages
and bytes::

    .venv/bin/python benchmarks/bench_pagesize.py --agents 100000 --ops 400 --rounds 3

Instructions instead (callgrind; the child of one store, ``--ops`` loads and saves, or
``--loads-only``; per operation = the difference of two ``--ops`` values)::

    valgrind --tool=callgrind .venv/bin/python benchmarks/bench_pagesize.py --child \\
        --size 1024 --agents 100000 --ops 150 [--loads-only]

``--under SIZE SCRIPT [ARGS...]``: run another benchmark script with the page size of
the files it creates set to SIZE (the same harness-only override), e.g. under callgrind::

    valgrind --tool=callgrind .venv/bin/python benchmarks/bench_pagesize.py \\
        --under 4096 benchmarks/bench_coldload_callgrind.py sk0 150
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def set_page_size(size: int) -> None:
    import statekeeper.backends.sqlite.backend as sqlite_backend
    import statekeeper.backends.sqlite.opening as sqlite_opening

    sqlite_backend.PAGE_SIZE = sqlite_opening.PAGE_SIZE = (
        size  # this harness only: the size of the file it builds
    )


async def build(size: int, agents: int, where: Path) -> Path:
    set_page_size(size)
    import bench_scaling  # type: ignore[import-not-found]

    where.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - setup, untimed
    bench_scaling.BENCH_DIR = where
    path: Path = await bench_scaling.build_agents(agents, print)
    conn = sqlite3.connect(path)
    try:
        got = int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    if got != size:
        raise SystemExit(f"{path}: page size {got}, wanted {size}")
    return path


async def measure(
    path: Path, agents: int, ops: int, seed: int, saves: bool = True
) -> dict[str, list[float]]:
    from statekeeper import StateStore

    picks = random.Random(seed).sample(range(agents), ops + 20)
    out: dict[str, list[float]] = {"load": [], "save": []}
    async with StateStore(f"sqlite:///{path}", cache_size=0, durability="sync") as store:
        for i, pick in enumerate(picks):
            aid = f"agent-{pick:07d}"
            t0 = time.process_time()
            state = await store.load(aid)
            t1 = time.process_time()
            if i >= 20:  # the first 20 warm up
                out["load"].append(t1 - t0)
            if not saves:
                continue
            data = dict(state.data)
            data["step"] = int(data.get("step", 0)) + 1
            await store.save(aid, data)
            if i >= 20:
                out["save"].append(time.process_time() - t1)
    return out


def child(args: argparse.Namespace) -> None:
    where = Path(args.dir) / f"ps{args.size}"
    if args.build:
        print(json.dumps({"path": str(asyncio.run(build(args.size, args.agents, where)))}))
        return
    path = where / f"agents-{args.agents}.db"
    got = asyncio.run(measure(path, args.agents, args.ops, args.seed, not args.loads_only))
    print(json.dumps(got))


def run(args: argparse.Namespace, size: int, *extra: str) -> Any:
    cmd = [sys.executable, __file__, "--child", "--size", str(size), "--dir", args.dir]
    cmd += ["--agents", str(args.agents), "--ops", str(args.ops), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"page size {size} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def file_info(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_count").fetchone()[0]), path.stat().st_size
    finally:
        conn.close()


def under(argv: list[str]) -> None:
    """``--under SIZE SCRIPT ARGS``: SCRIPT as ``__main__``, new files of SIZE-byte pages."""
    import runpy

    set_page_size(int(argv[0]))
    sys.argv = argv[1:]
    sys.path.insert(0, str(Path(argv[1]).resolve().parent))
    runpy.run_path(argv[1], run_name="__main__")


def main() -> None:
    if sys.argv[1:2] == ["--under"]:
        under(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--ops", type=int, default=400, help="loads and saves per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--page-sizes", default="1024,2048,4096")
    parser.add_argument("--dir", default=str(HERE.parent / ".bench" / "pagesize"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--loads-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sizes = [int(s) for s in args.page_sizes.split(",")]
    paths = {s: Path(run(args, s, "--build")["path"]) for s in sizes}
    per: dict[int, dict[str, list[float]]] = {s: {"load": [], "save": []} for s in sizes}
    p50s: dict[int, dict[str, list[float]]] = {s: {"load": [], "save": []} for s in sizes}
    for round_no in range(args.rounds):
        for s in sizes if round_no % 2 == 0 else sizes[::-1]:
            got = run(args, s, "--seed", str(round_no))
            for k in ("load", "save"):
                per[s][k] += got[k]
                p50s[s][k].append(statistics.median(got[k]))
    rows = {}
    for s in sizes:
        pages, size_bytes = file_info(paths[s])
        rows[s] = {
            "pages": pages,
            "bytes": size_bytes,
            **{
                f"{k}_cpu_us_p50": round(statistics.median(per[s][k]) * 1e6, 1)
                for k in ("load", "save")
            },
            **{
                f"{k}_round_p50s_us": [round(v * 1e6, 1) for v in p50s[s][k]]
                for k in ("load", "save")
            },
        }
        print(s, json.dumps(rows[s]))
    print(json.dumps({"bench": "pagesize", "agents": args.agents, "ops": args.ops, "sizes": rows}))


if __name__ == "__main__":
    main()
