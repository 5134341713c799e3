"""Many agents in one SQLite file, statekeeper vs LangGraph's SqliteSaver (``bench_scaling.py
--peer``): write and load p50 at 1k, 100k and 1M agents, side by side in one run.

Both stores hold N agents (threads), each a chat of 3 steps (the same documents: a small
task dict with 1, 2, 3 messages of ~200 characters). Files are built once under
``.bench/`` — statekeeper's by ``bench_scaling.build_agents`` (events as the real store
writes them, re-sealed per agent), SqliteSaver's by copying the rows a real
``SqliteSaver.put`` wrote for a template thread into a temporary file with one
``executemany`` per 20k threads, then renaming it into place — and copied to a scratch
file per run, so the writes never change the cached files.

Measured, interleaved per operation (statekeeper then peer, order alternating per
round), on agents sampled without replacement (every load is a cold one):

- **load**: ``StateStore.load(agent)`` (its cache misses: the agent was never loaded)
  vs ``SqliteSaver.get_tuple(config)``;
- **write**: then the agent's next step, durable: ``StateStore.save`` (``sync``) vs
  ``SqliteSaver.put`` on the loaded config, both at ``synchronous=FULL``.

Growth = p50 at the largest / p50 at the smallest store (target <= 1.2x); ratio =
statekeeper p50 / peer p50 at the same size (target <= 1).
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from _common import fmt_ms, human_bytes, lg_open, lg_plan, percentile, table
from statekeeper.store.store import StateStore

BUILD_BATCH = 20_000


def docs(rng_seed: int = 7) -> list[dict[str, Any]]:
    """The four steps of every agent (three stored, the fourth is the timed write) — the
    same documents ``bench_scaling.template_events`` stores."""
    from bench_scaling import text

    rng = random.Random(rng_seed)
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": text(rng)} for i in range(4)]
    base = {"task": "summarise the quarterly report", "status": "running", "step": 0}
    return [{**base, "step": n, "messages": msgs[:n]} for n in (1, 2, 3, 4)]


def build_peer(n: int, bench_dir: Path, thread_id: Any, log: Any) -> Path:
    """A SqliteSaver file of ``n`` threads of 3 checkpoints, built fast: the rows a real
    ``put`` wrote for a template thread, copied with ``executemany`` into a temp file."""
    path = bench_dir / f"lg-agents-{n}.db"
    if path.exists():
        with sqlite3.connect(path) as conn:
            (count,) = conn.execute("SELECT count(DISTINCT thread_id) FROM checkpoints").fetchone()
        if count == n:
            log(f"reusing {path} ({human_bytes(path.stat().st_size)})")
            return path
    t0 = time.perf_counter()
    tmpl_path = bench_dir / "lg-template.db"
    for p in (tmpl_path, Path(f"{tmpl_path}-wal"), Path(f"{tmpl_path}-shm")):
        p.unlink(missing_ok=True)
    saver = lg_open(tmpl_path, "OFF")
    config: dict[str, Any] = {"configurable": {"thread_id": "template", "checkpoint_ns": ""}}
    for cp, meta, versions in lg_plan(saver, docs()[:3]):
        config = saver.put(config, cp, meta, versions)
    rows = saver.conn.execute(
        "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"
        " FROM checkpoints WHERE thread_id = 'template'"
    ).fetchall()
    saver.conn.close()
    tmp = path.with_name(path.name + ".building")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    lg_open(tmp, "OFF").conn.close()  # the saver's own schema
    conn = sqlite3.connect(tmp, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    insert = (
        "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
        " parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    for start in range(0, n, BUILD_BATCH):
        conn.execute("BEGIN")
        conn.executemany(
            insert,
            [
                (thread_id(i), *row)
                for i in range(start, min(n, start + BUILD_BATCH))
                for row in rows
            ],
        )
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    os.replace(tmp, path)
    tmpl_path.unlink(missing_ok=True)
    log(
        f"built {path}: {n:,} threads in {time.perf_counter() - t0:.1f} s "
        f"({human_bytes(path.stat().st_size)})"
    )
    return path


def drop(path: Path) -> None:
    """Remove a scratch store and what lives beside it (WAL, shm, the store's witness)."""
    for p in path.parent.glob(path.name + "*"):
        p.unlink(missing_ok=True)


def scratch(src: Path, name: str) -> Path:
    """A throw-away copy of ``src`` (its WAL checkpointed first) that the writes go to."""
    with sqlite3.connect(src) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    dst = src.with_name(name)
    drop(dst)
    shutil.copyfile(src, dst)
    return dst


async def measure(
    sk_paths: dict[int, Path],
    lg_paths: dict[int, Path],
    agent_id: Any,
    rounds: int,
    per_round: int,
) -> dict[int, dict[str, float]]:
    steps = docs()
    out: dict[int, dict[str, float]] = {}
    for n in sk_paths:
        sk_file, lg_file = scratch(sk_paths[n], "peer-sk.db"), scratch(lg_paths[n], "peer-lg.db")
        store = StateStore(f"sqlite:///{sk_file}", durability="sync")
        saver = lg_open(lg_file, "FULL")
        [(cp, meta, versions)] = lg_plan(saver, steps)[3:]
        lat: dict[str, list[float]] = {
            k: [] for k in ("sk_load", "sk_write", "lg_load", "lg_write")
        }
        picks = random.Random(n).sample(range(n), min(n, rounds * per_round + 20))
        try:
            for i, pick in enumerate(picks):
                aid = agent_id(pick)
                order = ("sk", "lg") if (i // per_round) % 2 == 0 else ("lg", "sk")
                for side in order:
                    if side == "sk":
                        t0 = time.perf_counter()
                        state = await store.load(aid)
                        t1 = time.perf_counter()
                        await store.save(aid, steps[3])
                        t2 = time.perf_counter()
                        assert len(state.data["messages"]) == 3
                    else:
                        cfg = {"configurable": {"thread_id": aid, "checkpoint_ns": ""}}
                        t0 = time.perf_counter()
                        tup = saver.get_tuple(cfg)
                        t1 = time.perf_counter()
                        saver.put(tup.config, cp, meta, versions)
                        t2 = time.perf_counter()
                        assert len(tup.checkpoint["channel_values"]["messages"]) == 3
                    if i >= 20:  # the first 20 warm both up
                        lat[f"{side}_load"].append(t1 - t0)
                        lat[f"{side}_write"].append(t2 - t1)
        finally:
            await store.close()
            saver.conn.close()
            drop(sk_file)
            drop(lg_file)
        out[n] = {f"{k}_p50": percentile(v, 50) for k, v in lat.items()}
        out[n].update({f"{k}_p99": percentile(v, 99) for k, v in lat.items()})
        out[n]["samples"] = len(lat["sk_load"])
    return out


def report(res: dict[int, dict[str, float]]) -> dict[str, float]:
    sizes = list(res)
    rows = []
    for n in sizes:
        r = res[n]
        rows.append(
            [
                f"{n:,}",
                int(r["samples"]),
                fmt_ms(r["sk_write_p50"]),
                fmt_ms(r["lg_write_p50"]),
                f"{r['sk_write_p50'] / r['lg_write_p50']:.2f}x",
                fmt_ms(r["sk_load_p50"]),
                fmt_ms(r["lg_load_p50"]),
                f"{r['sk_load_p50'] / r['lg_load_p50']:.2f}x",
            ]
        )
    print("\n### many agents in one file: statekeeper vs SqliteSaver (p50, FULL)\n")
    print(
        table(
            [
                "agents",
                "samples",
                "sk write (ms)",
                "peer put (ms)",
                "ratio",
                "sk load (ms)",
                "peer get_tuple (ms)",
                "ratio",
            ],
            rows,
        )
    )
    lo, hi = sizes[0], sizes[-1]
    growth = {
        f"{k}_growth": res[hi][f"{k}_p50"] / res[lo][f"{k}_p50"]
        for k in ("sk_write", "sk_load", "lg_write", "lg_load")
    }
    print(
        f"\ngrowth p50 {hi:,} / {lo:,} agents (target <= 1.2x): statekeeper write "
        f"{growth['sk_write_growth']:.2f}x, load {growth['sk_load_growth']:.2f}x; "
        f"SqliteSaver put {growth['lg_write_growth']:.2f}x, get_tuple "
        f"{growth['lg_load_growth']:.2f}x"
    )
    return growth
