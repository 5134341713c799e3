"""What a TTL purge (or keep_last compaction) of many old agents pays to raise the change
feed's floor (SQLite).

Retention trims the feed through the last event it removes before removing it, so it
needs that event's feed position; ``sk_feed`` has no index by agent, and one lookup per
agent reads the feed back from the head to the event. The store: ``--agents`` old
agents of one event each at the bottom of the feed, then ``--rows`` feed rows of other
traffic on top (written straight into ``sk_feed``: cheap to make, and all a lookup
reads). Each tree purges a copy of the same file (``old ttl=60s``, ``now`` an hour
later), in its own process; reported: the run's wall time and the statements that read
the feed by agent (from the read connection's trace). ``--mode compact``: each old agent
has three events and the policy is ``old keep_last=1`` (two events removed per agent).

    .venv/bin/python benchmarks/bench_retention_floor.py --base /work/main/src --tree src
    .venv/bin/python benchmarks/bench_retention_floor.py --agents 200 --rows 1000000
    .venv/bin/python benchmarks/bench_retention_floor.py --mode compact
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


async def _make(path: Path, agents: int, rows: int, events: int) -> None:
    from statekeeper import StateStore

    async with StateStore(f"sqlite:///{path}") as store:
        for i in range(agents):
            for j in range(events):
                await store.save(f"old/a{i:04}", {"i": i, "j": j})
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO sk_feed (agent_id, seq) SELECT 'traffic/x', i FROM n",
            (rows,),
        )
    conn.close()


async def _purge(path: Path, mode: str) -> dict[str, float]:
    from statekeeper import StateStore
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    async with StateStore(f"sqlite:///{path}") as store:
        reader: sqlite3.Connection = store.backend._reader()  # type: ignore[attr-defined]
        statements: list[str] = []
        reader.set_trace_callback(statements.append)
        started = time.perf_counter()
        rule = "old ttl=60s" if mode == "purge" else "old keep_last=1"
        report = await apply_retention(store, RetentionPolicy.parse(rule), now=time.time() + 3600)
        took = time.perf_counter() - started
        reader.set_trace_callback(None)
        floor = (await store.feed_bounds())[0]
    by_agent = sum("FROM sk_feed" in s and "agent_id" in s for s in statements)
    done = sum(a.outcome == "done" for a in report.actions)
    return {"seconds": took, "done": done, "feed_reads": by_agent, "floor": floor}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="/work/main/src", help="the src of the peer (main)")
    parser.add_argument("--tree", default="src", help="the src of this tree")
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--mode", choices=("purge", "compact"), default="purge")
    parser.add_argument("--rounds", type=int, default=1, help="main, tree alternately")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_purge(Path(args.child), args.mode))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        made = Path(tmp) / "made.db"
        asyncio.run(_make(made, args.agents, args.rows, 1 if args.mode == "purge" else 3))
        print(f"{args.agents} old agents under {args.rows:,} feed rows ({args.mode})")
        print("| tree | agents done | statements reading the feed by agent | seconds | floor |")
        print("|---|---|---|---|---|")
        trees = (("main", args.base), ("tree", args.tree)) * args.rounds
        for name, src in trees:
            copy = Path(tmp) / f"{name}.db"
            shutil.copy(made, copy)
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(copy), "--mode", args.mode],
                env=env, check=True, capture_output=True, text=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            cells = (name, r["done"], r["feed_reads"], f"{r['seconds']:.2f}", r["floor"])
            print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
