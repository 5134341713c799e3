"""What a delete costs on an engine that cannot commit it with its feed tombstone (a
tiered store: memory over SQLite), now that an intent is written before the delete and
deleted after its tombstone (branch h/leftfix, statekeeper.store.feed_intents).

Run under callgrind once with ``save`` (N agents saved) and once with ``delete`` (the
same, then each deleted), on each tree; the difference of the two instruction counts
over N is the instructions of one delete. Usage::

    PYTHONPATH=<tree>/src valgrind --tool=callgrind python benchmarks/bench_delete_intent.py save
    PYTHONPATH=<tree>/src valgrind --tool=callgrind python benchmarks/bench_delete_intent.py delete
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend

N = 200


async def main(delete: bool, folder: str) -> None:
    backend = TieredBackend(SQLiteBackend(os.path.join(folder, "t.db")), hot=MemoryBackend())
    async with StateStore(backend, witness=False) as store:
        for i in range(N):
            await store.save(f"a{i}", {"n": i})
        if delete:
            for i in range(N):
                await store.delete(f"a{i}")


if __name__ == "__main__":
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    asyncio.run(main(sys.argv[1:] == ["delete"], tempfile.mkdtemp(dir=shm)))
