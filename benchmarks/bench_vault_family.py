"""What per-agent data keys cost by key family (h/vaultfamily): a SQLite store with a
SQLite key vault, N new agents saved once each (each makes its data key in the vault),
then a fresh store object and keyring loading each agent once (each finds its key in
the vault by the record's fingerprint), then the same loads again (keys cached). Per
phase: the statements the vault ran per agent (counted by SQLite's trace callback:
exact, whatever the machine's load) and the process CPU time per agent (best round).

Run it once per tree, alternated, e.g.::

    PYTHONPATH=/work/main/src python benchmarks/bench_vault_family.py --agents 2000
    PYTHONPATH=src python benchmarks/bench_vault_family.py --agents 2000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common
from statekeeper import StateStore
from statekeeper.codec.keys import Keyring

KEY = bytes(range(32))


def _counted(keys: Keyring) -> list[str]:
    statements: list[str] = []
    db = getattr(keys.data_keys, "_db", None)
    if db is not None:
        db.set_trace_callback(statements.append)
    return statements


async def _once(folder: Path, agents: int) -> list[tuple[float, float]]:
    """(statements, CPU microseconds) per agent of each phase."""
    url = f"sqlite:///{folder / 's.db'}"
    ids = [f"t/a{i:05d}" for i in range(agents)]
    keys = Keyring({"k1": KEY}, data_keys=folder / "vault.db")
    found: list[tuple[float, float]] = []
    async with StateStore(url, keyring=keys, witness=False) as store:
        await store.save("warm-up", {"n": 0})
        statements = _counted(keys)
        start = time.process_time()
        for agent in ids:
            await store.save(agent, {"email": f"{agent}@example.com"})
        found.append((len(statements) / agents, (time.process_time() - start) * 1e6 / agents))
    fresh = Keyring({"k1": KEY}, data_keys=folder / "vault.db")
    async with StateStore(url, keyring=fresh, witness=False, cache_size=0) as store:
        await store.load("warm-up")
        statements = _counted(fresh)
        for _ in range(2):  # keys from the vault, then cached
            statements.clear()
            start = time.process_time()
            for agent in ids:
                await store.load(agent)
            cpu = (time.process_time() - start) * 1e6 / agents
            found.append((len(statements) / agents, cpu))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            rows.append(asyncio.run(_once(Path(folder), args.agents)))
    print(f"source: {_common.source_state()}")
    names = ("first save", "load, key from the vault", "load, key cached")
    for i, name in enumerate(names):
        cpu = sorted(r[i][1] for r in rows)
        print(
            f"{name}: {rows[0][i][0]:.2f} vault statements/agent; CPU us/agent best"
            f" {cpu[0]:,.0f}, median {_common.median(cpu):,.0f} over {args.rounds} rounds"
        )


if __name__ == "__main__":
    main()
