"""Chat checkpointing: statekeeper's StateStore vs LangGraph's SqliteSaver.

Workload (the same for both): 40 agents, each a chat history growing from 20 to 50
messages of ~200 characters, one save per step (31 saves per agent, 1,240 saves),
steps interleaved across agents. Messages are plain dicts ``{"role", "content"}`` for
both libraries: this compares *storage*, not LangChain message serialization (with
LangChain message objects SqliteSaver's serializer costs several times more).

- statekeeper: ``StateStore.save(agent_id, {"messages": [...]})`` and ``load(agent_id)``
  on ``sqlite:///<tmp>/sk.db?synchronous=<S>``.
- LangGraph: ``SqliteSaver.put(config, checkpoint, metadata, new_versions)`` with real
  ``Checkpoint`` dicts (``create_checkpoint``, ``channel_values={"messages": [...]}``,
  ``get_next_version``) and ``get_tuple(config)`` for the latest checkpoint, on
  ``<tmp>/lg.db``. SqliteSaver sets ``journal_mode=WAL`` and leaves ``synchronous``
  at SQLite's default, which this Python's SQLite compiles as FULL (2) in WAL mode too
  (``DEFAULT_WAL_SYNCHRONOUS=2``); the script prints what it found. The ``NORMAL`` rows
  set ``PRAGMA synchronous=NORMAL`` on SqliteSaver's connection and ``?synchronous=NORMAL``
  on statekeeper's URL. Only ``put`` is timed for the peer (a LangGraph step also
  calls ``put_writes``; leaving it out favours the peer). Inputs (documents,
  checkpoints) are built before the timer starts, for both.

Measured, each in rounds that alternate which library goes first (medians over rounds;
ratios are statekeeper / peer):

1. writes/s, sequential (``durability="sync"``; every save is committed on return);
2. latest-state loads/s: statekeeper cold (a new store, ``cache_size=0``: every load
   reads the head, the latest snapshot and the events after it, verifies checksums and
   folds) and warm (default cache with ``validate_cache=True``: one indexed read per
   load to catch other writers, then a copy of the cached state); SqliteSaver
   ``get_tuple`` (it has no cache, so one number serves as the peer for both). The file
   is in the OS page cache for both;
3. 16 agents saving concurrently: statekeeper ``durability="group"`` with
   ``asyncio.gather`` of 16 agents vs SqliteSaver sequential and from 16 threads (it
   serialises on its own lock; the better of the two is the peer);
4. bytes on disk (db + WAL after ``PRAGMA wal_checkpoint(TRUNCATE)``) for the 40-agent
   workload and for one agent's 200-step conversation (1 → 200 messages);
5. for context (info rows): ``durability="async"``, the blocking ``SyncStateStore``,
   ``validate_cache=False``, and the bare SQLite WAL commit rate (the ceiling for any
   store that commits each save on its own).

``--profile`` prints a cost breakdown of each step of a save and a load (timed one step
at a time, no profiler), then runs statekeeper's write, group, cold-load and warm-load
paths under cProfile (the event-loop thread and the SQLite writer thread separately).
Results and analysis: ``docs/benchmarks.md``. Run::

    .venv/bin/python benchmarks/bench_checkpoint.py            # full, ~35 s
    .venv/bin/python benchmarks/bench_checkpoint.py --quick    # ~5 s
    .venv/bin/python benchmarks/bench_checkpoint.py --profile  # profiles only
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    Workload,
    commit_ceiling,
    file_bytes,
    fmt_ms,
    fmt_rate,
    human_bytes,
    lg_checkpoints,
    lg_config,
    lg_open,
    machine,
    make_messages,
    median,
    percentile,
    profile_text,
    table,
)
from statekeeper.store.store import StateStore

AGENTS = 40
FIRST, LAST = 20, 50  # messages in the first and last saved state
CONCURRENT = 16
LONG_STEPS = 200
TARGETS = {"writes": 3.0, "loads": 5.0, "group": 10.0}

# --------------------------------------------------------------------- statekeeper


#: extra SQLite URL options for statekeeper (``--inline-writes`` sets one)
SK_OPTIONS = ""


def sk_url(path: Path, sync: str) -> str:
    return f"sqlite:///{path}?synchronous={sync}{SK_OPTIONS}"


async def sk_write_sequential(url: str, wl: Workload) -> dict[str, Any]:
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    lat: list[float] = []
    async with StateStore(url, durability="sync") as store:
        t0 = time.perf_counter()
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                s = time.perf_counter()
                await store.save(a, docs[a][step])
                lat.append(time.perf_counter() - s)
        elapsed = time.perf_counter() - t0
    return {"rate": wl.saves / elapsed, "p50": percentile(lat, 50), "p99": percentile(lat, 99)}


async def sk_write_async(url: str, wl: Workload) -> dict[str, Any]:
    """Write-behind (``durability="async"``): not like-for-like (RPO <= flush interval)."""
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    async with StateStore(url, durability="async") as store:
        t0 = time.perf_counter()
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                await store.save(a, docs[a][step])
        await store.flush()
        elapsed = time.perf_counter() - t0
    return {"rate": wl.saves / elapsed}


def sk_sync_facade(url: str, wl: Workload, passes: int) -> dict[str, Any]:
    """The blocking ``SyncStateStore`` (what a non-async caller, like SqliteSaver's, uses):
    sequential saves, then warm loads."""
    from statekeeper.store.sync import SyncStateStore

    docs = {a: wl.docs(a) for a in wl.agent_ids}
    store = SyncStateStore(url, durability="sync")
    try:
        t0 = time.perf_counter()
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                store.save(a, docs[a][step])
        write = wl.saves / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(passes):
            for a in wl.agent_ids:
                store.load(a)
        warm = passes * len(wl.agent_ids) / (time.perf_counter() - t0)
    finally:
        store.close()
    return {"rate": write, "warm": warm}


async def sk_loads(
    url: str, wl: Workload, passes: int, *, warm: bool, validate: bool = True
) -> dict[str, Any]:
    lat: list[float] = []
    store = StateStore(url, cache_size=1024 if warm else 0, validate_cache=validate)
    try:
        if warm:  # fill the cache (not timed)
            for a in wl.agent_ids:
                await store.load(a)
        t0 = time.perf_counter()
        for _ in range(passes):
            for a in wl.agent_ids:
                s = time.perf_counter()
                snap = await store.load(a)
                lat.append(time.perf_counter() - s)
        elapsed = time.perf_counter() - t0
        assert len(snap.data["messages"]) == wl.sizes[-1], "statekeeper loaded a wrong state"
    finally:
        await store.close()
    return {"rate": len(lat) / elapsed, "p50": percentile(lat, 50), "p99": percentile(lat, 99)}


async def sk_write_group(
    url: str, wl: Workload, agents: list[str], **options: Any
) -> dict[str, Any]:
    docs = {a: wl.docs(a) for a in agents}
    async with StateStore(url, durability="group", **options) as store:

        async def run(a: str) -> None:
            for doc in docs[a]:
                await store.save(a, doc)

        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(run(a) for a in agents))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = store.stats()
    n = len(agents) * len(wl.sizes)
    return {
        "rate": n / elapsed,
        "cpu": cpu,  # seconds of process CPU (all threads) during the saves
        "commits": stats.commits,
        "per_commit": n / max(stats.commits, 1),
    }


# -------------------------------------------------------------------- SqliteSaver


def lg_effective_synchronous(tmp: Path) -> int:
    """What SqliteSaver's connection runs with when nobody sets the pragma."""
    saver = lg_open(tmp / "probe.db", None)
    try:
        return int(saver.conn.execute("PRAGMA synchronous").fetchone()[0])
    finally:
        saver.conn.close()


def lg_write_sequential(path: Path, sync: str, wl: Workload) -> dict[str, Any]:
    saver = lg_open(path, sync)
    try:
        plans = {a: lg_checkpoints(saver, wl, a) for a in wl.agent_ids}
        configs = {a: lg_config(a) for a in wl.agent_ids}
        lat: list[float] = []
        t0 = time.perf_counter()
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                cp, meta, versions = plans[a][step]
                s = time.perf_counter()
                configs[a] = saver.put(configs[a], cp, meta, versions)
                lat.append(time.perf_counter() - s)
        elapsed = time.perf_counter() - t0
    finally:
        saver.conn.close()
    return {"rate": wl.saves / elapsed, "p50": percentile(lat, 50), "p99": percentile(lat, 99)}


def lg_loads(path: Path, sync: str, wl: Workload, passes: int) -> dict[str, Any]:
    saver = lg_open(path, sync)
    try:
        configs = [lg_config(a) for a in wl.agent_ids]
        lat: list[float] = []
        t0 = time.perf_counter()
        for _ in range(passes):
            for cfg in configs:
                s = time.perf_counter()
                tup = saver.get_tuple(cfg)
                lat.append(time.perf_counter() - s)
        elapsed = time.perf_counter() - t0
        assert len(tup.checkpoint["channel_values"]["messages"]) == wl.sizes[-1]
    finally:
        saver.conn.close()
    return {"rate": len(lat) / elapsed, "p50": percentile(lat, 50), "p99": percentile(lat, 99)}


def lg_write_concurrent(
    path: Path, sync: str, wl: Workload, agents: list[str], threads: int
) -> dict[str, Any]:
    """16 agents' saves: one after another (threads=1) or one thread per agent."""
    saver = lg_open(path, sync)
    try:
        plans = {a: lg_checkpoints(saver, wl, a) for a in agents}

        def run(a: str) -> None:
            cfg = lg_config(a)
            for cp, meta, versions in plans[a]:
                cfg = saver.put(cfg, cp, meta, versions)

        n = len(agents) * len(wl.sizes)
        if threads == 1:
            configs = {a: lg_config(a) for a in agents}
            t0 = time.perf_counter()
            for step in range(len(wl.sizes)):  # steps interleaved, like the other runs
                for a in agents:
                    cp, meta, versions = plans[a][step]
                    configs[a] = saver.put(configs[a], cp, meta, versions)
            elapsed = time.perf_counter() - t0
        else:
            barrier = threading.Barrier(threads + 1)

            def gated(a: str) -> None:
                barrier.wait()
                run(a)

            with ThreadPoolExecutor(threads) as pool:
                futures = [pool.submit(gated, a) for a in agents]
                barrier.wait()
                t0 = time.perf_counter()
                for f in futures:
                    f.result()
                elapsed = time.perf_counter() - t0
    finally:
        saver.conn.close()
    return {"rate": n / elapsed}


# ------------------------------------------------------------------------ disk use


async def disk_use(tmp: Path, wl: Workload) -> dict[str, int]:
    """Bytes for the 40-agent workload and for one agent's 200-step conversation."""
    out: dict[str, int] = {}
    long_msgs = make_messages(LONG_STEPS, seed=10_000)
    long_docs = [{"messages": long_msgs[: i + 1]} for i in range(LONG_STEPS)]
    # statekeeper
    p = tmp / "disk-sk-40.db"
    await sk_write_sequential(sk_url(p, "NORMAL"), wl)
    out["sk_40"] = file_bytes(p)
    p = tmp / "disk-sk-200.db"
    async with StateStore(sk_url(p, "NORMAL")) as store:
        for doc in long_docs:
            await store.save("long", doc)
    out["sk_200"] = file_bytes(p)
    # SqliteSaver
    p = tmp / "disk-lg-40.db"
    lg_write_sequential(p, "NORMAL", wl)
    out["lg_40"] = file_bytes(p)
    p = tmp / "disk-lg-200.db"
    saver = lg_open(p, "NORMAL")
    try:
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

        cfg, cp, version = lg_config("long"), empty_checkpoint(), None
        for step, doc in enumerate(long_docs):
            version = saver.get_next_version(version, None)
            cp = dict(cp)
            cp["channel_versions"] = {"messages": version}
            cp["versions_seen"] = {"agent": {"messages": version}}
            cp["channel_values"] = {"messages": doc["messages"]}
            cp = create_checkpoint(cp, None, step)
            cfg = saver.put(
                cfg, cp, {"source": "loop", "step": step, "parents": {}}, {"messages": version}
            )
    finally:
        saver.conn.close()
    out["lg_200"] = file_bytes(p)
    out["payload_40"] = sum(len(json.dumps(m)) for a in wl.agent_ids for m in wl.messages[a])
    out["payload_200"] = sum(len(json.dumps(m)) for m in long_msgs)
    return out


# --------------------------------------------------------------------------- runs


async def one_round(
    tmp: Path, r: int, sync: str, wl: Workload, passes: int, sk_first: bool
) -> dict[str, dict[str, Any]]:
    res: dict[str, dict[str, Any]] = {}
    group_agents = wl.agent_ids[:CONCURRENT]

    async def sk() -> None:
        p = tmp / f"sk-{sync}-{r}.db"
        res["sk_write"] = await sk_write_sequential(sk_url(p, sync), wl)
        res["sk_cold"] = await sk_loads(sk_url(p, sync), wl, passes, warm=False)
        res["sk_warm"] = await sk_loads(sk_url(p, sync), wl, passes, warm=True)
        res["sk_warm_nv"] = await sk_loads(sk_url(p, sync), wl, passes, warm=True, validate=False)
        res["sk_async"] = await sk_write_async(sk_url(tmp / f"ska-{sync}-{r}.db", sync), wl)
        res["sk_facade"] = await asyncio.to_thread(
            sk_sync_facade, sk_url(tmp / f"skf-{sync}-{r}.db", sync), wl, passes
        )
        res["sk_group"] = await sk_write_group(
            sk_url(tmp / f"skg-{sync}-{r}.db", sync), wl, group_agents
        )

    def lg() -> None:
        p = tmp / f"lg-{sync}-{r}.db"
        res["lg_write"] = lg_write_sequential(p, sync, wl)
        res["ceiling"] = commit_ceiling(tmp / f"ceil-{sync}-{r}.db", sync)
        res["lg_load"] = lg_loads(p, sync, wl, passes)
        res["lg_seq16"] = lg_write_concurrent(tmp / f"lgs-{sync}-{r}.db", sync, wl, group_agents, 1)
        res["lg_thr16"] = lg_write_concurrent(
            tmp / f"lgt-{sync}-{r}.db", sync, wl, group_agents, CONCURRENT
        )

    if sk_first:
        await sk()
        lg()
    else:
        lg()
        await sk()
    return res


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    def med(key: str, field: str = "rate") -> float:
        return median([r[key][field] for r in rounds])

    def paired(a: str, b: Callable[[dict[str, Any]], float]) -> list[float]:
        return [r[a]["rate"] / b(r) for r in rounds]

    peer16 = [max(r["lg_seq16"]["rate"], r["lg_thr16"]["rate"]) for r in rounds]
    out = {
        "sk_write": med("sk_write"),
        "lg_write": med("lg_write"),
        "sk_write_p50": med("sk_write", "p50"),
        "lg_write_p50": med("lg_write", "p50"),
        "sk_write_p99": med("sk_write", "p99"),
        "lg_write_p99": med("lg_write", "p99"),
        "sk_cold": med("sk_cold"),
        "sk_warm": med("sk_warm"),
        "lg_load": med("lg_load"),
        "sk_warm_nv": med("sk_warm_nv"),
        "sk_async": med("sk_async"),
        "ceiling": med("ceiling"),
        "sk_facade": med("sk_facade"),
        "sk_facade_warm": med("sk_facade", "warm"),
        "ratio_facade": median(paired("sk_facade", lambda r: r["lg_write"]["rate"])),
        "ratio_facade_warm": median(
            [r["sk_facade"]["warm"] / r["lg_load"]["rate"] for r in rounds]
        ),
        "ratio_warm_nv": median(paired("sk_warm_nv", lambda r: r["lg_load"]["rate"])),
        "ratio_async": median(paired("sk_async", lambda r: r["lg_write"]["rate"])),
        "sk_cold_p50": med("sk_cold", "p50"),
        "sk_warm_p50": med("sk_warm", "p50"),
        "lg_load_p50": med("lg_load", "p50"),
        "sk_group": med("sk_group"),
        "sk_group_per_commit": med("sk_group", "per_commit"),
        "lg_seq16": med("lg_seq16"),
        "lg_thr16": med("lg_thr16"),
        "lg_best16": median(peer16),
        "ratio_write": median(paired("sk_write", lambda r: r["lg_write"]["rate"])),
        "ratio_cold": median(paired("sk_cold", lambda r: r["lg_load"]["rate"])),
        "ratio_warm": median(paired("sk_warm", lambda r: r["lg_load"]["rate"])),
        "ratio_group": median(
            paired("sk_group", lambda r: max(r["lg_seq16"]["rate"], r["lg_thr16"]["rate"]))
        ),
    }
    out["ratio_write_range"] = [
        min(paired("sk_write", lambda r: r["lg_write"]["rate"])),
        max(paired("sk_write", lambda r: r["lg_write"]["rate"])),
    ]
    return out


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (target >= {target:g}x: {'met' if ratio >= target else 'MISSED'})"


def print_tables(sync: str, s: dict[str, Any], n_rounds: int, loads: int) -> None:
    print(f"\n### synchronous={sync}  ({n_rounds} rounds, medians; {loads} loads per run)\n")
    rows = [
        [
            "writes/s, sequential (40 agents x 31 saves)",
            fmt_rate(s["sk_write"]),
            fmt_rate(s["lg_write"]),
            verdict(s["ratio_write"], TARGETS["writes"]),
        ],
        [
            "  write latency p50 / p99 (ms)",
            f"{fmt_ms(s['sk_write_p50'])} / {fmt_ms(s['sk_write_p99'])}",
            f"{fmt_ms(s['lg_write_p50'])} / {fmt_ms(s['lg_write_p99'])}",
            "",
        ],
        [
            "latest-state loads/s, cold (cache_size=0)",
            fmt_rate(s["sk_cold"]),
            fmt_rate(s["lg_load"]),
            verdict(s["ratio_cold"], TARGETS["loads"]),
        ],
        [
            "latest-state loads/s, warm (default cache)",
            fmt_rate(s["sk_warm"]),
            fmt_rate(s["lg_load"]),
            verdict(s["ratio_warm"], TARGETS["loads"]),
        ],
        [
            "  warm, validate_cache=False (single writer)",
            fmt_rate(s["sk_warm_nv"]),
            fmt_rate(s["lg_load"]),
            f"{s['ratio_warm_nv']:.2f}x (not the default)",
        ],
        [
            "  load latency p50 cold / warm (ms)",
            f"{fmt_ms(s['sk_cold_p50'])} / {fmt_ms(s['sk_warm_p50'])}",
            fmt_ms(s["lg_load_p50"]),
            "",
        ],
        [
            f"writes/s, {CONCURRENT} agents concurrently (sk: group)",
            fmt_rate(s["sk_group"]),
            f"{fmt_rate(s['lg_best16'])} (seq {fmt_rate(s['lg_seq16'])}, "
            f"{CONCURRENT} threads {fmt_rate(s['lg_thr16'])})",
            verdict(s["ratio_group"], TARGETS["group"]),
        ],
        ["  saves per group commit", f"{s['sk_group_per_commit']:.1f}", "1", ""],
        [
            "(info) writes/s sequential, sk durability=async*",
            fmt_rate(s["sk_async"]),
            fmt_rate(s["lg_write"]),
            f"{s['ratio_async']:.2f}x (not like-for-like)",
        ],
        [
            "(info) SyncStateStore (blocking facade): writes/s",
            fmt_rate(s["sk_facade"]),
            fmt_rate(s["lg_write"]),
            f"{s['ratio_facade']:.2f}x",
        ],
        [
            "(info) SyncStateStore: warm loads/s",
            fmt_rate(s["sk_facade_warm"]),
            fmt_rate(s["lg_load"]),
            f"{s['ratio_facade_warm']:.2f}x",
        ],
        [
            "(info) bare SQLite WAL commits/s, 500 B each",
            fmt_rate(s["ceiling"]),
            fmt_rate(s["ceiling"]),
            "ceiling for one commit per save",
        ],
    ]
    print(table(["metric", "statekeeper", "SqliteSaver", "ratio"], rows))
    print(
        "\n* async: write-behind (default flush_size=100, flush_interval=1 s), timed up to "
        "the final flush(); a crash may lose up to flush_size acknowledged saves."
    )


# ------------------------------------------------------------------------ profile


async def profile(tmp: Path, wl: Workload, top: int) -> dict[str, Any]:
    """cProfile statekeeper's write, cold-load and warm-load paths (both threads)."""
    results: dict[str, Any] = {}
    url = sk_url(tmp / "prof.db", "FULL")
    docs = {a: wl.docs(a) for a in wl.agent_ids}

    def report(name: str, prof: cProfile.Profile, sort: str) -> str:
        text = profile_text(prof, sort, top)
        results[name] = text
        return text

    # write path: event-loop thread and the SQLite writer thread
    store = StateStore(url, durability="sync")
    main_p, writer_p = cProfile.Profile(), cProfile.Profile()
    pool = store.backend._writer_pool  # type: ignore[attr-defined]  # benchmark-only peek
    pool.submit(writer_p.enable).result()
    main_p.enable()
    t0 = time.perf_counter()
    for step in range(len(wl.sizes)):
        for a in wl.agent_ids:
            await store.save(a, docs[a][step])
    wall = time.perf_counter() - t0
    main_p.disable()
    pool.submit(writer_p.disable).result()
    await store.close()
    print(
        f"\n## write path: {wl.saves} saves in {wall:.3f} s under the profiler "
        f"({wl.saves / wall:,.0f}/s)\n"
    )
    print("### event-loop thread (tottime)\n```")
    print(report("write_main_tottime", main_p, "tottime"))
    print("```\n### event-loop thread (cumtime)\n```")
    print(report("write_main_cumtime", main_p, "cumulative"))
    print("```\n### SQLite writer thread (tottime)\n```")
    print(report("write_writer_tottime", writer_p, "tottime"))
    print("```")

    # group path: 16 agents concurrently
    store = StateStore(sk_url(tmp / "prof-group.db", "FULL"), durability="group")
    main_p, writer_p = cProfile.Profile(), cProfile.Profile()
    pool = store.backend._writer_pool  # type: ignore[attr-defined]
    agents = wl.agent_ids[:CONCURRENT]

    async def run(a: str) -> None:
        for doc in docs[a]:
            await store.save(a, doc)

    pool.submit(writer_p.enable).result()
    main_p.enable()
    t0 = time.perf_counter()
    await asyncio.gather(*(run(a) for a in agents))
    wall = time.perf_counter() - t0
    main_p.disable()
    pool.submit(writer_p.disable).result()
    await store.close()
    n = len(agents) * len(wl.sizes)
    print(
        f"\n## group path: {n} saves by {CONCURRENT} agents in {wall:.3f} s under the "
        f"profiler ({n / wall:,.0f}/s)\n"
    )
    print("### event-loop thread (tottime)\n```")
    print(report("group_main_tottime", main_p, "tottime"))
    print("```\n### SQLite writer thread (tottime)\n```")
    print(report("group_writer_tottime", writer_p, "tottime"))
    print("```")

    for warm in (False, True):
        store = StateStore(url, cache_size=1024 if warm else 0)
        if warm:
            for a in wl.agent_ids:
                await store.load(a)
        prof = cProfile.Profile()
        n = 0
        prof.enable()
        t0 = time.perf_counter()
        for _ in range(25):
            for a in wl.agent_ids:
                await store.load(a)
                n += 1
        wall = time.perf_counter() - t0
        prof.disable()
        await store.close()
        name = "warm" if warm else "cold"
        print(
            f"\n## {name} load path: {n} loads in {wall:.3f} s under the profiler "
            f"({n / wall:,.0f}/s)\n```"
        )
        print(report(f"load_{name}_tottime", prof, "tottime"))
        print("```")
    return results


async def breakdown(tmp: Path, wl: Workload, sync: str, n: int = 1000) -> list[list[str]]:
    """Microseconds per save / load for each step of statekeeper's paths, timed one step
    at a time without a profiler (benchmark-only calls into private methods; a step
    whose private API changed prints "n/a")."""
    import copy

    import orjson

    from statekeeper import patch
    from statekeeper.store.state import AgentRecord, apply_payload

    rows: list[list[str]] = []
    loop = asyncio.get_running_loop()

    def us(total: float, count: int) -> str:
        return f"{total / count * 1e6:.1f}"

    async def step(label: str, fn: Any, runs: int = 5) -> None:
        try:
            values = [float(await fn()) for _ in range(runs)]
            rows.append([label, f"{median(values):.1f}"])
        except Exception as exc:  # private API moved: say so, keep going
            rows.append([label, f"n/a ({type(exc).__name__})"])

    url = sk_url(tmp / f"bd-{sync}.db", sync)
    msgs = wl.messages[wl.agent_ids[0]]
    doc49, doc50 = {"messages": msgs[:49]}, {"messages": msgs[:50]}
    store = StateStore(url)
    try:
        # ---- write path, one save that adds the 50th message
        counter = iter(range(10**9))

        async def end_to_end() -> str:
            total = 0.0
            for _ in range(n):
                aid = f"e2e-{next(counter)}"
                await store.save(aid, doc49)
                t0 = time.perf_counter()
                await store.save(aid, doc50)
                total += time.perf_counter() - t0
            return us(total, n)

        await step(f"save() end to end, sync durability, synchronous={sync}", end_to_end)
        rec49 = AgentRecord("bd", 1, None, orjson.loads(orjson.dumps(doc49)), 1, 0.0, 0.0)

        async def head() -> str:
            t0 = time.perf_counter()
            for _ in range(n):
                await store._current("e2e-0")
            return us(time.perf_counter() - t0, n)

        await step("  StateStore._current on a cached agent (validate_cache read)", head)

        async def diff() -> str:
            t0 = time.perf_counter()
            for _ in range(n):
                patch.diff(rec49.data, doc50)
            return us(time.perf_counter() - t0, n)

        await step("  patch.diff(49 msgs -> 50 msgs)", diff)
        ops = patch.diff(rec49.data, doc50)

        async def build() -> str:
            t0 = time.perf_counter()
            for _ in range(n):
                store._writes.build("bd", "patch", {}, rec49, ops, None, None, None, None)
            return us(time.perf_counter() - t0, n)

        await step("  WritePipeline.build (serialize, SHA-256, re-decode, apply)", build)

        def chain(aid: str) -> list[Any]:
            # requests for a fresh agent: created (49 msgs) then 50, 49+2, ... messages
            out = []
            r = None
            for i in range(n + 1):
                o = (
                    [{"op": "replace", "path": "", "value": doc49}]
                    if r is None
                    else [{"op": "add", "path": "/messages/-", "value": msgs[i % 50]}]
                )
                req, r = store._writes.build(aid, "patch", {}, r, o, None, None, None, None)
                out.append(req)
            return out

        async def sql_inline() -> str:
            reqs = chain(f"inline-{next(counter)}")
            backend = store.backend
            fn = backend._append_batch_sync  # type: ignore[attr-defined]
            await backend.append(reqs[0])
            t0 = time.perf_counter()
            for req in reqs[1:]:
                fn([req])  # the writer connection, called from this thread (idle writer)
            return us(time.perf_counter() - t0, n)

        await step(
            "  SQLite transaction, inline (BEGIN..COMMIT on the writer connection)", sql_inline
        )

        async def sql_hop() -> str:
            reqs = chain(f"hop-{next(counter)}")
            await store.backend.append(reqs[0])
            t0 = time.perf_counter()
            for req in reqs[1:]:
                await store.backend.append(req)
            return us(time.perf_counter() - t0, n)

        await step("  backend.append (the same + hop to the writer thread)", sql_hop)

        async def hop() -> str:
            pool = store.backend._writer_pool  # type: ignore[attr-defined]
            t0 = time.perf_counter()
            for _ in range(n):
                await loop.run_in_executor(pool, int)
            return us(time.perf_counter() - t0, n)

        await step("  hop alone: run_in_executor(writer pool, no-op) round trip", hop)
    finally:
        await store.close()

    # ---- load paths on the 40-agent workload (31 events per agent, no snapshot)
    url = sk_url(tmp / f"bdl-{sync}.db", sync)
    await sk_write_sequential(url, wl)
    cold = StateStore(url, cache_size=0)
    warm = StateStore(url)
    agents = wl.agent_ids
    reps = max(1, n // len(agents))
    count = reps * len(agents)
    try:

        async def timed(fn: Any) -> str:
            times = []
            for _ in range(5):  # median of 5 runs
                t0 = time.perf_counter()
                for _ in range(reps):
                    for a in agents:
                        await fn(a)
                times.append(time.perf_counter() - t0)
            return us(median(times), count)

        await step(
            "load() cold end to end (cache_size=0; 31 events, no snapshot)",
            lambda: timed(cold.load),
        )
        await step("  backend.head", lambda: timed(cold.backend.head))
        await step(
            "  backend.latest_snapshot (none)",
            lambda: timed(lambda a: cold.backend.latest_snapshot(a, 31)),
        )
        await step("  backend.read (31 rows)", lambda: timed(lambda a: cold.backend.read(a, 0, 31)))
        raws = {a: await cold.backend.read(a, 0, 31) for a in agents}

        async def decode(a: str) -> None:
            for raw in raws[a]:
                cold._decode_event(a, raw)

        await step("  verify SHA-256 + orjson.loads, 31 events", lambda: timed(decode))
        bodies = {a: [cold._decode_event(a, r) for r in raws[a]] for a in agents}

        async def fold_timed() -> str:
            times = []
            for _ in range(5):
                work = [(a, copy.deepcopy(bodies[a])) for _ in range(reps) for a in agents]
                t0 = time.perf_counter()
                for a, bs in work:
                    rec = AgentRecord(a, 0, None, {}, 1, 0.0, 0.0)
                    for raw, body in zip(raws[a], bs, strict=True):
                        apply_payload(rec, raw.seq, raw.timestamp, body)
                times.append(time.perf_counter() - t0)
            return us(median(times), count)

        await step("  apply 31 payloads (JSON Patch, in place)", fold_timed)
        snaps = {a: await warm.load(a) for a in agents}

        async def public(a: str) -> None:
            orjson.loads(orjson.dumps(snaps[a].data))

        await step("  copy for the caller (orjson dumps + loads, 50 msgs)", lambda: timed(public))
        await step(
            "load() warm end to end (default cache, validate_cache=True)", lambda: timed(warm.load)
        )
        blobs = {a: orjson.dumps(snaps[a].data) for a in agents}

        async def loads_only(a: str) -> None:
            orjson.loads(blobs[a])

        await step(
            "  StateStore._current (cache hit + validate_cache read)",
            lambda: timed(warm._current),
        )
        await step(
            "  copy for the caller (orjson.loads of the cached bytes)", lambda: timed(loads_only)
        )
    finally:
        await cold.close()
        await warm.close()
    return rows


# --------------------------------------------------------------------------- main


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    wl = Workload(AGENTS, FIRST, LAST)
    with tempfile.TemporaryDirectory(prefix="sk-bench-") as d:
        tmp = Path(d)
        if args.profile:
            print("machine:", json.dumps(machine("langgraph-checkpoint-sqlite")))
            for sync in ("FULL", "NORMAL"):
                rows = await breakdown(tmp, wl, sync)
                print(f"\n## cost breakdown, synchronous={sync} (us per operation, no profiler)\n")
                print(table(["step", "us"], rows))
            await profile(tmp, wl, args.top)
            return {}
        lg_sync = lg_effective_synchronous(tmp)
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        print(
            f"SqliteSaver runs with synchronous={names.get(lg_sync, lg_sync)} unless told "
            f"otherwise (journal_mode=WAL set by setup()); statekeeper's default is FULL."
        )
        machine_info = machine(
            "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "ormsgpack", "psutil"
        )
        print("machine:", json.dumps(machine_info))
        summaries: dict[str, Any] = {}
        for sync in args.sync:
            rounds = []
            t_start = time.perf_counter()
            for r in range(args.rounds):
                rounds.append(await one_round(tmp, r, sync, wl, args.passes, sk_first=r % 2 == 0))
                for f in tmp.glob(f"*-{sync}-{r}.db*"):  # noqa: ASYNC240 - untimed cleanup
                    f.unlink()
            summaries[sync] = summarize(rounds)
            print_tables(sync, summaries[sync], args.rounds, args.passes * AGENTS)
            print(f"({time.perf_counter() - t_start:.0f} s)")
        disk = await disk_use(tmp, wl)
    rows = [
        [
            f"{AGENTS} agents x 31 saves (20->50 msgs)",
            human_bytes(disk["sk_40"]),
            human_bytes(disk["lg_40"]),
            f"{disk['lg_40'] / disk['sk_40']:.1f}x smaller",
            human_bytes(disk["payload_40"]),
        ],
        [
            f"1 agent x {LONG_STEPS} saves (1->{LONG_STEPS} msgs)",
            human_bytes(disk["sk_200"]),
            human_bytes(disk["lg_200"]),
            f"{disk['lg_200'] / disk['sk_200']:.1f}x smaller",
            human_bytes(disk["payload_200"]),
        ],
    ]
    print("\n### bytes on disk (db + WAL after wal_checkpoint(TRUNCATE))\n")
    print(
        table(
            [
                "workload",
                "statekeeper",
                "SqliteSaver",
                "statekeeper is",
                "distinct messages (JSON)",
            ],
            rows,
        )
    )
    payload = {
        "bench": "checkpoint",
        "quick": args.quick,
        "rounds": args.rounds,
        "loads_per_run": args.passes * AGENTS,
        "machine": machine_info,
        "sqlitesaver_default_synchronous": lg_sync,
        "results": summaries,
        "disk": disk,
        "targets": TARGETS,
    }
    return payload


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds, fewer loads, FULL only")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 11)")
    parser.add_argument(
        "--passes",
        type=int,
        default=None,
        help="load passes over the 40 agents per run (default 25)",
    )
    parser.add_argument(
        "--sync",
        nargs="+",
        default=None,
        choices=["FULL", "NORMAL"],
        help="synchronous settings to run (default: FULL NORMAL)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile statekeeper's save/load paths instead of benchmarking",
    )
    parser.add_argument("--top", type=int, default=25, help="functions per profile table")
    parser.add_argument(
        "--inline-writes",
        action="store_true",
        help="statekeeper's SQLite writes on the caller's thread (?inline_writes=true)",
    )
    args = parser.parse_args(argv)
    if args.inline_writes:
        global SK_OPTIONS
        SK_OPTIONS = "&inline_writes=true"
    if args.rounds is None:
        args.rounds = 2 if args.quick else 11
    if args.passes is None:
        args.passes = 5 if args.quick else 25
    if args.sync is None:
        args.sync = ["FULL"] if args.quick else ["FULL", "NORMAL"]
    payload = asyncio.run(amain(args))
    if payload:
        print(json.dumps(payload, sort_keys=True))
    return payload


if __name__ == "__main__":
    main()
