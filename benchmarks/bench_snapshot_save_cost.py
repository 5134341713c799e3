"""Instructions per save under a snapshot policy (issue 11): what bounding a cold load's
replay costs the saves, for callgrind.

A chat of ~300-character messages (``bench_coldload``'s): 40 warm-up saves, then N more,
each ``store.save("a", {"messages": msgs[: i + 1]})`` (``durability="sync"``, SQLite
``synchronous=OFF``, no witness) with ``snapshot_every`` as given (a number,
``cost`` or ``auto``). Instructions per save = the difference of two runs (N=240 and
N=40) / 200 (saves 41..240: 12 -> 75 KB of state)::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python benchmarks/bench_snapshot_save_cost.py cost 240

(valgrind hides the CPU's SHA extensions: the snapshot's SHA-256 weighs several times
what it does on the hardware.)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_messages
from statekeeper import StateStore

WARM = 40


async def main(every: str, n: int) -> None:
    policy: Any = every if every in ("cost", "auto") else int(every)
    msgs = make_messages(max(400, WARM + n + 1), seed=7, chars=300)
    with tempfile.TemporaryDirectory(prefix="sk-snapsave-") as d:
        url = f"sqlite:///{d}/p.db?synchronous=OFF"
        async with StateStore(url, snapshot_every=policy, witness=False) as store:
            for i in range(WARM + n):
                await store.save("a", {"messages": msgs[: i + 1]})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
