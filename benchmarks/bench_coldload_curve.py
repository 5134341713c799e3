"""CPU per cold load at k = 0, 1, 10, 50, 99 events past the snapshot, and the peer's.

On ``bench_coldload_callgrind.py``'s built directories (``sk<k>`` / ``lg<k>`` under one
root: build each with ``bench_coldload_callgrind.py <mode> 0 <root>/<mode>``), best of 7
runs of 200 loads, ``time.thread_time`` (CPU of the loading thread only: a loaded
machine's waits are not counted, its cache misses are)::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_coldload_curve.py sk /tmp/ck-cg
    .venv/bin/python benchmarks/bench_coldload_curve.py lg /tmp/ck-cg   # SqliteSaver.get_tuple
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_cpu_us, lg_config, lg_open
from statekeeper import StateStore

KS = (0, 1, 10, 50, 99)


async def abest(fn: Callable[[], Awaitable[Any]], n: int = 200, r: int = 7) -> float:
    """:func:`_common.best_cpu_us` of a coroutine function."""
    out = 1e9
    for _ in range(r):
        t = time.thread_time()
        for _ in range(n):
            await fn()
        out = min(out, (time.thread_time() - t) / n * 1e6)
    return out


async def main(kind: str, root: str) -> None:
    out = []
    for k in KS:
        if kind == "lg":
            saver = lg_open(f"{root}/lg{k}/lg.db", "OFF")
            cfg = lg_config("a")
            saver.get_tuple(cfg)
            out.append(best_cpu_us(lambda s=saver, c=cfg: s.get_tuple(c), 200))
            saver.conn.close()
        else:
            store = StateStore(f"sqlite:///{root}/sk{k}/p.db", cache_size=0, witness=False)
            await store.load("a")
            out.append(await abest(lambda s=store: s.load("a")))  # type: ignore[misc]
            await store.close()
    print(kind, " ".join(f"k={k}: {v:.1f}" for k, v in zip(KS, out, strict=True)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
