"""What a delete costs on a SQLite store with its witness file, since a delete always
writes its deletion to the file before the rows go (branch h/leftnight), against the
rule before (the deletion written first only when the file held a mark of the agent),
run side by side: the old ``HighWater.deleting`` is set on the same store in
alternate rounds.

Two cases: agents whose marks are in the file (both rules write it: the same), and
agents the file holds no mark of (written without a witness, or evicted past its
``keep``): the old rule read the file only, the new one writes it (merge, fsync,
rename). Prints microseconds of wall and of process CPU per delete, per round."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper import StateStore
from statekeeper.security.highwater import HighWater


async def _old_deleting(self: HighWater, agent_id: str) -> None:
    """``HighWater.deleting`` as on main before h/leftnight (the peer)."""
    self._dirty.pop(agent_id, None)
    self._known = await asyncio.to_thread(self._read)
    if agent_id in self._known and int(self._known[agent_id].get("seq", 0)) > 0:
        self._dirty[agent_id] = (0, None, time.time())
        await self.flush()


async def _round(url: str, n: int, marked: bool, old: bool, tag: str) -> tuple[float, float]:
    ids = [f"{tag}-{i}" for i in range(n)]
    async with StateStore(url, witness=None if marked else False) as writer:
        for agent_id in ids:
            await writer.save(agent_id, {"i": agent_id})
    async with StateStore(url) as store:
        await store.get(ids[0])  # the witness checked on first use, outside the timing
        witness: Any = store.witness
        if old:
            witness.deleting = _old_deleting.__get__(witness)
        wall, cpu = time.perf_counter(), time.process_time()
        for agent_id in ids:
            await store.delete(agent_id)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / n * 1e6, cpu / n * 1e6


async def main(n: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'app.db'}"
        for marked in (True, False):
            out: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for r in range(rounds):
                for old in (r % 2 == 0, r % 2 != 0):  # interleaved, alternating first
                    out[old].append(await _round(url, n, marked, old, f"r{r}{old}"))
            case = "marked" if marked else "unmarked"
            for old, label in ((True, "old rule"), (False, "new rule")):
                walls = [w for w, _ in out[old]]
                cpus = [c for _, c in out[old]]
                print(
                    f"{case:8} {label}: wall {statistics.median(walls):7.0f} us "
                    f"(min {min(walls):.0f} max {max(walls):.0f}), cpu "
                    f"{statistics.median(cpus):6.0f} us per delete"
                )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100, help="agents deleted per round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per rule")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.rounds))
