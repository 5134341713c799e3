"""Instructions of one cold load and one save with the store's default witness (a SQLite
file's ``<database>.sk-witness``), callgrind, instrumentation on only around N
operations (:mod:`callgrind_window`): the price of the witness's check of a state read
from storage (``security/held.py``), before and after it, ``PYTHONPATH=<tree>/src``.

``bench_coldload_callgrind.py``'s chat (~300-character messages, ``snapshot_every=100``)
with 100 + k saves (k events past the snapshot), built with the default witness (its
file holds the mark of the head). ``load``: N cold loads (``cache_size=0``) by a store
opened on it with the default witness (the file's mark read when it opens); ``save``: N
saves of a store with ``cache_size=0`` (each reads the head from storage), on a copy
of the built files; ``save-warm``: N saves with the default cache; ``load-behind``: N
cold loads after another process (no witness) saved the agent once more, so the mark
the store read when it opened is one seq behind the head. The marks' flush
timer is set far off (``witness_interval=3600``): no flush inside the window::

    .venv/bin/python benchmarks/bench_witness_held_callgrind.py run load 8 /tmp/wh
    .venv/bin/python benchmarks/bench_witness_held_callgrind.py all /tmp/wh   # the table
"""

from __future__ import annotations

import asyncio
import ctypes
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import make_messages
from callgrind_window import helper, run_window
from statekeeper import StateStore

N = 200
KS = (0, 1, 8)
MODES = ("load", "load-behind", "save", "save-warm")


async def build(d: Path, k: int) -> None:
    msgs = make_messages(200, seed=7, chars=300)
    async with StateStore(f"sqlite:///{d}/p.db?synchronous=OFF", snapshot_every=100) as s:
        for i in range(100 + k):
            await s.save("a", {"messages": msgs[: i + 1]})


async def measure(mode: str, k: int, out: Path) -> None:
    window = ctypes.CDLL(str(helper(out)))
    built = out / f"k{k}"
    if not (built / "p.db").exists():
        built.mkdir(parents=True, exist_ok=True)
        await build(built, k)
    d = Path(tempfile.mkdtemp(prefix="sk-wh-"))
    for f in built.iterdir():  # (saves write: each run on a fresh copy)
        shutil.copy(f, d / f.name)
    url = f"sqlite:///{d}/p.db?synchronous=OFF"
    cache = 1024 if mode == "save-warm" else 0
    store = StateStore(url, cache_size=cache, snapshot_every=100, witness_interval=3600)
    state = (await store.load("a")).data
    if mode == "load-behind":  # another process saved it since: the mark read is behind
        async with StateStore(url, snapshot_every=100, witness=False) as other:
            await other.save("a", {**state, "other": 1})
    for _ in range(3):
        await store.load("a")
    if mode.startswith("load"):
        window.cg_start()
        for _ in range(N):
            await store.load("a")
        window.cg_stop()
    else:
        window.cg_start()
        for i in range(N):
            state["n"] = i
            await store.save("a", state)
        window.cg_stop()
    await store.close()
    shutil.rmtree(d)


def run(mode: str, k: int, out: Path) -> float:
    args = ["measure", mode, str(k), str(out)]
    return run_window(__file__, args, out, f"wh-{mode}-{k}") / N


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "measure":
        asyncio.run(measure(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
    elif cmd == "run":
        print(f"{run(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])):,.0f}")
    else:
        for mode in MODES:
            for k in KS:
                print(f"{mode} k={k}: {run(mode, k, Path(sys.argv[2])):,.0f} instructions")
