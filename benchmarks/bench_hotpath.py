"""The hot path (issue 11): one save, one load, measured against their physical floor.

Everything below runs in ONE process, in rounds that alternate which side goes first,
and reports medians with their spread (min..max over rounds, p25/p75 of latencies)
and ratios from the same round (statekeeper / peer). Chat states: plain-dict messages
of ~300 characters, the history growing by one message per save.

1. Sequential durable save, one agent at a time, interleaved *per operation*:
   ``StateStore.save`` (``durability="sync"``) vs LangGraph ``SqliteSaver.put`` vs a
   bare one-row WAL commit (:class:`_common.BareCommits`, the floor), at
   ``synchronous=FULL`` and ``NORMAL``; each as % of the floor. CPU per save is
   ``time.process_time`` around each call (the whole process: statekeeper's SQLite
   writer thread included).
2. Concurrency curve, 1/4/16/64 agents (FULL; ``--curve`` picks the counts):
   statekeeper ``durability="group"`` with ``asyncio.gather`` vs SqliteSaver sequential
   and shared by N threads (the better is the peer) vs bare commits of N rows per
   transaction (the fsync-batching limit); and the bytes statekeeper's saves had
   written to the disk (``write_bytes`` of ``/proc/self/io``, the whole process, its
   SQLite threads included; Linux only).
3. Cold load of the latest state (``cache_size=0``) with the head 0, 1, 8, 50, 99 events
   past the last whole snapshot (``snapshot_every=100``; the tail snapshots the store
   writes by default between whole ones, store/tails.py, stored as it writes them) vs
   ``SqliteSaver.get_tuple`` on the same states, interleaved per load.
4. A fresh process: interpreter + import + open + first load, statekeeper vs
   SqliteSaver, each a subprocess, paired trials (``python -c pass`` as the baseline).
5. ``--postgres``: 16 concurrent agents on PostgreSQL, statekeeper ``group`` vs
   AsyncPostgresSaver one saver per agent (runs :mod:`bench_postgres`).

``--profile`` instead times each stage of a save and of a cold load by wrapping the
functions of the real path with timers in-process (private names: a stage whose
function moved is reported as absent, not guessed), then prints cProfile top-25 tables
of the save path (event-loop thread and SQLite writer thread) and the load path.

Run::

    .venv/bin/python benchmarks/bench_hotpath.py --quick     # < 60 s
    .venv/bin/python benchmarks/bench_hotpath.py             # full
    .venv/bin/python benchmarks/bench_hotpath.py --profile   # stage breakdown + cProfile
    .venv/bin/python benchmarks/bench_hotpath.py --quick --postgres
    .venv/bin/python benchmarks/bench_hotpath.py --only seq --sync FULL   # section 1 only
    .venv/bin/python benchmarks/bench_hotpath.py --only curve --curve 1 16

``--only`` runs some of sections 1-4 (``seq``, ``curve``, ``load``: 3, ``fresh``: 4).
``--whole`` adds to sections 1-3 the side ``skw``: a store that keeps its head whole
(``snapshot_every=1``, ``full_snapshot_every=1``: every save carries its state as a
whole snapshot, one statement on SQLite), interleaved with the others the same way, and
with each side's bytes written a save (section 1: ``write_bytes`` read around each
operation, untimed; section 2: around each side's whole run, its close included).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import inspect
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    BareCommits,
    Workload,
    commit_ceiling,
    lg_config,
    lg_open,
    lg_plan,
    machine,
    make_messages,
    median,
    percentile,
    profile_text,
    table,
)
from bench_checkpoint import lg_write_concurrent, sk_url, sk_write_group
from statekeeper.store.store import StateStore

CHARS = 300  # characters per chat message
ROW_BYTES = 500  # bare-commit row: about one statekeeper event adding a 300-char message
CURVE = (1, 4, 16, 64)
SECTIONS = ("seq", "curve", "load", "fresh")
PAST_SNAPSHOT = (0, 1, 8, 50, 99)  # events past the last WHOLE snapshot
SNAPSHOT_EVERY = 100  # explicit (the default policy, "bounded", is by replay cost)
#: ``--whole``: a store that keeps its head whole (every save carries its state as a
#: whole snapshot), run beside the default store as the side ``skw``
WHOLE: dict[str, Any] = {"snapshot_every": 1, "full_snapshot_every": 1}
GOALS = {
    "seq_full": 1.15,
    "seq_normal": 1.3,
    "floor_pct": 85.0,
    "group16": 5.0,
    "group16_limit_pct": 25.0,
    "fresh": 1.2,
    "postgres": 2.0,
}


def spread(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values)}


def fmt_spread(s: dict[str, float], fmt: str = ",.0f", suffix: str = "") -> str:
    return (
        f"{s['median']:{fmt}}{suffix} [{s['min']:{fmt}}..{s['max']:{fmt}}]"
        if s["min"] != s["max"]
        else f"{s['median']:{fmt}}{suffix}"
    )


# ------------------------------------------------------------ 1. sequential saves


async def seq_round(
    tmp: Path,
    tag: str,
    sync: str,
    wl: Workload,
    first: int,
    extra: dict[str, Callable[[str, dict[str, Any]], None]] | None = None,
    whole: bool = False,
) -> dict[str, Any]:
    """One round: every step of every agent does one statekeeper save, one SqliteSaver
    put and one bare commit, in an order that rotates per operation (``first`` picks
    the rotation of the round). ``extra``: more sides, each a synchronous
    ``save(agent, document)`` run in the same rotation (``bench_save_floor.py``'s
    minimal saves); ``whole``: the side ``skw``, a store with :data:`WHOLE`. Each side's
    bytes written a save are ``write_bytes`` read around its operations (untimed)."""
    extra = extra or {}
    sides = ("sk", "lg", "bare", *(("skw",) if whole else ()), *extra)
    store = StateStore(sk_url(tmp / f"seq-sk-{tag}.db", sync), durability="sync")
    stores = {"sk": store}
    if whole:
        stores["skw"] = StateStore(
            sk_url(tmp / f"seq-skw-{tag}.db", sync), durability="sync", **WHOLE
        )
    saver = lg_open(tmp / f"seq-lg-{tag}.db", sync)
    bare = BareCommits(tmp / f"seq-bare-{tag}.db", sync, ROW_BYTES)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    plans = {a: lg_plan(saver, docs[a]) for a in wl.agent_ids}
    configs = {a: lg_config(a) for a in wl.agent_ids}
    lat: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    written = dict.fromkeys(sides, 0)
    wall, proc = time.perf_counter, time.process_time
    k = len(sides)
    try:
        i = first
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                i += 1
                doc = docs[a][step]
                for side in sides[i % k :] + sides[: i % k]:
                    b0 = write_bytes() or 0
                    if side in stores:
                        save_doc = stores[side].save
                        c0, t0 = proc(), wall()
                        await save_doc(a, doc)
                        t1, c1 = wall(), proc()
                    elif side == "lg":
                        cp, meta, versions = plans[a][step]
                        cfg = configs[a]
                        c0, t0 = proc(), wall()
                        configs[a] = saver.put(cfg, cp, meta, versions)
                        t1, c1 = wall(), proc()
                    elif side == "bare":
                        c0, t0 = proc(), wall()
                        bare.commit()
                        t1, c1 = wall(), proc()
                    else:
                        save = extra[side]
                        c0, t0 = proc(), wall()
                        save(a, doc)
                        t1, c1 = wall(), proc()
                    written[side] += (write_bytes() or 0) - b0
                    lat[side].append(t1 - t0)
                    cpu[side].append(c1 - c0)
    finally:
        for opened in stores.values():
            await opened.close()
        saver.conn.close()
        bare.close()
    return {
        side: {
            "rate": len(lat[side]) / sum(lat[side]),
            "lat": lat[side],
            "cpu_us": 1e6 * sum(cpu[side]) / len(cpu[side]),
            "bytes_written": written[side] / len(lat[side]),
        }
        for side in lat
    }


def seq_summary(rounds: list[dict[str, Any]], firsts: int) -> dict[str, Any]:
    """``firsts``: the operations of each round's first step (one per agent); the
    ``_steady`` figures leave them out. The store's first save of a round pays its
    first-use checks and the first commit into an empty WAL (a WAL header and directory
    fdatasync, even at NORMAL), the peer's first put neither (``setup()`` wrote its WAL,
    untimed): at ``--quick`` those first saves are the p99 (docs/benchmarks.md, "tail")."""
    out: dict[str, Any] = {}
    for side in ("sk", "lg", "bare", *(("skw",) if "skw" in rounds[0] else ())):
        pooled = [x for r in rounds for x in r[side]["lat"]]
        steady = [x for r in rounds for x in r[side]["lat"][firsts:]]
        out[side] = {
            "rate": spread([r[side]["rate"] for r in rounds]),
            "cpu_us": spread([r[side]["cpu_us"] for r in rounds]),
            "p25_ms": 1e3 * percentile(pooled, 25),
            "p50_ms": 1e3 * percentile(pooled, 50),
            "p75_ms": 1e3 * percentile(pooled, 75),
            "p99_ms": 1e3 * percentile(pooled, 99),
            "p99_steady_ms": 1e3 * percentile(steady, 99),
            "bytes_written": spread([r[side]["bytes_written"] for r in rounds]),
        }
    out["ratio_sk_lg_steady"] = spread(
        [sum(r["lg"]["lat"][firsts:]) / sum(r["sk"]["lat"][firsts:]) for r in rounds]
    )
    out["ratio_sk_lg"] = spread([r["sk"]["rate"] / r["lg"]["rate"] for r in rounds])
    out["pct_floor_sk"] = spread([100 * r["sk"]["rate"] / r["bare"]["rate"] for r in rounds])
    out["pct_floor_lg"] = spread([100 * r["lg"]["rate"] / r["bare"]["rate"] for r in rounds])
    out["cpu_ratio_sk_lg"] = spread([r["sk"]["cpu_us"] / r["lg"]["cpu_us"] for r in rounds])
    if "skw" in rounds[0]:
        out["ratio_skw_lg"] = spread([r["skw"]["rate"] / r["lg"]["rate"] for r in rounds])
        out["ratio_skw_lg_steady"] = spread(
            [sum(r["lg"]["lat"][firsts:]) / sum(r["skw"]["lat"][firsts:]) for r in rounds]
        )
        out["pct_floor_skw"] = spread([100 * r["skw"]["rate"] / r["bare"]["rate"] for r in rounds])
        out["cpu_ratio_skw_lg"] = spread([r["skw"]["cpu_us"] / r["lg"]["cpu_us"] for r in rounds])
    return out


def seq_table(res: dict[str, dict[str, Any]]) -> str:
    rows = []
    names = {
        "sk": "StateStore.save",
        "skw": "StateStore.save, head whole (--whole)",
        "lg": "SqliteSaver.put",
        "bare": "bare 1-row commit",
    }
    for sync, s in res.items():
        for side in ("sk", *(("skw",) if "skw" in s else ()), "lg", "bare"):
            x = s[side]
            pct = "100 %" if side == "bare" else fmt_spread(s[f"pct_floor_{side}"], ".0f", " %")
            rows.append(
                [
                    sync,
                    names[side],
                    fmt_spread(x["rate"]),
                    f"{x['p50_ms']:.3f} ({x['p25_ms']:.3f}..{x['p75_ms']:.3f})",
                    f"{x['p99_ms']:.3f}",
                    fmt_spread(x["cpu_us"]),
                    pct,
                    fmt_spread(x["bytes_written"]),
                ]
            )
        goal = GOALS["seq_full"] if sync == "FULL" else GOALS["seq_normal"]
        for side in ("sk", *(("skw",) if "skw" in s else ())):
            rows.append(
                [
                    sync,
                    f"**ratio {side} / SqliteSaver**",
                    fmt_spread(s[f"ratio_{side}_lg"], ".2f", "x") + f" (goal >= {goal}x)",
                    "",
                    "",
                    fmt_spread(s[f"cpu_ratio_{side}_lg"], ".2f", "x") + " (goal <= 1x)",
                    f"goal >= {GOALS['floor_pct']:.0f} %",
                    "",
                ]
            )
    return table(
        [
            "sync",
            "what",
            "saves/s median [min..max]",
            "latency p50 (p25..p75) ms",
            "p99 ms",
            "CPU us/save",
            "% of floor",
            "bytes written/save",
        ],
        rows,
    )


# ------------------------------------------------------------ 2. concurrency curve


def write_bytes() -> int | None:
    """Bytes this process (every thread) has caused to be written to the disk
    (``write_bytes`` of ``/proc/self/io``); None where there is no such file."""
    try:
        with open("/proc/self/io", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


async def curve_round(
    tmp: Path, tag: str, wl: Workload, n: int, sk_first: bool, whole: bool = False
) -> dict[str, Any]:
    agents = wl.agent_ids[:n]
    res: dict[str, Any] = {}
    saves = n * len(wl.sizes)

    async def sk() -> None:
        for side, options in (("sk", {}), *((("skw", WHOLE),) if whole else ())):
            before = write_bytes()
            got = await sk_write_group(
                sk_url(tmp / f"grp-{side}-{tag}.db", "FULL"), wl, agents, **options
            )
            after = write_bytes()  # (the store closed: its last checkpoint included)
            got["cpu_us"] = 1e6 * got["cpu"] / saves
            got["mb_written"] = None if before is None or after is None else (after - before) / 1e6
            res[side] = got

    def lg() -> None:
        before = write_bytes()
        seq = lg_write_concurrent(tmp / f"grp-lgs-{tag}.db", "FULL", wl, agents, 1)
        after = write_bytes()
        res["lg_mb_written"] = None if before is None or after is None else (after - before) / 1e6
        thr = (
            lg_write_concurrent(tmp / f"grp-lgt-{tag}.db", "FULL", wl, agents, n) if n > 1 else seq
        )
        res["lg_seq"], res["lg_thr"] = seq["rate"], thr["rate"]
        res["lg"] = max(seq["rate"], thr["rate"])

    def limit() -> None:
        res["limit"] = commit_ceiling(
            tmp / f"grp-bare-{tag}.db",
            "FULL",
            n=max(20, 2000 // n),
            row_bytes=ROW_BYTES,
            rows=n,
        )["rate"]

    if sk_first:
        await sk()
        lg()
        limit()
    else:
        limit()
        lg()
        await sk()
    return res


def curve_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    written = [r["sk"]["mb_written"] for r in rounds if r["sk"]["mb_written"] is not None]
    extra: dict[str, Any] = {}
    lg_written = [r["lg_mb_written"] for r in rounds if r.get("lg_mb_written") is not None]
    if lg_written:
        extra["lg_mb_written"] = spread(lg_written)
    if "skw" in rounds[0]:
        skw_written = [r["skw"]["mb_written"] for r in rounds if r["skw"]["mb_written"] is not None]
        extra["skw"] = spread([r["skw"]["rate"] for r in rounds])
        extra["skw_cpu_us"] = spread([r["skw"]["cpu_us"] for r in rounds])
        extra["skw_per_commit"] = median([r["skw"]["per_commit"] for r in rounds])
        extra["skw_mb_written"] = spread(skw_written) if skw_written else None
        extra["skw_ratio"] = spread([r["skw"]["rate"] / r["lg"] for r in rounds])
        extra["skw_pct_limit"] = spread([100 * r["skw"]["rate"] / r["limit"] for r in rounds])
    return {
        **extra,
        "sk_mb_written": spread(written) if written else None,
        "sk": spread([r["sk"]["rate"] for r in rounds]),
        "sk_cpu_us": spread([r["sk"]["cpu_us"] for r in rounds]),
        "per_commit": median([r["sk"]["per_commit"] for r in rounds]),
        "lg": spread([r["lg"] for r in rounds]),
        "lg_seq": median([r["lg_seq"] for r in rounds]),
        "lg_thr": median([r["lg_thr"] for r in rounds]),
        "limit": spread([r["limit"] for r in rounds]),
        "ratio": spread([r["sk"]["rate"] / r["lg"] for r in rounds]),
        "pct_limit": spread([100 * r["sk"]["rate"] / r["limit"] for r in rounds]),
    }


def curve_table(res: dict[int, dict[str, Any]]) -> str:
    rows = []
    for n, s in res.items():
        if "skw" in s:  # (--whole: the head-whole store's row first)
            rows.append(
                [
                    f"{n} (skw: head whole)",
                    fmt_spread(s["skw"]),
                    f"{s['skw_per_commit']:.1f}",
                    fmt_spread(s["skw_cpu_us"]),
                    "-" if s["skw_mb_written"] is None else fmt_spread(s["skw_mb_written"], ".2f"),
                    f"{s['lg']['median']:,.0f}",
                    fmt_spread(s["skw_ratio"], ".2f", "x"),
                    fmt_spread(s["limit"]),
                    fmt_spread(s["skw_pct_limit"], ".0f", " %"),
                ]
            )
        rows.append(
            [
                n,
                fmt_spread(s["sk"]),
                f"{s['per_commit']:.1f}",
                fmt_spread(s["sk_cpu_us"]),
                "-" if s["sk_mb_written"] is None else fmt_spread(s["sk_mb_written"], ".2f"),
                f"{s['lg']['median']:,.0f} (seq {s['lg_seq']:,.0f}, {n} thr {s['lg_thr']:,.0f})"
                + (
                    f"; seq wrote {fmt_spread(s['lg_mb_written'], '.2f')} MB"
                    if "lg_mb_written" in s
                    else ""
                ),
                fmt_spread(s["ratio"], ".2f", "x"),
                fmt_spread(s["limit"]),
                fmt_spread(s["pct_limit"], ".0f", " %"),
            ]
        )
    return table(
        [
            "agents",
            "sk group saves/s",
            "saves/commit",
            "sk CPU us/save",
            "sk MB written",
            "SqliteSaver best saves/s",
            "ratio",
            f"batching limit rows/s ({ROW_BYTES} B rows, N per commit)",
            "sk % of limit",
        ],
        rows,
    )


# ------------------------------------------------------------------ 3. cold loads


async def whole_snapshot_seq(store: StateStore, agent: str) -> int:
    """The seq of ``agent``'s latest *whole* snapshot (0: none): the snapshots above it
    are tail snapshots (a delta on the one before them, store/tails.py), which a store
    with ``snapshot_every=100`` writes every few events past a whole one."""
    below: int | None = None
    while True:
        snap = await store.backend.latest_snapshot(agent, below)
        if snap is None:
            return 0
        body, _ = store._reads.open_snapshot(agent, snap)
        if "base" not in body:
            return snap.seq
        below = snap.seq - 1


async def build_loads(tmp: Path, settle: bool = False) -> tuple[str, Path, dict[int, int]]:
    """One agent per distance k: 100 + k saves of a chat growing by one message (its
    head k events past the whole snapshot at 100, with the tails the store wrote);
    ``settle``: then each agent settled (``StateStore.settle``: its head stored whole,
    the k rows then say where the head sat before the settle)."""
    url = sk_url(tmp / "load-sk.db", "OFF")  # build only; loads reopen it at FULL
    saver = lg_open(tmp / "load-lg.db", "OFF")
    msgs = make_messages(SNAPSHOT_EVERY + max(PAST_SNAPSHOT), seed=7, chars=CHARS)
    sizes: dict[int, int] = {}
    try:
        async with StateStore(url, durability="sync", snapshot_every=SNAPSHOT_EVERY) as store:
            for k in PAST_SNAPSHOT:
                docs = [{"messages": msgs[: i + 1]} for i in range(SNAPSHOT_EVERY + k)]
                agent = f"k{k}"
                for doc in docs:
                    await store.save(agent, doc)
                cfg = lg_config(agent)
                for cp, meta, versions in lg_plan(saver, docs):
                    cfg = saver.put(cfg, cp, meta, versions)
                head = await store.backend.head(agent)
                whole = await whole_snapshot_seq(store, agent)
                assert head - whole == k, (head, whole)
                if settle:
                    await store.settle(agent)
                    assert await whole_snapshot_seq(store, agent) == head
                sizes[k] = len(docs[-1]["messages"])
    finally:
        saver.conn.close()
    return sk_url(tmp / "load-sk.db", "FULL"), tmp / "load-lg.db", sizes


async def build_whole_loads(tmp: Path) -> str:
    """``--whole``: the same agents and states as :func:`build_loads` saved by a store
    with :data:`WHOLE` (each head stored whole: k says only how many saves it took)."""
    msgs = make_messages(SNAPSHOT_EVERY + max(PAST_SNAPSHOT), seed=7, chars=CHARS)
    async with StateStore(sk_url(tmp / "load-skw.db", "OFF"), durability="sync", **WHOLE) as store:
        for k in PAST_SNAPSHOT:
            for i in range(SNAPSHOT_EVERY + k):
                await store.save(f"k{k}", {"messages": msgs[: i + 1]})
            assert await whole_snapshot_seq(store, f"k{k}") == SNAPSHOT_EVERY + k
    return sk_url(tmp / "load-skw.db", "FULL")


async def load_round(
    url: str, lg_path: Path, loads: int, sk_first: bool, whole_url: str | None = None
) -> dict[str, Any]:
    """Cold loads of each agent, the sides interleaved per load (their order rotating);
    ``whole_url``: the side ``skw`` too, a store of :func:`build_whole_loads`."""
    stores = {"sk": StateStore(url, cache_size=0)}
    if whole_url is not None:
        stores["skw"] = StateStore(whole_url, cache_size=0)
    saver = lg_open(lg_path, "FULL")
    sides = ("sk", "lg", *(("skw",) if whole_url is not None else ()))
    out: dict[str, Any] = {}
    try:
        for k in PAST_SNAPSHOT:
            agent, cfg = f"k{k}", lg_config(f"k{k}")
            for store in stores.values():  # first touch of the pages/statement cache: untimed
                await store.load(agent)
            saver.get_tuple(cfg)
            lat: dict[str, list[float]] = {side: [] for side in sides}
            for i in range(loads):
                j = (i + (0 if sk_first else 1)) % len(sides)
                for side in sides[j:] + sides[:j]:
                    t0 = time.perf_counter()
                    if side == "lg":
                        saver.get_tuple(cfg)
                    else:
                        await stores[side].load(agent)
                    lat[side].append(time.perf_counter() - t0)
            out[str(k)] = lat
    finally:
        for store in stores.values():
            await store.close()
        saver.conn.close()
    return out


def load_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for k in PAST_SNAPSHOT:
        key = str(k)
        sk_pool = [x for r in rounds for x in r[key]["sk"]]
        lg_pool = [x for r in rounds for x in r[key]["lg"]]
        pools = [("sk", sk_pool), ("lg", lg_pool)]
        if "skw" in rounds[0][key]:
            pools.append(("skw", [x for r in rounds for x in r[key]["skw"]]))
        out[key] = {
            side: {
                "p25_ms": 1e3 * percentile(pool, 25),
                "p50_ms": 1e3 * percentile(pool, 50),
                "p75_ms": 1e3 * percentile(pool, 75),
            }
            for side, pool in pools
        }
        out[key]["ratio"] = spread([median(r[key]["sk"]) / median(r[key]["lg"]) for r in rounds])
        if "skw" in rounds[0][key]:
            out[key]["ratio_skw"] = spread(
                [median(r[key]["skw"]) / median(r[key]["lg"]) for r in rounds]
            )
    return out


def load_table(res: dict[str, Any], sizes: dict[int, int]) -> str:
    rows = []
    for k in PAST_SNAPSHOT:
        s = res[str(k)]
        rows.append(
            [
                f"{k} ({SNAPSHOT_EVERY + k} events, {sizes[k]} msgs)",
                f"{s['sk']['p50_ms']:.3f} ({s['sk']['p25_ms']:.3f}..{s['sk']['p75_ms']:.3f})",
                f"{s['lg']['p50_ms']:.3f} ({s['lg']['p25_ms']:.3f}..{s['lg']['p75_ms']:.3f})",
                fmt_spread(s["ratio"], ".2f", "x") + " (goal <= 1x)",
                *(
                    (
                        f"{s['skw']['p50_ms']:.3f} ({s['skw']['p25_ms']:.3f}.."
                        f"{s['skw']['p75_ms']:.3f})",
                        fmt_spread(s["ratio_skw"], ".2f", "x"),
                    )
                    if "skw" in s
                    else ()
                ),
            ]
        )
    whole = "skw" in res[str(PAST_SNAPSHOT[0])]
    return table(
        [
            "events past the last whole snapshot",
            "sk load p50 (p25..p75) ms",
            "get_tuple p50 (p25..p75) ms",
            "latency ratio sk / peer",
            *(("skw (head whole) p50 (p25..p75) ms", "ratio skw / peer") if whole else ()),
        ],
        rows,
    )


# --------------------------------------------------------------- 4. fresh process

_SK_CHILD = """
import sys, time
t0 = time.perf_counter()
import asyncio
from statekeeper import StateStore
t1 = time.perf_counter()
async def main():
    store = StateStore(sys.argv[1])
    t2 = time.perf_counter()
    snap = await store.load(sys.argv[2])
    t3 = time.perf_counter()
    assert snap.data["messages"]
    await store.close()
    return t2, t3
