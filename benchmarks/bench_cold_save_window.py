"""Instructions of the save that follows a cold load (issue 11, scale11): the step of
``bench_scaling.py --peer`` — ``StateStore.load`` of an agent this store never read,
then ``StateStore.save`` of its next state — counted by callgrind with instrumentation
on only around the measured agents (``callgrind_window.py``: every thread counted).

The file holds ``AGENTS`` agents of 3 saves each (``scaling_peer.docs``: a small task
dict with 1, 2, 3 messages of ~200 characters), written by the real store beforehand
(outside valgrind) and copied for each run. A child opens it (``synchronous=OFF``: no
fsync plays a part; callgrind does not count the kernel anyway; ``witness=False``: the
witness flushes its file once a second, so the length of a run under a loaded
machine's valgrind decided how many flushes it counted — 284k to 397k a save), makes one write to
another agent (a store's first write checks its file), warms up on ``WARM`` agents,
then counts ``N`` agents, each either loaded (``load``) or loaded and saved
(``cycle``). ``cycle - load`` is the instructions of the N saves::

    .venv/bin/python benchmarks/bench_cold_save_window.py            # both, per agent
    PYTHONPATH=/other/tree/src .venv/bin/python benchmarks/bench_cold_save_window.py
"""

from __future__ import annotations

import asyncio
import ctypes
import shutil
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window

AGENTS = 300
WARM = 20


def agent(i: int) -> str:
    return f"agent-{i:06d}"


async def build(path: Path) -> None:
    from scaling_peer import docs
    from statekeeper import StateStore

    steps = docs()
    async with StateStore(
        f"sqlite:///{path}?synchronous=OFF", durability="sync", witness=False
    ) as store:
        for i in range(AGENTS):
            for doc in steps[:3]:
                await store.save(agent(i), doc)
    with closing(sqlite3.connect(path)) as conn:  # (all of it in the file: copied alone)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


async def child(mode: str, n: int, path: Path, out: Path) -> None:
    from scaling_peer import docs
    from statekeeper import StateStore

    window = ctypes.CDLL(str(helper(out)))
    nxt = docs()[3]
    async with StateStore(
        f"sqlite:///{path}?synchronous=OFF", durability="sync", witness=False
    ) as store:
        await store.save("warm-up", {"n": 0})
        for i in range(WARM):
            await store.load(agent(i))
            await store.save(agent(i), nxt)
        window.cg_start()
        for i in range(WARM, WARM + n):
            state = await store.load(agent(i))
            if mode == "cycle":
                await store.save(agent(i), nxt)
        window.cg_stop()
        assert len(state.data["messages"]) == 3


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        mode, n, path, out = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5])
        asyncio.run(child(mode, n, path, out))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    assert n + WARM <= AGENTS
    with tempfile.TemporaryDirectory(prefix="cold-save-") as tmp:
        source = Path(tmp) / "source.db"
        asyncio.run(build(source))
        counts = {}
        for mode in ("load", "cycle"):
            copy = Path(tmp) / f"{mode}.db"
            shutil.copyfile(source, copy)
            counts[mode] = run_window(
                __file__, ["--child", mode, str(n), str(copy), tmp], Path(tmp), f"cg-{mode}"
            )
    load, cycle = counts["load"] / n, counts["cycle"] / n
    print(f"per agent: cold load {load:,.0f}  load+save {cycle:,.0f}  save {cycle - load:,.0f}")


if __name__ == "__main__":
    main()
