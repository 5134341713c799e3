"""What "settle a pending delete intent before an agent id's first append" would add
to a save of a new agent (docs/feed.md, "A late tombstone"): the check is one
``count_prefix`` of the intents' prefix (none pending: the common case), so this times
N saves of new agents and N such counts on the same store, per engine (``tiered``:
memory over SQLite, whose deletes go through an intent), and prints the median per
operation of ROUNDS rounds (wall time; the machine's load moves it).

Usage::

    PYTHONPATH=src:. python benchmarks/bench_settle_before_create.py sqlite postgresql redis tiered
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.backends._services import fresh_url

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.store.feed_intents import PENDING

N = 200
ROUNDS = 5


async def main(engine: str) -> None:
    saves: list[float] = []
    counts: list[float] = []
    with contextlib.ExitStack() as stack:
        where = Path(tempfile.mkdtemp())
        if engine == "tiered":  # memory over SQLite: deletes through an intent
            url: Any = TieredBackend(SQLiteBackend(str(where / "t.db")), hot=MemoryBackend())
        else:
            url = stack.enter_context(fresh_url(engine, where))
        async with StateStore(url, witness=False) as store:
            await store.save("warm", {"n": 0})
            for r in range(ROUNDS):
                t0 = time.perf_counter()
                for i in range(N):
                    await store.save(f"r{r}/a{i}", {"n": i})
                t1 = time.perf_counter()
                for _ in range(N):
                    await store.backend.count_prefix(PENDING)
                t2 = time.perf_counter()
                saves.append((t1 - t0) / N)
                counts.append((t2 - t1) / N)
    save, count = statistics.median(saves), statistics.median(counts)
    print(
        f"{engine}: save of a new agent {save * 1e6:.0f} us, intents' count"
        f" {count * 1e6:.0f} us (+{100 * count / save:.0f}%)"
    )


if __name__ == "__main__":
    for name in sys.argv[1:]:
        asyncio.run(main(name))
