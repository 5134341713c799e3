"""``statekeeper verify`` of a whole SQLite store with a key and its automatic witness:
the cost per agent (a store of N agents, a few events each, the witness holding its
~1,000 newest marks).

    PYTHONPATH=src python benchmarks/bench_verify_scale.py build DIR N
    PYTHONPATH=src python benchmarks/bench_verify_scale.py verify DIR   # wall, the CLI's run

``verify`` runs the CLI command in this process (what ``statekeeper verify --db
sqlite:///DIR/store.db --key-file DIR/keys.json --json`` does) and prints its wall time;
run it under ``valgrind --tool=callgrind`` for instruction counts."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring, generate_key


def build(folder: Path, agents: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    keys = folder / "keys.json"
    Keyring.write_file(keys, {"k1": generate_key()}, "k1")
    asyncio.run(fill(folder, Keyring.from_file(keys), agents))


async def fill(folder: Path, keyring: Keyring, agents: int) -> None:
    async with StateStore(f"sqlite:///{folder / 'store.db'}", keyring=keyring) as store:
        for i in range(agents):
            agent = f"agent-{i:07d}"
            await store.create(agent, {"n": 0, "name": agent})
            for n in range(1, 4):
                await store.save(agent, {"n": n, "name": agent})


def verify(folder: Path) -> None:
    from typer.testing import CliRunner

    from statekeeper.cli import app

    url = f"sqlite:///{folder / 'store.db'}"
    args = ["verify", "--db", url, "--key-file", str(folder / "keys.json"), "--json"]
    start = time.perf_counter()
    result = CliRunner().invoke(app, args)
    wall = time.perf_counter() - start
    report = json.loads(result.stdout)
    print(
        f"verify: {report['agents']} agents, {report['events']} events, "
        f"{len(report['problems'])} problems, exit {result.exit_code}: {wall:.2f} s "
        f"({wall / max(report['agents'], 1) * 1e3:.2f} ms/agent)"
    )


def main() -> None:
    what, folder = sys.argv[1], Path(sys.argv[2])
    if what == "build":
        build(folder, int(sys.argv[3]))
    else:
        verify(folder)


if __name__ == "__main__":
    main()
