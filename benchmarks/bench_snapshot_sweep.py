"""``snapshot_every="auto"`` against a sweep of fixed intervals (issues 11 and 16).

For each workload and each policy (fixed ``snapshot_every`` = 1, 2, 4, 8, 16, 32, 64,
100, and ``"auto"``), one process runs the same steps: a durable save
(``durability="sync"``, SQLite ``synchronous=OFF`` so that the disk is out of the
measurement) followed by a cold load of the latest state from a second store with the
cache off (a stateless worker picking the agent up). Measured: CPU time of the whole
process (``time.process_time``: the store and its SQLite threads) per step — save +
load — plus the worst and mean load, and the bytes stored. Policies run interleaved
in rounds (order rotating), medians over rounds.

Workloads: ``chat`` — a history growing by one ~300-character message per step, 40 to
240 messages (a ~13 to ~80 KB state); ``small`` — a ~200-byte task dict whose counter
and status change every step.

``--adaptive`` (issue 16: Young/Daly) runs instead one store per policy whose cold loads
the store itself sees — its cache entry dropped (an eviction, a worker picking the agent
up) and the state loaded again — every ``cold_every`` saves, so that ``"auto"`` can
measure C, r and the cold loads per append. Two workloads: ``small-every`` — the small
dict, a cold load after every save (λ = 1); ``chat-rare`` — the growing chat, a cold
load every 50 saves (λ = 0.02). Measured: CPU time of the process per save (saves plus
cold loads), medians over rounds; fixed intervals up to 256.

Run::

    .venv/bin/python benchmarks/bench_snapshot_sweep.py            # 3 rounds
    .venv/bin/python benchmarks/bench_snapshot_sweep.py --quick    # 1 round, fewer steps
    .venv/bin/python benchmarks/bench_snapshot_sweep.py --adaptive --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import file_bytes, machine, make_messages, median, table
from bench_hotpath import loadavg
from statekeeper.store.store import StateStore

POLICIES: tuple[Any, ...] = (1, 2, 4, 8, 16, 32, 64, 100, "auto")


def workloads(steps: int) -> dict[str, list[dict[str, Any]]]:
    msgs = make_messages(40 + steps, seed=3, chars=300)
    chat = [{"messages": msgs[: 40 + i]} for i in range(steps)]
    small = [
        {"task": "triage", "status": ("running", "waiting")[i % 2], "step": i, "owner": "w-7"}
        for i in range(steps)
    ]
    return {"chat": chat, "small": small}


async def run(tmp: Path, tag: str, policy: Any, docs: list[dict[str, Any]]) -> dict[str, Any]:
    path = tmp / f"{tag}.db"
    url = f"sqlite:///{path}?synchronous=OFF"
    writer = StateStore(url, snapshot_every=policy, witness=False)
    reader = StateStore(url, cache_size=0, witness=False)
    loads: list[float] = []
    try:
        await writer.save("a", docs[0])
        await reader.load("a")
        c0 = time.process_time()
        for doc in docs[1:]:
            await writer.save("a", doc)
            t = time.perf_counter()
            await reader.load("a")
            loads.append(time.perf_counter() - t)
        cpu = time.process_time() - c0
    finally:
        await writer.close()
        await reader.close()
    size = file_bytes(path)
    return {
        "cpu_us_per_step": 1e6 * cpu / (len(docs) - 1),
        "load_mean_us": 1e6 * sum(loads) / len(loads),
        "load_max_us": 1e6 * max(loads),
        "bytes": size,
    }


ADAPTIVE_POLICIES: tuple[Any, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, "auto")


def adaptive_workloads(steps: int) -> dict[str, tuple[list[dict[str, Any]], int]]:
    msgs = make_messages(40 + steps, seed=3, chars=300)
    small = [
        {"task": "triage", "status": ("running", "waiting")[i % 2], "step": i, "owner": "w-7"}
        for i in range(steps)
    ]
    return {
        "small-every": (small, 1),
        "chat-rare": ([{"messages": msgs[: 40 + i]} for i in range(steps)], 50),
    }


async def run_adaptive(
    tmp: Path, tag: str, policy: Any, docs: list[dict[str, Any]], cold_every: int
) -> dict[str, Any]:
    path = tmp / f"{tag}.db"
    store = StateStore(f"sqlite:///{path}?synchronous=OFF", snapshot_every=policy, witness=False)
    try:
        await store.save("a", docs[0])
        c0 = time.process_time()
        for i, doc in enumerate(docs[1:], 1):
            await store.save("a", doc)
            if i % cold_every == 0:
                store._reads.forget("a")  # evicted: the next load folds from storage
                await store.load("a")
        cpu = time.process_time() - c0
        chosen = store.snapshot_events
    finally:
        await store.close()
    return {"cpu_us_per_step": 1e6 * cpu / (len(docs) - 1), "interval": chosen}


async def amain_adaptive(args: argparse.Namespace) -> dict[str, Any]:
    info = machine()
    print("machine:", json.dumps(info))
    print(f"load average at start: {loadavg()}")
    out: dict[str, Any] = {"bench": "snapshot-sweep-adaptive", "machine": info, "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="sk-sweep-") as d:
        tmp = Path(d)
        for name, (docs, cold_every) in adaptive_workloads(args.steps).items():
            pols = ADAPTIVE_POLICIES
            runs: dict[str, list[dict[str, Any]]] = {str(p): [] for p in pols}
            for r in range(args.rounds):
                for p in pols[r % len(pols) :] + pols[: r % len(pols)]:
                    runs[str(p)].append(
                        await run_adaptive(tmp, f"{name}-{p}-{r}", p, docs, cold_every)
                    )
            cpu = {p: [x["cpu_us_per_step"] for x in xs] for p, xs in runs.items()}
            med = {p: median(v) for p, v in cpu.items()}
            fixed = {p: v for p, v in med.items() if p != "auto"}
            best = min(fixed, key=lambda p: fixed[p])
            # the ratio per round (same round: same machine load), its median and range
            ratios = [a / b for a, b in zip(cpu["auto"], cpu[best], strict=True)]
            rows = [[p, f"{med[p]:,.0f}", f"{min(cpu[p]):,.0f}-{max(cpu[p]):,.0f}"] for p in runs]
            print(f"\n## {name} (cold load every {cold_every} saves; {args.steps} steps,")
            print(f"{args.rounds} rounds, medians)\n")
            print(table(["snapshot_every", "CPU per save us", "range"], rows))
            intervals = sorted({x["interval"] for x in runs["auto"]})
            ratio = median(ratios)
            print(
                f"\nbest fixed interval: {best}; auto chose {intervals}; auto / best ="
                f" {ratio:.3f}x (per round {min(ratios):.3f}-{max(ratios):.3f}; goal <= 1.10x)"
            )
            out[name] = {
                "median_us": med,
                "best_fixed": best,
                "auto_intervals": intervals,
                "auto_vs_best": ratio,
                "auto_vs_best_rounds": ratios,
            }
    print(f"load average at end: {loadavg()}")
    return out


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    info = machine()
    print("machine:", json.dumps(info))
    print(f"load average at start: {loadavg()}")
    out: dict[str, Any] = {"bench": "snapshot-sweep", "machine": info, "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="sk-sweep-") as d:
        tmp = Path(d)
        for name, docs in workloads(args.steps).items():
            runs: dict[str, list[dict[str, Any]]] = {str(p): [] for p in POLICIES}
            for r in range(args.rounds):
                order = list(POLICIES[r % len(POLICIES) :] + POLICIES[: r % len(POLICIES)])
                for p in order:
                    runs[str(p)].append(await run(tmp, f"{name}-{p}-{r}", p, docs))
            res = {p: {k: median([x[k] for x in xs]) for k in xs[0]} for p, xs in runs.items()}
            fixed = {p: v for p, v in res.items() if p != "auto"}
            best = min(fixed, key=lambda p: fixed[p]["cpu_us_per_step"])
            auto = res["auto"]["cpu_us_per_step"] / fixed[best]["cpu_us_per_step"]
            rows = [
                [
                    p,
                    f"{v['cpu_us_per_step']:,.0f}",
                    f"{v['load_mean_us']:,.0f}",
                    f"{v['load_max_us']:,.0f}",
                    f"{v['bytes'] / 1024:,.0f}",
                ]
                for p, v in res.items()
            ]
            print(f"\n## {name} ({args.steps} steps, {args.rounds} rounds, medians)\n")
            print(
                table(
                    [
                        "snapshot_every",
                        "CPU per step (save + cold load) us",
                        "load mean us",
                        "load max us",
                        "file KiB",
                    ],
                    rows,
                )
            )
            print(f"\nbest fixed interval: {best}; auto / best = {auto:.2f}x (goal <= 1.10x)")
            out[name] = {"results": res, "best_fixed": best, "auto_vs_best": auto}
    print(f"load average at end: {loadavg()}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--adaptive", action="store_true", help="the Young/Daly workloads")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.steps = args.steps or (120 if args.quick else (1000 if args.adaptive else 200))
    payload = asyncio.run(amain_adaptive(args) if args.adaptive else amain(args))
    print(json.dumps(payload, sort_keys=True, default=str))
    return payload


if __name__ == "__main__":
    main()
