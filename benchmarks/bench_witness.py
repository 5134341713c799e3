"""What the automatic witness costs on the single-agent sync write path.

Two SQLite stores side by side in one run, one with the witness (the default) and one
with ``witness=False``, each in its own file and its own worker process (so that the
CPU time of each, the witness's background flush included, is its own); the same
single agent workload (one ``save`` per step, ``durability="sync"``, through the
blocking ``SyncStateStore``).
Each round interleaves blocks of writes to the two stores, alternating which goes
first, so drift of a noisy machine hits both alike. Reported: the median per-write
time of each, the ratio with/without per round (median, p25-p75, min-max), and the
ratio of each block with the witness to the adjacent block without (median and
p25-p75 over all pairs), and the same for CPU time per write (whole worker process:
the figure least moved by other load on a shared machine).

    .venv/bin/python benchmarks/bench_witness.py                  # FULL and NORMAL
    .venv/bin/python benchmarks/bench_witness.py --quick          # fewer rounds
    .venv/bin/python benchmarks/bench_witness.py --synchronous NORMAL
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, median, percentile, table
from statekeeper import SyncStateStore


def _worker(url: str, witness: bool, conn: Any) -> None:
    """One store in its own process: each request is a block of writes; the reply is
    its wall time and the CPU time of the whole process (all its threads, the witness's
    background flush included) over the block."""
    store = SyncStateStore(url, witness=None if witness else False)
    assert (store.store.witness is not None) == witness
    message = "x" * 200
    n = 0
    while True:
        count = conn.recv()
        if count is None:
            break
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(n, n + count):
            store.save("agent", {"step": i, "last": message})
        n += count
        conn.send((time.perf_counter() - wall, time.process_time() - cpu))
    store.close()
    conn.send(None)


def run(synchronous: str, rounds: int, blocks: int, per_block: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="sk-bench-witness-") as tmp:
        conns: dict[str, Any] = {}
        procs = []
        for name, flag in (("witness", True), ("none", False)):
            parent, child = ctx.Pipe()
            url = f"sqlite:///{tmp}/{name}.db?synchronous={synchronous}"
            proc = ctx.Process(target=_worker, args=(url, flag, child))
            proc.start()
            procs.append(proc)
            conns[name] = parent

        def block(name: str) -> tuple[float, float]:
            conns[name].send(per_block)
            took: tuple[float, float] = conns[name].recv()
            return took

        for name in conns:  # warm up: create the agent, fill caches
            block(name)
        wall: dict[str, list[float]] = {"witness": [], "none": []}
        cpu: dict[str, list[float]] = {"witness": [], "none": []}
        ratios: list[float] = []
        cpu_ratios: list[float] = []
        pairs: list[float] = []  # one block with / the adjacent block without
        for r in range(rounds):
            spent = {"witness": [0.0, 0.0], "none": [0.0, 0.0]}
            for b in range(blocks):
                order = ("witness", "none") if (r + b) % 2 == 0 else ("none", "witness")
                took = {name: block(name) for name in order}
                pairs.append(took["witness"][0] / took["none"][0])
                for name in order:
                    spent[name][0] += took[name][0]
                    spent[name][1] += took[name][1]
            writes = blocks * per_block
            for name in conns:
                wall[name].append(spent[name][0] / writes)
                cpu[name].append(spent[name][1] / writes)
            ratios.append(spent["witness"][0] / spent["none"][0])
            cpu_ratios.append(spent["witness"][1] / spent["none"][1])
        for name in conns:
            conns[name].send(None)
            conns[name].recv()
        for proc in procs:
            proc.join()
        assert Path(f"{tmp}/witness.db.sk-witness").exists()
        assert not Path(f"{tmp}/none.db.sk-witness").exists()
    return {
        "synchronous": synchronous,
        "rounds": rounds,
        "writes_per_round": blocks * per_block,
        "with_us": median(wall["witness"]) * 1e6,
        "without_us": median(wall["none"]) * 1e6,
        "ratio_median": median(ratios),
        "ratio_p25": percentile(ratios, 25),
        "ratio_p75": percentile(ratios, 75),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "pairs": len(pairs),
        "pair_median": median(pairs),
        "pair_p25": percentile(pairs, 25),
        "pair_p75": percentile(pairs, 75),
        "cpu_with_us": median(cpu["witness"]) * 1e6,
        "cpu_without_us": median(cpu["none"]) * 1e6,
        "cpu_ratio_median": median(cpu_ratios),
        "cpu_ratio_p25": percentile(cpu_ratios, 25),
        "cpu_ratio_p75": percentile(cpu_ratios, 75),
    }


def isolated(n: int = 100_000) -> dict[str, float]:
    """The witness's own work, timed alone: what one acknowledged write adds on the
    write path, and what one background flush (merge, JSON, fsync, rename) takes."""
    import asyncio

    from statekeeper.codec import Codec
    from statekeeper.security.highwater import HighWater

    async def go(path: str) -> dict[str, float]:
        hw = HighWater(path, Codec(), interval=3600)
        link = bytes(32)
        start = time.perf_counter()
        for i in range(1, n + 1):
            hw.acked("agent", i, link)
        per_ack = (time.perf_counter() - start) / n
        flushes = []
        for i in range(5):
            hw.acked("agent", n + i + 1, link)
            start = time.perf_counter()
            await hw.flush()
            flushes.append(time.perf_counter() - start)
        return {"ack_ns": per_ack * 1e9, "flush_ms": median(flushes) * 1e3}

    with tempfile.TemporaryDirectory(prefix="sk-bench-witness-") as tmp:
        return asyncio.run(go(f"{tmp}/w.sk-witness"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], action="append")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--per-block", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="3 rounds of 10 blocks")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.blocks = 3, 10
    modes = args.synchronous or ["FULL", "NORMAL"]
    results = [run(mode, args.rounds, args.blocks, args.per_block) for mode in modes]
    rows = [
        (
            r["synchronous"],
            f"{r['with_us']:.1f}",
            f"{r['without_us']:.1f}",
            f"{r['ratio_median']:.3f}",
            f"{r['ratio_p25']:.3f}-{r['ratio_p75']:.3f}",
            f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}",
            f"{r['pair_median']:.3f} ({r['pair_p25']:.3f}-{r['pair_p75']:.3f})",
            f"{r['cpu_with_us']:.1f} / {r['cpu_without_us']:.1f}",
            f"{r['cpu_ratio_median']:.3f} ({r['cpu_ratio_p25']:.3f}-{r['cpu_ratio_p75']:.3f})",
        )
        for r in results
    ]
    print(
        table(
            [
                "synchronous",
                "with witness µs/write",
                "without µs/write",
                "ratio per round (median)",
                "p25-p75",
                "min-max",
                "ratio per block pair: median (p25-p75)",
                "CPU µs/write with / without",
                "CPU ratio per round: median (p25-p75)",
            ],
            rows,
        )
    )
    alone = isolated()
    print(
        f"\nwitness work alone: {alone['ack_ns']:.0f} ns per acknowledged write on the write"
        f" path; {alone['flush_ms']:.2f} ms per background flush (at most one per"
        " witness_interval, default 1 s, off the write path)"
    )
    print(
        json.dumps(
            {"bench": "witness", "machine": machine(), "results": results, "isolated": alone}
        )
    )


if __name__ == "__main__":
    main()
