"""What a rekey's progress file costs: a run over N agents already under the active key
(a resume, or a rerun after a finished run: every record read, checked and skipped, no
rewrite), with ``progress_file``, main against a tree, in alternating child processes on
copies of one store (on disk: fsync is real; not /dev/shm).

    .venv/bin/python benchmarks/bench_rekey_progress.py --base /work/main/src --tree src \
        --agents 3500 --rounds 3

Each child prints wall seconds, CPU seconds and the fsync calls made (counted by
wrapping ``os.fsync``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import asyncio, json, os, sys, time
calls = [0]
real = os.fsync
def counted(fd):
    calls[0] += 1
    return real(fd)
os.fsync = counted
from statekeeper import StateStore
from statekeeper.security import Keyring, rekey
K1, K2, db, progress = sys.argv[1:5]
ring = Keyring({"k2": K2, "k1": K1}, active="k2")
async def main():
    async with StateStore(f"sqlite:///{db}", keyring=ring) as store:
        calls[0] = 0
        wall, cpu = time.perf_counter(), time.process_time()
        stats = await rekey(store, progress_file=progress)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(json.dumps({"wall": wall, "cpu": cpu, "fsyncs": calls[0],
                          "agents": stats.agents, "events": stats.events}))
asyncio.run(main())
"""


def _fill(src: str, folder: Path, agents: int, k1: str, k2: str) -> Path:
    """A store of ``agents`` agents (two saves each), re-encrypted under k2 already."""
    db = folder / "template.db"
    code = r"""
import asyncio, sys
from statekeeper import StateStore
from statekeeper.security import Keyring, rekey
K1, K2, db, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
async def main():
    async with StateStore(f"sqlite:///{db}?synchronous=OFF", keyring=Keyring({"k1": K1})) as s:
        for a in range(n):
            await s.save(f"agent-{a:06d}", {"n": 1, "text": "x" * 200})
            await s.save(f"agent-{a:06d}", {"n": 2, "text": "y" * 200})
    ring = Keyring({"k2": K2, "k1": K1}, active="k2")
    async with StateStore(f"sqlite:///{db}?synchronous=OFF", keyring=ring) as s:
        await rekey(s)
asyncio.run(main())
"""
    env = {**os.environ, "PYTHONPATH": src}
    subprocess.run([sys.executable, "-c", code, k1, k2, str(db), str(agents)], env=env, check=True)
    return db


def _run(src: str, template: Path, folder: Path, k1: str, k2: str) -> dict[str, float]:
    db = folder / "run.db"
    for leftover in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), folder / "rekey.json"):
        leftover.unlink(missing_ok=True)
    shutil.copyfile(template, db)
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, k1, k2, str(db), str(folder / "rekey.json")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", required=True, help="src/ of the peer (main)")
    parser.add_argument("--tree", required=True, help="src/ of the tree measured")
    parser.add_argument("--agents", type=int, default=3500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base, tree = str(Path(args.base).resolve()), str(Path(args.tree).resolve())
    sys.path.insert(0, tree)
    from statekeeper.security import generate_key

    k1, k2 = generate_key(), generate_key()
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="bench-rekey-") as tmp:
        folder = Path(tmp)
        template = _fill(tree, folder, args.agents, k1, k2)
        print(f"load average at start: {os.getloadavg()[0]:.1f}")
        for n in range(1, args.rounds + 1):
            one = _run(base, template, folder, k1, k2)
            two = _run(tree, template, folder, k1, k2)
            print(
                f"| {n} | {one['wall']:.2f} s wall, {one['cpu']:.2f} s CPU, "
                f"{one['fsyncs']} fsyncs | {two['wall']:.2f} s wall, {two['cpu']:.2f} s CPU, "
                f"{two['fsyncs']} fsyncs | {one['wall'] / two['wall']:.1f}x |"
                f"  (agents {one['agents']}/{two['agents']}, "
                f"events {one['events']}/{two['events']})"
            )
        print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
