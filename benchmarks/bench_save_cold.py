"""Why a save costs more CPU at ``synchronous=FULL`` than at ``NORMAL`` (issue 11).

At ``FULL`` each commit waits in ``fdatasync``: the thread sleeps, the core runs
something else (or idles), and the next save starts on caches and branch predictors
that are no longer its own. This script separates that effect from the work of the
fsync itself: every side saves at ``NORMAL`` (no fsync), at ``NORMAL`` with a pause
*between* saves (``sleep``: the thread sleeps as it would in an fsync, no I/O at all;
``spin``: the same time passes but the thread keeps running, busy in a tight loop;
``evict``: no time given away, the thread itself copies :data:`EVICT_BYTES`, which
pushes a save's code and data out of the core's L1 and L2 caches — the same effect
made on purpose, independent of the machine's load), and at ``FULL``. The CPU of each
save alone is counted (``time.process_time``, every thread, read right before and
after each save: the pause is outside the bracket; ``getrusage`` around it splits user
from system time, by the kernel's tick samples).
A side whose CPU per save grows with the pause, with no I/O in it, pays for what ran
on its core meanwhile, not for its fsync.

Sides (chat states as in :mod:`bench_save_instructions`: ~300-character messages, 4
agents, the history growing by one message per save, from 10 to 70):

- ``sk``: ``StateStore.save``, ``durability="sync"``;
- ``sk-nopass``: ``sk`` with ``sqlite.PASS_EVERY`` at 1 s: a save makes no pass of the
  event loop unless another task is ready (with the default 1 ms, every save that
  follows a pause of 1 ms or more — every save at ``FULL`` — makes one);
- ``lg``: LangGraph ``SqliteSaver.put`` of the same states (the peer);
- ``bare``: one bare one-row commit (:class:`_common.BareCommits`);
- ``none``: no save at all, only the two ``getrusage`` reads (the bracket's own cost).

Each (side, mode, repeat) runs in a fresh process, in an order that rotates per repeat.
``BENCH_STEPS`` (environment) sets the rounds of a child (60): the system calls of a
save are the difference of two ``strace -f -c`` counts of ``--child SIDE full 0`` with
``BENCH_STEPS=20`` and ``70``, divided by the 200 saves between them.

Run::

    .venv/bin/python benchmarks/bench_save_cold.py
    .venv/bin/python benchmarks/bench_save_cold.py --sides sk lg --modes normal sleep --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BareCommits, Workload, lg_config, lg_open, lg_plan, table

AGENTS = 4
FIRST = 10
STEPS = int(os.environ.get("BENCH_STEPS", "60"))  # (two counts' difference: see below)
WARM = 5  # rounds made before counting
MODES = ("normal", "sleep", "spin", "evict", "full")
#: bytes the ``evict`` mode copies between saves (L2 here: 2 MiB a core)
EVICT_BYTES = 16 << 20
SIDES = ("sk", "sk-nopass", "lg", "bare", "none")


def _pause(mode: str, seconds: float) -> Callable[[], None]:
    if mode == "sleep":
        return lambda: time.sleep(seconds)
    if mode == "spin":

        def spin() -> None:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass

        return spin
    if mode == "evict":
        src, dst = bytes(EVICT_BYTES), bytearray(EVICT_BYTES)

        def evict() -> None:
            dst[:] = src

        return evict
    return lambda: None


class _Counter:
    """CPU (user, system) and wall of the bracketed calls only."""

    def __init__(self) -> None:
        self.cpu = self.user = self.system = self.wall = 0.0
        self.calls = 0

    def start(self) -> None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        self._u, self._s = r.ru_utime, r.ru_stime
        self._c, self._w = time.process_time(), time.perf_counter()

    def stop(self) -> None:
        w, c = time.perf_counter(), time.process_time()
        r = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu += c - self._c
        self.wall += w - self._w
        self.user += r.ru_utime - self._u
        self.system += r.ru_stime - self._s
        self.calls += 1


async def _sk(path: Path, sync: str, pause: Callable[[], None], counter: _Counter) -> None:
    from statekeeper import StateStore

    wl = Workload(AGENTS, FIRST, FIRST + STEPS, chars=300)
    async with StateStore(f"sqlite:///{path}?synchronous={sync}") as store:
        docs = {a: wl.docs(a) for a in wl.agent_ids}
        for step in range(STEPS):
            for a in wl.agent_ids:
                if step < WARM:
                    await store.save(a, docs[a][step])
                    continue
                pause()
                counter.start()
                await store.save(a, docs[a][step])
                counter.stop()


def _lg(path: Path, sync: str, pause: Callable[[], None], counter: _Counter) -> None:
    wl = Workload(AGENTS, FIRST, FIRST + STEPS, chars=300)
    saver = lg_open(path, sync)
    try:
        plans = {a: lg_plan(saver, wl.docs(a)) for a in wl.agent_ids}
        configs = {a: lg_config(a) for a in wl.agent_ids}
        for step in range(STEPS):
            for a in wl.agent_ids:
                cp, meta, versions = plans[a][step]
                if step < WARM:
                    configs[a] = saver.put(configs[a], cp, meta, versions)
                    continue
                pause()
                counter.start()
                configs[a] = saver.put(configs[a], cp, meta, versions)
                counter.stop()
    finally:
        saver.conn.close()


def _bare(path: Path, sync: str, pause: Callable[[], None], counter: _Counter) -> None:
    bare = BareCommits(path, sync, 500)
    try:
        for step in range(STEPS * AGENTS):
            if step < WARM * AGENTS:
                bare.commit()
                continue
            pause()
            counter.start()
            bare.commit()
            counter.stop()
    finally:
        bare.close()


def _none(path: Path, sync: str, pause: Callable[[], None], counter: _Counter) -> None:
    for _ in range((STEPS - WARM) * AGENTS):
        pause()
        counter.start()
        counter.stop()


def child(side: str, mode: str, pause_s: float) -> dict[str, float]:
    sync = "FULL" if mode == "full" else "NORMAL"
    pause = _pause(mode, pause_s)
    counter = _Counter()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        path = Path(tmp) / "bench.db"
        if side == "sk":
            asyncio.run(_sk(path, sync, pause, counter))
        elif side == "sk-nopass":
            from statekeeper.backends.sqlite import commits as sqlite
            from statekeeper.backends.sqlite import lone as sqlite_lone

            sqlite.PASS_EVERY = sqlite_lone.PASS_EVERY = 1.0
            asyncio.run(_sk(path, sync, pause, counter))
        elif side == "lg":
            _lg(path, sync, pause, counter)
        elif side == "bare":
            _bare(path, sync, pause, counter)
        elif side == "none":
            _none(path, sync, pause, counter)
        else:
            raise SystemExit(f"unknown side {side}")
    n = counter.calls
    return {
        "user_us": counter.user / n * 1e6,
        "sys_us": counter.system / n * 1e6,
        "cpu_us": counter.cpu / n * 1e6,
        "wall_us": counter.wall / n * 1e6,
        "saves": n,
    }


def run(side: str, mode: str, pause_s: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", side, mode, str(pause_s)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=3, metavar=("SIDE", "MODE", "PAUSE"))
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--pause-us", type=float, default=2000.0, help="sleep / spin between saves")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], float(args.child[2]))))
        return
    pause_s = args.pause_us / 1e6
    runs = [(s, m) for s in args.sides for m in args.modes]
    res: dict[tuple[str, str], list[dict[str, float]]] = {k: [] for k in runs}
    load = [os.getloadavg()[0]]
    for rep in range(args.repeats):
        shift = rep % len(runs)
        for side, mode in runs[shift:] + runs[:shift]:
            res[(side, mode)].append(run(side, mode, pause_s))
        load.append(os.getloadavg()[0])
    rows = []
    for (side, mode), rs in res.items():
        cpu = [r["cpu_us"] for r in rs]
        rows.append(
            [
                side,
                mode,
                f"{statistics.median(cpu):,.0f} ({min(cpu):,.0f}..{max(cpu):,.0f})",
                f"{statistics.median(r['user_us'] for r in rs):,.0f}",
                f"{statistics.median(r['sys_us'] for r in rs):,.0f}",
                f"{statistics.median(r['wall_us'] for r in rs):,.0f}",
            ]
        )
    print(
        table(
            [
                "side",
                "mode",
                "CPU us/save median (min..max)",
                "user (rusage)",
                "system (rusage)",
                "wall us",
            ],
            rows,
        )
    )
    print(
        f"pause {args.pause_us:,.0f} us, {args.repeats} repeats,"
        f" load average {min(load):.1f}..{max(load):.1f}"
    )
    if args.json:
        out = {f"{s}/{m}": rs for (s, m), rs in res.items()}
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
