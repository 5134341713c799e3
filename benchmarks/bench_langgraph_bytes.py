"""Where the bytes of the 30-step small graph go (issue 12: <= 1/10 of SqliteSaver's).

Runs ``bench_langgraph_goals.py``'s small graph (20 threads x 30 steps, ``durability=
"sync"``: 640 checkpoints, 620 writes) on ``StatekeeperSaver`` and ``SqliteSaver``, then
prints, for each file, the pages of every table and index (SQLite's ``dbstat``) and the
bytes of every column of the saver's tables; then the **floor** of this engine: the same
number of events (one ``created`` + 35 per agent, as the saver writes: the checkpoint
events, a run's claim and release) and of key-index rows (one per checkpoint), each
event a one-op JSON Patch (``{"op": "replace", "path": "/n", "value": i}``), appended
through ``StateStore`` on SQLite with the same codec: every row chained, checksummed
and indexed, with no LangGraph content.

Usage::

    .venv/bin/python benchmarks/bench_langgraph_bytes.py
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from _common import file_bytes  # type: ignore[import-not-found]
from bench_langgraph_goals import run_small  # type: ignore[import-not-found]
from statekeeper import StateStore
from statekeeper.codec import Codec

THREADS, EVENTS, KEYED = 20, 35, 32  # per thread, as the saver writes the small graph


def tables(path: Path) -> list[tuple[str, int, int, int, int]]:
    """(b-tree, pages, cells, payload bytes, unused bytes) by size."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name, count(*), sum(ncell), sum(payload), sum(unused) FROM dbstat"
            " GROUP BY name ORDER BY count(*) DESC, name"
        ).fetchall()
    finally:
        conn.close()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def columns(path: Path, table: str) -> dict[str, float]:
    """Average bytes of each column of ``table`` (``length()``: an integer's digits, a
    REAL counted as its 8 bytes)."""
    conn = sqlite3.connect(path)
    try:
        cols = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
        n = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if not n:
            return {}
        sums = conn.execute(
            "SELECT "
            + ", ".join(
                f"sum(CASE typeof({c}) WHEN 'real' THEN 8 ELSE length({c}) END)" for c in cols
            )
            + f" FROM {table}"
        ).fetchone()
    finally:
        conn.close()
    return {c: round(s / n, 1) for c, s in zip(cols, sums, strict=True)} | {"rows": n}


async def floor(path: Path) -> None:
    codec = Codec(compression="zstd-dict", compress_min_bytes=64)  # as from_url's
    store = StateStore(f"sqlite:///{path}", codec=codec, snapshot_every=1_000_000)
    try:
        for t in range(THREADS):
            agent = f"lg/small-{t}#0"
            await store.create(agent, {"n": 0})
            for i in range(EVENTS):
                key = f"k{t:04d}{i:012d}" if i < KEYED else None  # 17 characters
                ops: list[dict[str, Any]] = [{"op": "replace", "path": "/n", "value": i}]
                await store.append(agent, "lg.cp", ops=ops, idempotency_key=key)
    finally:
        await store.close()


def show(label: str, path: Path) -> int:
    size = file_bytes(path)
    print(f"\n{label}: {size:,} bytes")
    print(f"  {'b-tree':34} {'pages':>5} {'cells':>6} {'payload':>8} {'unused':>7}")
    for name, pages, cells, payload, unused in tables(path):
        print(f"  {name:34} {pages:5} {cells:6} {payload:8,} {unused:7,}")
    return size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--synchronous", default="NORMAL")
    args = parser.parse_args()
    args.steps, args.small_threads = 30, THREADS
    tmp = Path(tempfile.mkdtemp())
    sizes = {}
    for kind in ("sk", "sqlite"):
        run_small(kind, tmp, args)
        sizes[kind] = show(kind, tmp / f"{kind}-small.db")
    for table in ("sk_events", "sk_idempotency", "sk_feed"):
        print(f"  {table}: {columns(tmp / 'sk-small.db', table)}")
    conn = sqlite3.connect(tmp / "sk-small.db")
    by_kind = conn.execute(
        "SELECT kind, count(*), avg(length(payload)) FROM sk_events GROUP BY kind"
    ).fetchall()
    conn.close()
    for kind, n, avg in by_kind:
        print(f"  {kind:10} {n:4} events, payload {avg:6.1f} bytes (3 header + 32 link + body)")
    asyncio.run(floor(tmp / "floor.db"))
    sizes["floor"] = show("floor (same rows, no LangGraph content)", tmp / "floor.db")
    for table in ("sk_events", "sk_idempotency"):
        print(f"  {table}: {columns(tmp / 'floor.db', table)}")
    peer = sizes["sqlite"]
    ours, least = peer / sizes["sk"], peer / sizes["floor"]
    print(f"\nstatekeeper 1/{ours:.2f} of SqliteSaver, floor 1/{least:.2f}")
    print(f"1/10 of SqliteSaver: {peer // 10:,} bytes")


if __name__ == "__main__":
    main()
