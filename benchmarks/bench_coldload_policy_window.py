"""Instructions per cold load under a snapshot policy, averaged over every head
position of two tail intervals (agents saved 100..115 times: the chat of
``bench_coldtail_window.py``, one ~300-character message more per save), counted by
callgrind around the loads only (``callgrind_window.py``). With
``bench_coldtail_window.py save <dir> <policy>`` (instructions and bytes per save) it
weighs a policy's loads against its saves (docs/benchmarks.md, "cold6")::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_coldload_policy_window.py build /tmp/pb bounded
    PYTHONPATH=src .venv/bin/python benchmarks/bench_coldload_policy_window.py run /tmp/pb
    PYTHONPATH=src .venv/bin/python benchmarks/bench_coldload_policy_window.py build /tmp/p8 8
    PYTHONPATH=src .venv/bin/python benchmarks/bench_coldload_policy_window.py run /tmp/p8

(``8``: whole snapshots every 8 events, where ``"bounded"`` writes a tail.)
"""

from __future__ import annotations

import asyncio
import ctypes
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_messages
from callgrind_window import helper, run_window
from statekeeper import StateStore

#: the head positions: saves per agent
POSITIONS = range(100, 116)
#: loads of every position counted
ROUNDS = 10


def _every(policy: str) -> Any:
    return int(policy) if policy.isdigit() else policy


async def build(out: Path, policy: str) -> None:
    """One agent per head position in ``out/p.db``, saved under ``policy``."""
    out.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (before anything is measured)
    msgs = make_messages(200, seed=7, chars=300)
    url = f"sqlite:///{out}/p.db?synchronous=OFF"
    async with StateStore(url, snapshot_every=_every(policy), witness=False) as store:
        for h in POSITIONS:
            for i in range(h):
                await store.save(f"h{h}", {"messages": msgs[: i + 1]})


async def measure(out: Path) -> None:
    """``ROUNDS`` cold loads of every position inside the window."""
    window = ctypes.CDLL(str(helper(out)))
    store = StateStore(f"sqlite:///{out}/p.db", cache_size=0, witness=False)
    for h in POSITIONS:
        await store.load(f"h{h}")
    window.cg_start()
    for _ in range(ROUNDS):
        for h in POSITIONS:
            await store.load(f"h{h}")
    window.cg_stop()
    await store.close()


def main() -> None:
    cmd, out = sys.argv[1], Path(sys.argv[2])
    if cmd == "build":
        asyncio.run(build(out, sys.argv[3]))
    elif cmd == "child":
        asyncio.run(measure(out))
    elif cmd == "run":
        total = run_window(__file__, ["child", str(out)], out, "cg-positions")
        print(f"{out} {total // (ROUNDS * len(POSITIONS))} instructions per load")


if __name__ == "__main__":
    main()