t2, t3 = asyncio.run(main())
print(t1 - t0, t2 - t1, t3 - t2)
"""

_LG_CHILD = """
import sys, time
t0 = time.perf_counter()
import sqlite3
from langgraph.checkpoint.sqlite import SqliteSaver
t1 = time.perf_counter()
saver = SqliteSaver(sqlite3.connect(sys.argv[1], check_same_thread=False))
t2 = time.perf_counter()
tup = saver.get_tuple({"configurable": {"thread_id": sys.argv[2], "checkpoint_ns": ""}})
t3 = time.perf_counter()
assert tup.checkpoint["channel_values"]["messages"]
saver.conn.close()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def fresh_process(url: str, lg_path: Path, agent: str, trials: int) -> dict[str, Any]:
    """Whole-process wall time of a child that imports, opens and loads once; the three
    children run in an order that rotates per trial."""
    cmds = {
        "base": [sys.executable, "-c", "pass"],
        "sk": [sys.executable, "-c", _SK_CHILD, url, agent],
        "lg": [sys.executable, "-c", _LG_CHILD, str(lg_path), agent],
    }
    wall: dict[str, list[float]] = {k: [] for k in cmds}
    inner: dict[str, list[list[float]]] = {"sk": [], "lg": []}
    for cmd in cmds.values():  # warm the OS file cache, untimed
        subprocess.run(cmd, check=True, capture_output=True)
    order = list(cmds)
    for t in range(trials):
        for side in order[t % 3 :] + order[: t % 3]:
            t0 = time.perf_counter()
            proc = subprocess.run(cmds[side], check=True, capture_output=True, text=True)
            wall[side].append(time.perf_counter() - t0)
            if side != "base":
                inner[side].append([float(x) for x in proc.stdout.split()])
    out: dict[str, Any] = {}
    for side in cmds:
        out[side] = {"wall_ms": 1e3 * median(wall[side])}
    for side in ("sk", "lg"):
        for i, name in enumerate(("import_ms", "open_ms", "first_load_ms")):
            out[side][name] = 1e3 * median([x[i] for x in inner[side]])
    paired = [s / lg for s, lg in zip(wall["sk"], wall["lg"], strict=True)]
    above = [
        (s - b) / (lg - b) for s, lg, b in zip(wall["sk"], wall["lg"], wall["base"], strict=True)
    ]
    out["ratio_wall"] = spread(paired)
    out["ratio_above_python"] = spread(above)
    out["trials"] = trials
    return out


