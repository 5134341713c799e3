"""CPU time (``time.thread_time``) of one cold load of the latest state against
``SqliteSaver.get_tuple``, on ``bench_coldload_window.py``'s files, per head position.

Wall clock on a shared machine is noise; one thread's CPU time is less so. Each mode
is measured in rounds of 300 loads, the best round kept, statekeeper and the peer
alternated in one process; the ratio is to ``get_tuple`` of the same head::

    .venv/bin/python benchmarks/bench_coldload_window.py build /tmp/cg-cold
    .venv/bin/python benchmarks/bench_coldload_cpu.py /tmp/cg-cold

``PYTHONPATH=<another tree's src>`` measures another tree on the same files.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import lg_config, lg_open
from statekeeper import StateStore

HEADS = (0, 1, 50, 99)
ROUNDS = 7
LOADS = 300


async def best(op: Callable[[], Awaitable[Any]]) -> float:
    """The least CPU time per call over ``ROUNDS`` rounds of ``LOADS`` calls (µs)."""
    out = float("inf")
    for _ in range(ROUNDS):
        began = time.thread_time()
        for _ in range(LOADS):
            await op()
        out = min(out, (time.thread_time() - began) / LOADS)
    return out * 1e6


async def main(out: Path) -> None:
    store = StateStore(f"sqlite:///{out}/p.db", cache_size=0, witness=False)
    saver = lg_open(out / "lg.db", None)
    print("| head | statekeeper µs | get_tuple µs | ratio |")
    print("|---|---|---|---|")
    for k in HEADS:
        agent, cfg = f"k{k}", lg_config(f"k{k}")

        async def peer(cfg: Any = cfg) -> Any:
            return saver.get_tuple(cfg)

        async def ours(agent: str = agent) -> Any:
            return await store.load(agent)

        await ours()
        await peer()
        sk, lg = await best(ours), await best(peer)
        print(f"| k={k} | {sk:.1f} | {lg:.1f} | {sk / lg:.2f}x |")
    await store.close()
    saver.conn.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
