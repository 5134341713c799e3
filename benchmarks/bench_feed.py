"""What the change feed's position costs on the save path, per engine, same run.

Two stores of one engine side by side in one process: one as shipped (every append
gets its feed position: SQLite's trigger, PostgreSQL's position default and
statement lock plus the coalesced NOTIFY, Redis' INCRBY + XADD in the append script)
and one with the feed taken out (SQLite: the trigger dropped; PostgreSQL: the trigger,
the default and the index dropped, no NOTIFY; Redis: ``feed=0``). Each round writes a
block of sequential saves of one agent (``durability="sync"``, 200-byte message) to
each store, alternating which goes first, so drift of a loaded machine hits both
alike. Reported per engine: median time per save of each, and the ratio with/without
per round (median, p25-p75, min-max).

    .venv/bin/python benchmarks/bench_feed.py                     # sqlite, postgresql, redis
    .venv/bin/python benchmarks/bench_feed.py --engines sqlite --rounds 10 --block 50

Instruction counts of the SQLite save path (in-process: the trigger runs inside
SQLite's C code, so callgrind sees all of it; load-independent)::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/bench_feed.py --callgrind {on|off} N

Instructions per save = (count at N=900 - count at N=300) / 600 (setup cancels out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _common import machine, median, percentile, table
from statekeeper import StateStore

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


async def _pair(engine: str, folder: Path) -> tuple[StateStore, StateStore, Any]:
    """(with the feed, without it, cleanup)."""
    tag = uuid.uuid4().hex[:8]
    if engine == "sqlite":
        on, off = folder / "on.db", folder / "off.db"
        for path in (on, off):
            async with StateStore(f"sqlite:///{path}", witness=False) as s:
                await s.save("warm", {})
        with sqlite3.connect(off) as db:
            db.execute("DROP TRIGGER sk_feed_append")
        return (
            StateStore(f"sqlite:///{on}", witness=False),
            StateStore(f"sqlite:///{off}", witness=False),
            None,
        )
    if engine == "postgresql":
        import psycopg

        s_on, s_off = f"bench_feed_on_{tag}", f"bench_feed_off_{tag}"
        on = StateStore(f"{PG_DSN}?schema={s_on}", witness=False)
        off = StateStore(f"{PG_DSN}?schema={s_off}", witness=False)
        for s in (on, off):
            await s.save("warm", {})
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f"DROP TRIGGER sk_feed_mark ON {s_off}.sk_events")
            conn.execute(f"ALTER TABLE {s_off}.sk_events ALTER COLUMN position DROP DEFAULT")
            conn.execute(f"DROP INDEX {s_off}.sk_events_position")
        off.backend._feed.poke = lambda: None  # type: ignore[attr-defined]

        def cleanup() -> None:
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                for s in (s_on, s_off):
                    conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")

        return on, off, cleanup
    if engine == "redis":
        on = StateStore(f"{REDIS}?prefix=bench_feed_on_{tag}:", witness=False)
        off = StateStore(f"{REDIS}?prefix=bench_feed_off_{tag}:&feed=0", witness=False)

        async def drop() -> None:
            for s in (on, off):
                await s.backend.drop_all()

        return on, off, drop
    raise SystemExit(f"unknown engine {engine!r}")


async def run_engine(engine: str, rounds: int, block: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        on, off, cleanup = await _pair(engine, Path(tmp))
        times: dict[str, list[float]] = {"on": [], "off": []}
        ratios: list[float] = []
        message = "x" * 200
        steps = {"on": 0, "off": 0}
        try:
            for r in range(rounds + 1):  # round 0 warms up
                order = [("on", on), ("off", off)] if r % 2 else [("off", off), ("on", on)]
                took: dict[str, float] = {}
                for name, store in order:
                    start = time.perf_counter()
                    for _ in range(block):
                        steps[name] += 1
                        await store.save("agent", {"step": steps[name], "last": message})
                    took[name] = (time.perf_counter() - start) / block
                if r:
                    for name in took:
                        times[name].append(took[name])
                    ratios.append(took["on"] / took["off"])
            if engine == "redis":
                await cleanup()
        finally:
            await on.close()
            await off.close()
            if engine == "postgresql":
                cleanup()
    return {
        "engine": engine,
        "with_feed_ms": median(times["on"]) * 1e3,
        "without_ms": median(times["off"]) * 1e3,
        "ratio_median": median(ratios),
        "ratio_p25": percentile(ratios, 25),
        "ratio_p75": percentile(ratios, 75),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


async def _callgrind(mode: str, n: int) -> None:
    """N saves of one agent to a fresh SQLite store, the feed on or off."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.db"
        async with StateStore(f"sqlite:///{path}", witness=False) as s:
            await s.save("warm", {})
        if mode == "off":
            with sqlite3.connect(path) as db:
                db.execute("DROP TRIGGER sk_feed_append")
        async with StateStore(f"sqlite:///{path}", witness=False) as store:
            for i in range(n):
                await store.save("agent", {"step": i, "last": "x" * 200})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--callgrind", nargs=2, metavar=("MODE", "N"))
    parser.add_argument("--engines", default="sqlite,postgresql,redis")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.callgrind:
        asyncio.run(_callgrind(args.callgrind[0], int(args.callgrind[1])))
        return
    results = [asyncio.run(run_engine(e, args.rounds, args.block)) for e in args.engines.split(",")]
    if args.json:
        print(json.dumps({"machine": machine(), "results": results}, indent=2))
        return
    print(
        table(
            ["engine", "with feed", "without", "ratio median", "p25-p75", "min-max"],
            [
                [
                    r["engine"],
                    f"{r['with_feed_ms']:.3f} ms",
                    f"{r['without_ms']:.3f} ms",
                    f"{r['ratio_median']:.3f}",
                    f"{r['ratio_p25']:.3f}-{r['ratio_p75']:.3f}",
                    f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}",
                ]
                for r in results
            ],
        )
    )
    source = machine()["source"]
    print(f"({args.rounds} rounds of {args.block} sequential saves per store; source {source})")


if __name__ == "__main__":
    main()
