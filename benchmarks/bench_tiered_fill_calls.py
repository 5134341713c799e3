"""Durable calls of a tiered read, counted: a miss (the hot copy filled) and a hit,
per stream shape (events, snapshots). Deterministic: no timing.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_tiered_fill_calls.py
"""

from __future__ import annotations

import asyncio
import collections
import tempfile
from pathlib import Path
from typing import Any

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.records import RawSnapshot
from statekeeper.testing import request as appended

COUNTED = ("head_tag", "read", "latest_snapshot", "stream_bases", "head")


async def one(events: int, snaps: int) -> tuple[dict[str, int], dict[str, int]]:
    where = Path(tempfile.mkdtemp())

    def tiered() -> TieredBackend:
        return TieredBackend(SQLiteBackend(where / "d.db"), hot=SQLiteBackend(where / "h.db"))

    writer = tiered()
    await writer.initialize()
    seq = 0
    while seq < events:
        count = min(500, events - seq)
        await writer.append(appended("a", seq, count))
        seq += count
    for i in range(snaps):
        at = events - i
        await writer.save_snapshot("a", RawSnapshot(at, float(at), b"state", b"sum"))
    assert writer.hot is not None
    await writer.hot.delete_agent("a")
    reader = tiered()
    await reader.initialize()
    counts: collections.Counter[str] = collections.Counter()
    for name in COUNTED:
        real = getattr(reader.durable, name)

        def counted(real: Any = real, name: str = name) -> Any:
            async def call(*args: Any, **kw: Any) -> Any:
                counts[name] += 1
                return await real(*args, **kw)

            return call

        setattr(reader.durable, name, counted())
    await reader.read("a")
    assert reader.stats["fills"] == 1, reader.stats
    miss = dict(counts)
    counts.clear()
    await reader.read("a")
    assert reader.stats["hot_hits"] == 1
    hit = dict(counts)
    await writer.close()
    await reader.close()
    return miss, hit


async def main() -> None:
    for events, snaps in ((10, 0), (10, 1), (10, 3), (1000, 1), (2500, 1)):
        miss, hit = await one(events, snaps)
        print(
            f"events={events} snapshots={snaps}: miss {sum(miss.values())} {miss};"
            f" hit {sum(hit.values())} {hit}"
        )


if __name__ == "__main__":
    asyncio.run(main())
