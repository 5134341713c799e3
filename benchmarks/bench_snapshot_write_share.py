"""The write's share of a snapshot's cost (issue 16, ``snapshot_every="auto"``'s C).

SQLite ``synchronous=NORMAL``, one agent with a ~40 KB state, 300 saves with a snapshot
with every event against 300 with none (``snapshot_every=1000``): the difference in
process CPU per save (``time.process_time``: the store and its SQLite threads) is what
a snapshot costs in all; beside it the median CPU of encoding one
(``time.thread_time`` around ``SnapshotPolicy.encode``, which is what "auto" measures
as C). Rounds alternate; per-round numbers and medians are printed.

    python benchmarks/bench_snapshot_write_share.py [--rounds 6] [--saves 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - puts src/ on the path
from statekeeper import StateStore
from statekeeper.store import snapshots

ENCODES: list[float] = []
_encode = snapshots.SnapshotPolicy.encode


def _timed_encode(self: snapshots.SnapshotPolicy, record: Any) -> Any:
    began = time.thread_time()
    encoded = _encode(self, record)
    ENCODES.append(time.thread_time() - began)
    return encoded


async def cpu_per_save(every: int, saves: int, path: Path) -> float:
    doc: dict[str, Any] = {f"k{i}": "v" * 40 for i in range(800)}
    url = f"sqlite:///{path}?synchronous=NORMAL"
    async with StateStore(url, snapshot_every=every, witness=False) as store:
        await store.save("a", doc)
        began = time.process_time()
        for i in range(saves):
            doc["n"] = i
            await store.save("a", doc)
        return (time.process_time() - began) / saves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--saves", type=int, default=300)
    args = parser.parse_args()
    snapshots.SnapshotPolicy.encode = _timed_encode  # type: ignore[method-assign]
    extra: list[float] = []
    encode: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            ENCODES.clear()
            every = asyncio.run(cpu_per_save(1, args.saves, Path(tmp) / f"every-{r}.db"))
            enc = statistics.median(ENCODES)
            none = asyncio.run(cpu_per_save(1000, args.saves, Path(tmp) / f"none-{r}.db"))
            extra.append(every - none)
            encode.append(enc)
            print(f"round {r}: a snapshot {1e6 * (every - none):.0f} us, encode {1e6 * enc:.0f} us")
    e, c = statistics.median(extra), statistics.median(encode)
    print(f"median: a snapshot {1e6 * e:.0f} us, its encode {1e6 * c:.0f} us ({e / c:.2f}x)")


if __name__ == "__main__":
    main()
