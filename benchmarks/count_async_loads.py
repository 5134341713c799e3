"""Backend calls of a write-behind (``durability="async"``) store: 5 agents, 100 saves
(``flush_size=10``) with a load every 7th save, then a flush and 20 loads. Counts the
``SQLiteBackend`` read and append calls (docs/benchmarks.md, "silent: what the
silent-failure fixes cost"). Run: ``PYTHONPATH=src python benchmarks/count_async_loads.py``."""

from __future__ import annotations

import asyncio
import collections
import tempfile
from typing import Any

from statekeeper import StateStore
from statekeeper.backends import SQLiteBackend

CALLS: collections.Counter[str] = collections.Counter()
COUNTED = ("head", "head_tag", "read", "read_state_rows", "latest_snapshot", "append_batch")


def _counting(name: str) -> Any:
    real = getattr(SQLiteBackend, name)

    async def counted(self: SQLiteBackend, *args: Any, **kwargs: Any) -> Any:
        CALLS[name] += 1
        return await real(self, *args, **kwargs)

    return counted


async def main() -> None:
    for name in COUNTED:
        setattr(SQLiteBackend, name, _counting(name))
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/a.db"
        async with StateStore(url, durability="async", flush_size=10) as store:
            for i in range(100):
                await store.save(f"a{i % 5}", {"n": i, "msgs": list(range(i))})
                if i % 7 == 0:
                    await store.load(f"a{i % 5}")
            await store.flush()
            for i in range(20):
                await store.load(f"a{i % 5}")
    print(dict(CALLS))


if __name__ == "__main__":
    asyncio.run(main())