def fresh_table(f: dict[str, Any]) -> str:
    rows = []
    for side, name in (("sk", "statekeeper"), ("lg", "SqliteSaver")):
        x = f[side]
        rows.append(
            [
                name,
                f"{x['wall_ms']:.1f}",
                f"{x['wall_ms'] - f['base']['wall_ms']:.1f}",
                f"{x['import_ms']:.1f}",
                f"{x['open_ms']:.2f}",
                f"{x['first_load_ms']:.2f}",
            ]
        )
    rows.append(["`python -c pass`", f"{f['base']['wall_ms']:.1f}", "0", "", "", ""])
    rows.append(
        [
            "**ratio sk / peer**",
            fmt_spread(f["ratio_wall"], ".2f", "x"),
            fmt_spread(f["ratio_above_python"], ".2f", "x") + f" (goal <= {GOALS['fresh']}x)",
            "",
            "",
            "",
        ]
    )
    return table(
        [
            f"fresh process ({f['trials']} paired trials, medians)",
            "whole process ms",
            "above python ms",
            "import ms",
            "open ms",
            "first load ms",
        ],
        rows,
    )


# ------------------------------------------------------------------------ --profile


class Stages:
    """Timers wrapped around the functions of the real path, in-process. Each stage
    accumulates wall time per operation (:meth:`end_op` closes one), so that the
    table can show the median operation, robust to a busy machine's preemptions;
    :meth:`restore` puts the originals back."""

    def __init__(self) -> None:
        self.cur: dict[str, float] = defaultdict(float)
        self.ops: list[dict[str, float]] = []
        self.calls: dict[str, int] = defaultdict(int)
        self.order: list[str] = []  # table order: wrap order plus declared labels
        self.missing: list[str] = []
        self._undo: list[Callable[[], None]] = []
        self.marks: dict[str, float] = {}

    def add(self, label: str, dt: float) -> None:
        self.cur[label] += dt
        self.calls[label] += 1

    def end_op(self, e2e: str) -> None:
        """Close one operation; "other" = end to end minus the top-level stages."""
        cur = self.cur
        top = sum(v for k, v in cur.items() if not k.startswith(" ") and k != e2e)
        cur[OTHER] = cur[e2e] - top
        self.ops.append(dict(cur))
        self.cur = defaultdict(float)

    def wrap(self, owner: Any, name: str, label: str, mark: str | None = None) -> None:
        if label not in self.order:  # (one label may time a name in two modules)
            self.order.append(label)
        orig = getattr(owner, name, None)
        if orig is None:
            self.missing.append(f"{label} ({name} not found)")
            return
        own = isinstance(owner, type(sys)) or name in getattr(owner, "__dict__", {})
        add, marks, clock = self.add, self.marks, time.perf_counter

        if asyncio.iscoroutinefunction(orig):

            @functools.wraps(orig)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                t0 = clock()
                if mark:
                    marks[mark + ".start"] = t0
                try:
                    return await orig(*args, **kwargs)
                finally:
                    t1 = clock()
                    if mark:
                        marks[mark + ".end"] = t1
                    add(label, t1 - t0)

            wrapper: Any = awrapper
        else:

            async def finish(awaitable: Any, t0: float) -> Any:
                try:
                    return await awaitable
                finally:
                    t1 = clock()
                    if mark:
                        marks[mark + ".end"] = t1
                    add(label, t1 - t0)

            @functools.wraps(orig)
            def swrapper(*args: Any, **kwargs: Any) -> Any:
                t0 = clock()
                if mark:
                    marks[mark + ".start"] = t0
                result = orig(*args, **kwargs)
                if inspect.isawaitable(result):
                    # a plain function handing back a coroutine (e.g. the backend's
                    # argument-checking wrappers): time it until it completes
                    return finish(result, t0)
                t1 = clock()
                if mark:
                    marks[mark + ".end"] = t1
                add(label, t1 - t0)
                return result

            wrapper = swrapper
        setattr(owner, name, wrapper)
        self._undo.append(
            (lambda: setattr(owner, name, orig)) if own else (lambda: delattr(owner, name))
        )

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


