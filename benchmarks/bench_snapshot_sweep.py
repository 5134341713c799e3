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

Run::

    .venv/bin/python benchmarks/bench_snapshot_sweep.py            # 3 rounds
    .venv/bin/python benchmarks/bench_snapshot_sweep.py --quick    # 1 round, fewer steps
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
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.steps = args.steps or (120 if args.quick else 200)
    payload = asyncio.run(amain(args))
    print(json.dumps(payload, sort_keys=True, default=str))
    return payload


if __name__ == "__main__":
    main()
