"""SQLite write path (issue 11, backend side): two code trees side by side in one run.

Each measurement runs in a fresh worker process whose ``PYTHONPATH`` points at one
source tree (``--old``: e.g. a worktree of main; ``--new``: this tree), variants
interleaved round by round so load on the machine hits both alike. Reported per
variant: the median over rounds, with min..max, and ratios against the bare one-row
commit rate measured in the same worker.

* ``seq``: sequential ``backend.append`` of one ~600-byte event (FULL and NORMAL):
  appends/s, CPU per append (``process_time``, every thread of the process), and the
  bare SQLite one-row commit rate (the floor) in the same process.
* ``save``: sequential ``StateStore.save`` of a small changing state, same columns.
* ``ticker``: 8 agents saving concurrently (sync durability) while a ticker task asks
  for a wake-up every 1 ms: how late the ticker runs (p50/p99/max), against the
  slowest bare commit of the same process.
* ``group``: ``durability="group"`` with 1/4/16/64 agents: saves/s, CPU per save,
  saves per commit.
* ``txn``: CPU per append of the writer's transaction code alone (``synchronous=OFF``,
  called directly: no hand-off, no fsync), in a batch of 16 agents and alone.

    python benchmarks/bench_sqlite_writes.py --old /tmp/main/src --new src --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


# ------------------------------------------------------------------------- worker side


def _bare(path: Path, sync: str, n: int) -> tuple[float, float]:
    """(one-row commits/s, slowest commit in seconds)."""
    sys.path.insert(0, str(HERE))
    from _common import BareCommits

    bare = BareCommits(path, sync, row_bytes=600)
    worst = 0.0
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            bare.commit(1)
            worst = max(worst, time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
    finally:
        bare.close()
    return n / elapsed, worst


def _backend(path: Path, sync: str, inline: bool | None) -> Any:
    from statekeeper.backends.sqlite import SQLiteBackend

    if inline is None:
        return SQLiteBackend(path, synchronous=sync)  # type: ignore[arg-type]
    return SQLiteBackend(path, synchronous=sync, inline_writes=inline)  # type: ignore[arg-type]


async def w_seq(tmp: Path, sync: str, inline: bool | None, n: int) -> dict[str, Any]:
    from statekeeper.records import AppendRequest, RawEvent

    backend = _backend(tmp / "seq.db", sync, inline)
    payload = os.urandom(600)
    try:
        # warm up (schema, statement cache, first WAL frames)
        for s in range(1, 21):
            ev = RawEvent(s, "patch", time.time(), payload, b"c" * 32)
            await backend.append(AppendRequest("w", s - 1, (ev,)))
        c0, t0 = time.process_time(), time.perf_counter()
        for s in range(1, 1 + n):
            ev = RawEvent(s, "patch", time.time(), payload, b"c" * 32)
            await backend.append(AppendRequest("a", s - 1, (ev,)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        await backend.close()
    bare, _ = _bare(tmp / "bare.db", sync, n)
    return {"rate": n / elapsed, "cpu_us": cpu / n * 1e6, "bare": bare}


async def w_save(tmp: Path, sync: str, inline: bool | None, n: int) -> dict[str, Any]:
    from statekeeper.store import StateStore

    backend = _backend(tmp / "save.db", sync, inline)
    store = StateStore(backend)
    try:
        state: dict[str, Any] = {"step": 0, "notes": ["x" * 300]}
        for i in range(20):
            state["step"] = i
            await store.save("warm", state)
        c0, t0 = time.process_time(), time.perf_counter()
        for i in range(n):
            state["step"] = i
            state["last"] = "y" * 300 + str(i)
            await store.save("a", state)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        await store.close()
    bare, _ = _bare(tmp / "bare.db", sync, n)
    return {"rate": n / elapsed, "cpu_us": cpu / n * 1e6, "bare": bare}


async def w_ticker(tmp: Path, sync: str, inline: bool | None, n: int) -> dict[str, Any]:
    from statekeeper.store import StateStore

    backend = _backend(tmp / "tick.db", sync, inline)
    store = StateStore(backend)
    late: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            due = loop.time() + 0.001
            await asyncio.sleep(0.001)
            late.append(loop.time() - due)

    async def agent(name: str, saves: int) -> None:
        for i in range(saves):
            await store.save(name, {"i": i, "text": "z" * 300})

    try:
        tick = asyncio.create_task(ticker())
        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(agent(f"ag{k}", n // 8) for k in range(8)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        stop.set()
        await tick
    finally:
        await store.close()
    bare, worst = _bare(tmp / "bare.db", sync, n)
    late.sort()
    return {
        "rate": (n // 8 * 8) / elapsed,
        "cpu_us": cpu / (n // 8 * 8) * 1e6,
        "late_p50_us": late[len(late) // 2] * 1e6,
        "late_p99_us": late[int(len(late) * 0.99)] * 1e6,
        "late_max_us": late[-1] * 1e6,
        "bare_worst_us": worst * 1e6,
        "bare": bare,
    }


async def w_group(tmp: Path, sync: str, inline: bool | None, n: int, agents: int) -> dict[str, Any]:
    from statekeeper.store import StateStore

    backend = _backend(tmp / "group.db", sync, inline)
    store = StateStore(backend, durability="group")
    per = max(1, n // agents)

    async def agent(name: str) -> None:
        for i in range(per):
            await store.save(name, {"i": i, "text": "z" * 300})

    try:
        await asyncio.gather(*(store.save(f"ag{k}", {"i": -1}) for k in range(agents)))
        group = store._group
        commits0 = group.commits if group is not None else 0
        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(agent(f"ag{k}") for k in range(agents)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        commits = (group.commits if group is not None else 0) - commits0
    finally:
        await store.close()
    total = per * agents
    bare, _ = _bare(tmp / "bare.db", sync, max(200, n // 4))
    return {
        "rate": total / elapsed,
        "cpu_us": cpu / total * 1e6,
        "per_commit": total / max(1, commits),
        "bare": bare,
    }


async def w_txn(tmp: Path, n: int) -> dict[str, Any]:
    """CPU per append inside the writer's transaction code alone (``synchronous=OFF``,
    no hand-off, no fsync): a batch of 16 agents' appends, and a lone append."""
    from statekeeper.records import AppendRequest, RawEvent

    backend = _backend(tmp / "txn.db", "OFF", False)
    payload = os.urandom(600)
    heads = {f"a{i:02d}": 0 for i in range(16)}

    def batch(agents: list[str]) -> list[Any]:
        out = []
        for a in agents:
            heads[a] += 1
            ev = RawEvent(heads[a], "patch", 1.0, payload, b"c" * 32)
            out.append(AppendRequest(a, heads[a] - 1, (ev,)))
        return out

    run = backend._locked
    sync = backend._append_batch_sync
    try:
        for _ in range(20):
            run(sync, batch(list(heads)))
        batches = [batch(list(heads)) for _ in range(max(1, n // 16))]
        c0 = time.process_time()
        for b in batches:
            run(sync, b)
        batch_us = (time.process_time() - c0) / (len(batches) * 16) * 1e6
        lone = [batch(["a00"]) for _ in range(n)]
        c0 = time.process_time()
        for b in lone:
            run(sync, b)
        lone_us = (time.process_time() - c0) / n * 1e6
    finally:
        await backend.close()
    return {"batch16_us": batch_us, "lone_us": lone_us}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sk-bw-") as d:
        tmp = Path(d)
        kind, sync, inline, n = spec["kind"], spec["sync"], spec["inline"], spec["n"]
        if kind == "seq":
            return asyncio.run(w_seq(tmp, sync, inline, n))
        if kind == "save":
            return asyncio.run(w_save(tmp, sync, inline, n))
        if kind == "ticker":
            return asyncio.run(w_ticker(tmp, sync, inline, n))
        if kind == "txn":
            return asyncio.run(w_txn(tmp, n))
        return asyncio.run(w_group(tmp, sync, inline, n, spec["agents"]))


# ------------------------------------------------------------------------- driver side


def run_worker(src: str, spec: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def summary(values: list[float]) -> str:
    med = statistics.median(values)
    fmt = ",.1f" if med < 100 else ",.0f"
    return f"{med:{fmt}} ({min(values):{fmt}}..{max(values):{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker")
    ap.add_argument("--old", help="src dir of the code before (e.g. a worktree of main)")
    ap.add_argument("--new", default=str(HERE.parent / "src"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=400, help="saves per measurement")
    ap.add_argument("--only", nargs="*", default=["seq", "save", "ticker", "group", "txn"])
    ap.add_argument("--agents", nargs="*", type=int, default=[1, 4, 16, 64])
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    # (label, src, inline): None = the tree's default
    variants: list[tuple[str, str, bool | None]] = []
    if args.old:
        variants += [("old default (thread)", args.old, None), ("old inline", args.old, True)]
    variants += [("new default", args.new, None), ("new thread", args.new, False)]
    specs: list[dict[str, Any]] = []
    for kind in args.only:
        if kind in ("seq", "save"):
            specs += [{"kind": kind, "sync": s, "n": args.n} for s in ("FULL", "NORMAL")]
        elif kind == "ticker":
            specs.append({"kind": kind, "sync": "FULL", "n": args.n})
        elif kind == "txn":
            specs.append({"kind": kind, "sync": "OFF", "n": args.n * 8})
        elif kind == "group":
            specs += [
                {"kind": kind, "sync": "FULL", "n": max(args.n, 32 * a), "agents": a}
                for a in args.agents
            ]
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in range(args.rounds):
        for spec in specs:
            key = json.dumps({k: v for k, v in spec.items() if k != "n"})
            order = variants if r % 2 == 0 else list(reversed(variants))
            for label, src, inline in order:
                res = run_worker(src, dict(spec, inline=inline))
                results.setdefault(key, {}).setdefault(label, []).append(res)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    for key, per in results.items():
        print(f"\n## {key}")
        cols = sorted({c for rs in per.values() for res in rs for c in res})
        print("| variant | " + " | ".join(cols) + " | rate/bare |")
        print("|---" * (len(cols) + 2) + "|")
        for label, rs in per.items():
            cells = [summary([res[c] for res in rs]) for c in cols]
            ratio = (
                f"{statistics.median(res['rate'] / res['bare'] for res in rs):.2f}"
                if "bare" in rs[0]
                else "-"
            )
            print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
