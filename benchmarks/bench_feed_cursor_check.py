"""What checking a cursor's feed id costs a subscription's start (branch h/feedcursor).

A subscription resumed from a cursor now reads the store's feed id once, at its start
(one ``SELECT`` of SQLite's ``sk_meta``), and compares it with the cursor's. This
script opens a SQLite store of 10 events and resumes ``N`` catch-up subscriptions from
position 5 (each delivers 5 events). Instruction counts, load-independent: run it
under callgrind with the sources of each side first on ``PYTHONPATH``, at two ``N``::

    PYTHONPATH=<side>/src valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/bench_feed_cursor_check.py N

Instructions per subscription = (count at N=200 - count at N=0) / 200 (setup cancels).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from statekeeper import StateStore


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with StateStore(f"sqlite:///{folder}/b.db") as store:
            for i in range(10):
                await store.save(f"a{i % 2}", {"i": i})
            for _ in range(count):
                async for _change in store.subscribe(5, stop_at_head=True):
                    pass


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