class TimedConnection:
    """Stands in for the SQLite writer connection: times each statement by kind."""

    def __init__(self, conn: Any, stages: Stages) -> None:
        self._conn, self._stages = conn, stages

    KINDS = (
        "BEGIN IMMEDIATE",
        "SELECT (in the transaction)",
        "UPDATE sk_agents (head compare-and-set)",
        "INSERT sk_agents",
        "INSERT sk_events",
        "INSERT sk_snapshots",
        "INSERT sk_idempotency",
        "SAVEPOINT / RELEASE",
        "COMMIT (WAL write + fsync)",
    )

    @staticmethod
    def kind(sql: str) -> str:
        words = sql.split()
        head = " ".join(words[:2]).upper()
        for prefix, label in (
            ("BEGIN", "BEGIN IMMEDIATE"),
            ("COMMIT", "COMMIT (WAL write + fsync)"),
            ("UPDATE SK_AGENTS", "UPDATE sk_agents (head compare-and-set)"),
            ("SAVEPOINT", "SAVEPOINT / RELEASE"),
            ("RELEASE", "SAVEPOINT / RELEASE"),
            ("SELECT", "SELECT (in the transaction)"),
        ):
            if head.startswith(prefix):
                return label
        for table_name in ("sk_agents", "sk_events", "sk_snapshots", "sk_idempotency"):
            if table_name in sql:
                return f"INSERT {table_name}"
        return head

    def execute(self, sql: str, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._conn.execute(sql, *args)
        finally:
            self._stages.add("    sql: " + self.kind(sql), time.perf_counter() - t0)

    def executemany(self, sql: str, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._conn.executemany(sql, *args)
        finally:
            self._stages.add(
                "    sql: " + self.kind(sql) + " (executemany)", time.perf_counter() - t0
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


SAVE_E2E = "save() end to end"
HAND_OFF = "  hand-off to the writer thread (call -> transaction starts)"
WAKE_UP = "  wake-up back on the event loop (transaction ends -> await returns)"
LOAD_E2E = "load() end to end (cache_size=0)"


def instrument_save(store: StateStore, stages: Stages) -> None:
    import statekeeper.patch as patch_mod
    import statekeeper.store.write_args as write_args
    import statekeeper.store.write_build as write_build
    import statekeeper.store.write_fast as write_fast

    backend: Any = store.backend
    w = stages.wrap
    w(store._reads, "current", "cache lookup (+ validation read when not trusted)")
    w(backend, "read", "  backend.read (the validation read before the write)")
    w(patch_mod, "diff", "patch.diff (change detection, whole history compared)")
    w(write_args, "diff_by_key", "change detection (pack each top-level value, compare bytes)")
    w(write_fast, "diff_by_key", "change detection (pack each top-level value, compare bytes)")
    w(store._writes, "build", "WritePipeline.build (the record)")
    w(store.codec, "serialize", "  serialise the event (codec.serialize)")
    w(store.codec, "seal", "  frame + SHA-256 link (codec.seal)")
    w(write_build, "_loads", "  re-decode the bytes just built (orjson.loads)")
    w(patch_mod, "apply", "  re-apply the patch to the new state (patch.apply)")
    w(store.codec, "head_tag", "  head tag (codec.head_tag)")
    w(store._snapshots, "encode", "  snapshot encode (when due)")
    w(backend, "append", "backend.append (hand-off + transaction + wake-up)", mark="append")
    stages.order.append(HAND_OFF)
    w(
        backend,
        "_append_batch_sync",
        "  transaction on the writer thread (_append_batch_sync)",
        mark="txn",
    )
    stages.order.extend("    sql: " + k for k in TimedConnection.KINDS)
    stages.order.append(WAKE_UP)
    if getattr(backend, "_writer", None) is not None:
        orig = backend._writer
        backend._writer = TimedConnection(orig, stages)
        stages._undo.append(lambda: setattr(backend, "_writer", orig))


def instrument_load(store: StateStore, stages: Stages) -> None:
    import statekeeper.store.reads as reads_mod

    backend: Any = store.backend
    w = stages.wrap
    w(backend, "head_tag", "backend.head_tag (head row)")
    w(backend, "latest_snapshot", "backend.latest_snapshot (snapshot row)")
    w(backend, "read_latest", "backend.read_latest (snapshot + the events after it)")
    w(store._reads, "decode_snapshot", "decode the snapshot (ReadPath.decode_snapshot)")
    w(store.codec, "decode", "  verify SHA-256 + parse (codec.decode)")
    w(backend, "read", "backend.read (the events after the snapshot)")
    w(store._reads, "apply_events", "fold the events (ReadPath.apply_events)")
    w(store.codec, "decode_next", "  verify SHA-256 + chain + parse (codec.decode_next)")
    w(reads_mod, "apply_payload", "  apply each event's patch (apply_payload)")
    w(store.codec, "check_head", "check the head tag (codec.check_head)")
    w(store._reads, "public", "copy for the caller (ReadPath.public)")
    w(reads_mod, "_dumps", "  orjson.dumps of the state")
    w(reads_mod, "_loads", "  orjson.loads of the copy")


OTHER = "(not in any stage above: lock, bookkeeping, timers)"


def stage_rows(stages: Stages) -> dict[str, dict[str, float]]:
    """Per stage: median and mean microseconds per operation, and calls per operation."""
    n = len(stages.ops)
    labels = {k for op in stages.ops for k in op}
    return {
        label: {
            "p50_us": 1e6 * median([op.get(label, 0.0) for op in stages.ops]),
            "mean_us": 1e6 * sum(op.get(label, 0.0) for op in stages.ops) / n,
            "calls": stages.calls[label] / n if label in stages.calls else 1.0,
        }
        for label in labels
    } | {"_order": stages.order}  # type: ignore[dict-item]


async def profile_save(tmp: Path, sync: str, wl: Workload, tag: str) -> dict[str, Any]:
    """The sequential-save workload, once plain (end to end) and once with timers."""
    docs = {a: wl.docs(a) for a in wl.agent_ids}

    async def run(store: StateStore, stages: Stages | None) -> list[float]:
        total: list[float] = []
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                t0 = time.perf_counter()
                await store.save(a, docs[a][step])
                dt = time.perf_counter() - t0
                total.append(dt)
                if stages is not None:
                    stages.add(SAVE_E2E, dt)
                    m = stages.marks
                    if "txn.start" in m and "append.start" in m:
                        stages.add(HAND_OFF, m["txn.start"] - m["append.start"])
                        stages.add(WAKE_UP, m["append.end"] - m["txn.end"])
                    m.clear()
                    stages.end_op(SAVE_E2E)
        return total

    async with StateStore(sk_url(tmp / f"prof-plain-{tag}.db", sync)) as store:
        plain = await run(store, None)
    stages = Stages()
    async with StateStore(sk_url(tmp / f"prof-timed-{tag}.db", sync)) as store:
        instrument_save(store, stages)
        try:
            await run(store, stages)
        finally:
            stages.restore()
    n = wl.saves
    rows = stage_rows(stages)
    return {
        "plain_us": 1e6 * median(plain),
        "plain_mean_us": 1e6 * sum(plain) / n,
        "stages": rows,
        "missing": stages.missing,
        "saves": n,
    }


async def profile_load(url: str, k: int, loads: int) -> dict[str, Any]:
    agent = f"k{k}"
    async with StateStore(url, cache_size=0) as store:
        await store.load(agent)
        plain = []
        for _ in range(loads):
            t0 = time.perf_counter()
            await store.load(agent)
            plain.append(time.perf_counter() - t0)
        stages = Stages()
        instrument_load(store, stages)
        try:
            for _ in range(loads):
                t0 = time.perf_counter()
                await store.load(agent)
                stages.add(LOAD_E2E, time.perf_counter() - t0)
                stages.end_op(LOAD_E2E)
        finally:
            stages.restore()
    return {
        "plain_us": 1e6 * median(plain),
        "plain_mean_us": 1e6 * sum(plain) / loads,
        "stages": stage_rows(stages),
        "missing": stages.missing,
    }


def stage_table(cols: dict[str, dict[str, Any]], e2e: str) -> str:
    labels: list[str] = [e2e]
    for c in cols.values():
        for label in [*c["stages"]["_order"], *sorted(c["stages"])]:
            if label not in labels and label != "_order" and label != OTHER:
                labels.append(label)
    rows = []
    for label in [*labels, OTHER]:
        row = [label]
        for c in cols.values():
            s = c["stages"].get(label)
            row.append(f"{s['p50_us']:.1f} / {s['mean_us']:.1f} ({s['calls']:.2g})" if s else "-")
        rows.append(row)
    rows.append(
        [
            "end to end, same run without the timers",
            *(f"{c['plain_us']:.1f} / {c['plain_mean_us']:.1f}" for c in cols.values()),
        ]
    )
    return table(["stage: us per operation, median / mean (calls per operation)", *cols], rows)


async def cprofile_paths(tmp: Path, wl: Workload, load_url: str, top: int) -> dict[str, str]:
    out: dict[str, str] = {}
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    store = StateStore(sk_url(tmp / "cprof-save.db", "FULL"))
    main_p, writer_p = cProfile.Profile(), cProfile.Profile()
    pool = store.backend._writer_pool  # type: ignore[attr-defined]  # benchmark-only peek
    pool.submit(writer_p.enable).result()
    main_p.enable()
    for step in range(len(wl.sizes)):
        for a in wl.agent_ids:
            await store.save(a, docs[a][step])
    main_p.disable()
    pool.submit(writer_p.disable).result()
    await store.close()
    out["save, event-loop thread (tottime)"] = profile_text(main_p, "tottime", top)
    out["save, SQLite writer thread (tottime)"] = profile_text(writer_p, "tottime", top)
    async with StateStore(load_url, cache_size=0) as store:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(100):
            for k in PAST_SNAPSHOT:
                await store.load(f"k{k}")
        prof.disable()
    title = f"cold load, heads {PAST_SNAPSHOT} past the whole snapshot, 100 each (tottime)"
    out[title] = profile_text(prof, "tottime", top)
    return out


async def run_profile(tmp: Path, args: argparse.Namespace, wl: Workload) -> dict[str, Any]:
    saves = {}
    for sync in ("FULL", "NORMAL"):
        saves[sync] = await profile_save(tmp, sync, wl, sync)
    print(
        f"\n## save: stage breakdown ({wl.saves} sequential saves of chats growing "
        f"{wl.sizes[0]}->{wl.sizes[-1]} messages of ~{CHARS} chars; us per save)\n"
    )
    print(stage_table(saves, SAVE_E2E))
    url, _, sizes = await build_loads(tmp)
    loads = {}
    for k in PAST_SNAPSHOT:
        loads[f"k={k} ({sizes[k]} msgs)"] = await profile_load(url, k, args.profile_loads)
    print(f"\n## cold load: stage breakdown ({args.profile_loads} loads each; us per load)\n")
    print(stage_table(loads, LOAD_E2E))
    missing = {m for c in (*saves.values(), *loads.values()) for m in c["missing"]}
    if missing:
        print("\nstages not found in this code (renamed or gone):", sorted(missing))
    texts = await cprofile_paths(tmp, wl, url, args.top)
    for name, text in texts.items():
        print(f"\n## cProfile: {name}\n```\n{text.strip()}\n```")
    return {"save": saves, "load": loads, "cprofile": texts}


# ----------------------------------------------------------------------------- main


def loadavg() -> list[str]:
    """1/5/15-minute load averages: the machine is shared, say how busy it was."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[:3]
    except OSError:
        return []


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    info = machine("langgraph-checkpoint", "langgraph-checkpoint-sqlite")
    print("machine:", json.dumps(info))
    print(f"load average at start: {loadavg()}")
    payload: dict[str, Any] = {"bench": "hotpath", "quick": args.quick, "machine": info}
    with tempfile.TemporaryDirectory(prefix="sk-hot-") as d:
        tmp = Path(d)
        if args.profile:
            wl = Workload(args.agents, 10, args.last, chars=CHARS)
            payload["profile"] = await run_profile(tmp, args, wl)
            return payload

        t_start = time.perf_counter()
        only = set(args.only)
        # 1. sequential saves
        if "seq" in only:
            wl = Workload(args.agents, 10, args.last, chars=CHARS)
            seq: dict[str, Any] = {}
            for sync in args.sync:
                rounds = [
                    await seq_round(tmp, f"{sync}-{r}", sync, wl, first=r, whole=args.whole)
                    for r in range(args.rounds)
                ]
                seq[sync] = seq_summary(rounds, len(wl.agent_ids))
            print(
                f"\n## 1. sequential durable save ({args.agents} agents x {len(wl.sizes)} saves, "
                f"{wl.sizes[0]}->{wl.sizes[-1]} msgs of ~{CHARS} chars, per-op interleaved, "
                f"{args.rounds} rounds)\n"
            )
            print(seq_table(seq))
            for sync, x in seq.items():
                print(
                    f"{sync}, without each round's first save of each agent: p99 "
                    f"{x['sk']['p99_steady_ms']:.3f} ms (SqliteSaver.put "
                    f"{x['lg']['p99_steady_ms']:.3f}), ratio sk / SqliteSaver "
                    f"{fmt_spread(x['ratio_sk_lg_steady'], '.2f', 'x')}"
                    + (
                        f", skw / SqliteSaver {fmt_spread(x['ratio_skw_lg_steady'], '.2f', 'x')}"
                        if "skw" in x
                        else ""
                    )
                )
            payload["sequential"] = {s: {k: v for k, v in x.items()} for s, x in seq.items()}
            print(f"({time.perf_counter() - t_start:.0f} s)")

        # 2. concurrency curve
        if "curve" in only:
            cwl = Workload(max(args.curve), 10, args.curve_last, chars=CHARS)
            curve: dict[int, Any] = {}
            for n in args.curve:
                rounds = [
                    await curve_round(
                        tmp, f"{n}-{r}", cwl, n, sk_first=r % 2 == 0, whole=args.whole
                    )
                    for r in range(args.rounds)
                ]
                curve[n] = curve_summary(rounds)
            print(
                f"\n## 2. concurrent agents, synchronous=FULL ({len(cwl.sizes)} saves per agent, "
                f"{args.rounds} rounds)\n"
            )
            print(curve_table(curve))
            payload["curve"] = {str(n): v for n, v in curve.items()}
            print(f"({time.perf_counter() - t_start:.0f} s)")

        if only & {"load", "fresh"}:
            url, lg_path, sizes = await build_loads(tmp, args.settle)
        # 3. cold loads
        if "load" in only:
            whole_url = await build_whole_loads(tmp) if args.whole else None
            lrounds = [
                await load_round(url, lg_path, args.loads, sk_first=r % 2 == 0, whole_url=whole_url)
                for r in range(args.rounds)
            ]
            loads = load_summary(lrounds)
            print(
                f"\n## 3. cold load of the latest state ({args.loads} loads x "
                f"{args.rounds} rounds)\n"
            )
            print(load_table(loads, sizes))
            payload["cold_load"] = loads
            payload["cold_load_msgs"] = sizes

        # 4. fresh process
        if "fresh" in only:
            fresh = fresh_process(url, lg_path, "k50", args.trials)
            print(
                "\n## 4. fresh process: import + open + first load "
                "(agent 50 events past the whole snapshot)\n"
            )
            print(fresh_table(fresh))
            payload["fresh"] = fresh
            print(f"({time.perf_counter() - t_start:.0f} s)")

    # 5. PostgreSQL
    if args.postgres:
        import bench_postgres

        pg = await bench_postgres.main(args.dsn, 2 if args.quick else 3)
        ratio = pg["sk_group"] / pg["lg_per_agent"]
        print("\n## 5. PostgreSQL, 16 concurrent agents (bench_postgres)\n")
        print(
            table(
                ["what", "saves/s"],
                [
                    ["statekeeper durability=group", f"{pg['sk_group']:,.0f}"],
                    ["AsyncPostgresSaver, one saver per agent", f"{pg['lg_per_agent']:,.0f}"],
                    ["ratio", f"{ratio:.2f}x (goal >= {GOALS['postgres']}x)"],
                ],
            )
        )
        payload["postgres"] = {**pg, "ratio_vs_per_agent": ratio}
    return payload


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and saves (< 60 s)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"], choices=["FULL", "NORMAL"])
    parser.add_argument("--profile", action="store_true", help="stage breakdown + cProfile only")
    parser.add_argument("--profile-loads", type=int, default=500)
    parser.add_argument("--top", type=int, default=25, help="functions per cProfile table")
    parser.add_argument("--postgres", action="store_true", help="also run bench_postgres")
    parser.add_argument(
        "--only",
        nargs="+",
        default=list(SECTIONS),
        choices=SECTIONS,
        help="the sections to run (seq: 1, curve: 2, load: 3, fresh: 4; default all)",
    )
    parser.add_argument(
        "--curve",
        nargs="+",
        type=int,
        default=list(CURVE),
        metavar="AGENTS",
        help=f"agent counts of section 2 (default {' '.join(map(str, CURVE))})",
    )
    parser.add_argument(
        "--settle",
        action="store_true",
        help="sections 3-4: each agent settled after its saves (StateStore.settle)",
    )
    parser.add_argument(
        "--whole",
        action="store_true",
        help="sections 1-3: also a store keeping its head whole (snapshot_every=1,"
        " full_snapshot_every=1), the side skw",
    )
    parser.add_argument(
        "--dsn", default="postgresql://postgres@127.0.0.1:5432/test", help="for --postgres"
    )
    parser.add_argument(
        "--sync-face",
        metavar="BASE_REF",
        default=None,
        help="only the sync face's rows (SyncStateStore load, save, 16 threads) against "
        "the async API and SqliteSaver, this tree vs BASE_REF's (bench_sync_face.py)",
    )
    args = parser.parse_args(argv)
    if args.sync_face is not None:
        import bench_sync_face

        rounds = ["--rounds", str(args.rounds or (2 if args.quick else 5))]
        sys.argv = [bench_sync_face.__file__, "--base-ref", args.sync_face, *rounds]
        bench_sync_face.main()
        return {}
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    args.agents = 4 if args.quick else 8
    args.last = 30 if args.quick else 60  # messages in the last state (from 10)
    args.curve_last = 15 if args.quick else 30
    args.loads = 100 if args.quick else 300
    args.trials = 5 if args.quick else 15
    payload = asyncio.run(amain(args))
    payload["args"] = {k: v for k, v in vars(args).items() if k != "dsn"}
    print(json.dumps(payload, sort_keys=True, default=str))
    return payload


if __name__ == "__main__":
    main()
