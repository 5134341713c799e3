"""What a FULL commit costs while the WAL grows (issue 11, helper full11).

Runs ``bench_hotpath.py``'s sequential workload (8 agents x 51 chat saves, 10 -> 60
messages of ~300 characters; ``StateStore.save``, ``SqliteSaver.put`` and a bare one-row
commit interleaved per operation, the order rotating) and reports per operation what
``getrusage`` sees — user and system CPU, voluntary context switches (a sleep: the
fdatasync and whatever the file system's journal adds to it) — and, per side, the WAL's
largest size in frames (its file never shrinks while the store is open: every commit
before the WAL's first restart extended the file).

On ext4 an fdatasync after a file grew also commits the journal; a commit that
overwrites a restarted WAL does not. A side whose first checkpoint comes late pays that
on more of its commits.

Run (A/B: each tree with its own ``PYTHONPATH``)::

    .venv/bin/python benchmarks/bench_wal_fill.py --rounds 2
    PYTHONPATH=<other tree>/src .venv/bin/python benchmarks/bench_wal_fill.py --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BareCommits, Workload, lg_config, lg_open, lg_plan
from bench_checkpoint import sk_url
from statekeeper.store.store import StateStore

SIDES = ("sk", "lg", "bare")


def wal_frames(db: Path) -> int:
    """Frames the WAL of ``db`` has room for (its size over header + page)."""
    wal = Path(f"{db}-wal")
    if not wal.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    return max(wal.stat().st_size - 32, 0) // (page + 24)


async def one_round(
    tmp: Path, r: int, sync: str, wl: Workload, acc: dict[str, list[float]]
) -> dict[str, int]:
    paths = {side: tmp / f"{side}-{r}.db" for side in SIDES}
    store = StateStore(sk_url(paths["sk"], sync), durability="sync")
    saver = lg_open(paths["lg"], sync)
    bare = BareCommits(paths["bare"], sync, 500)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    plans = {a: lg_plan(saver, docs[a]) for a in wl.agent_ids}
    configs = {a: lg_config(a) for a in wl.agent_ids}
    usage = resource.getrusage
    i = r
    try:
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                i += 1
                for side in SIDES[i % 3 :] + SIDES[: i % 3]:
                    b, t0 = usage(resource.RUSAGE_SELF), time.perf_counter()
                    if side == "sk":
                        await store.save(a, docs[a][step])
                    elif side == "lg":
                        cp, meta, versions = plans[a][step]
                        configs[a] = saver.put(configs[a], cp, meta, versions)
                    else:
                        bare.commit()
                    t1, e = time.perf_counter(), usage(resource.RUSAGE_SELF)
                    if step:  # (each agent's first save: the create)
                        x = acc[side]
                        x[0] += e.ru_utime - b.ru_utime
                        x[1] += e.ru_stime - b.ru_stime
                        x[2] += e.ru_nvcsw - b.ru_nvcsw
                        x[3] += t1 - t0
                        x[4] += 1
        return {side: wal_frames(path) for side, path in paths.items()}
    finally:
        await store.close()
        saver.conn.close()
        bare.close()


async def amain(args: argparse.Namespace) -> None:
    wl = Workload(8, 10, 60, chars=300)
    print(f"load {os.getloadavg()[0]:.1f}, sync {args.sync}, {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as d:
        acc: dict[str, list[float]] = {side: [0.0] * 5 for side in SIDES}
        for r in range(args.rounds):
            frames = await one_round(Path(d), r, args.sync, wl, acc)
            print(f"round {r}: WAL's largest size, frames: {frames}")
    print("| side | user us | sys us | voluntary switches | wall us |")
    print("|---|---|---|---|---|")
    for side, (user, system, switches, wall, n) in acc.items():
        print(
            f"| {side} | {1e6 * user / n:.0f} | {1e6 * system / n:.0f} | "
            f"{switches / n:.2f} | {1e6 * wall / n:.0f} |"
        )
    sk, lg = acc["sk"], acc["lg"]
    print(f"sk - lg voluntary switches a save: {(sk[2] - lg[2]) / sk[4]:+.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()
