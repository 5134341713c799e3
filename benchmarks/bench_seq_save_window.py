"""Instructions of one sequential save at ``synchronous=NORMAL``, counted only around the
saves (issue 11, "normalsave").

``bench_hotpath.py``'s sequential workload (4 agents, chat states of ~300-character
messages, one more a save), one side a process, under callgrind with instrumentation on
only around ``--saves`` steady-state saves (every thread counted: the SQLite writer
thread's checkpoints included) after ``--warm`` warm-up steps. Sides:

- ``sk``: ``StateStore.save`` (``durability="sync"``) — the tree on ``PYTHONPATH``
  (run it twice with ``PYTHONPATH`` at two trees for an A/B);
- ``minimal-detect``: ``bench_save_floor.py``'s floor of a save with every guarantee;
- ``lg``: LangGraph ``SqliteSaver.put`` of the same states (the peer).

Two things valgrind's slowness would otherwise put in every save, that a quiet machine
does rarely, are set to what they are there: the store's witness flushes once a second
(``--witness-interval``, default 1,000 s here: a save under valgrind is ~50x slower, so
a real second's flush would fall on every ~60th save instead of every ~3,000th), and the
SQLite backend's loop poll (``PASS_EVERY``, 1 ms: on a quiet machine a NORMAL save takes
~0.13 ms, so most saves skip it; under valgrind none does). ``--pass-every`` sets it
(default 1 s; ``0.001`` is the library's value).

Run::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_seq_save_window.py run /tmp/w --sides sk lg
    PYTHONPATH=src .venv/bin/python benchmarks/bench_seq_save_window.py child sk  # no valgrind

``callgrind_annotate --inclusive=yes /tmp/w/<side>.<pid>`` then shows where they went.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload, lg_config, lg_open, lg_plan, table
from callgrind_window import helper, run_window

AGENTS = 4
FIRST = 10
CHARS = 300


def _window(lib: str | None) -> tuple[Any, Any]:
    if lib is None:
        return (lambda: None), (lambda: None)
    cg = ctypes.CDLL(lib)
    return cg.cg_start, cg.cg_stop


def child(
    side: str, saves: int, warm: int, sync: str, lib: str | None, opts: dict[str, float]
) -> int:
    steps = warm + -(-saves // AGENTS)
    wl = Workload(AGENTS, FIRST, FIRST + steps, chars=CHARS)
    order = [(a, i) for i in range(steps + 1) for a in wl.agent_ids]
    start, stop = _window(lib)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.db"
        if side == "sk":
            from statekeeper import StateStore
            from statekeeper.backends.sqlite import commits as sk_sqlite
            from statekeeper.backends.sqlite import lone as sk_sqlite_lone

            sk_sqlite.PASS_EVERY = sk_sqlite_lone.PASS_EVERY = opts["pass_every"]  # type: ignore[misc]
            docs = {a: wl.docs(a) for a in wl.agent_ids}

            async def run() -> None:
                store = StateStore(
                    f"sqlite:///{path}?synchronous={sync}",
                    durability="sync",
                    witness_interval=opts["witness_interval"],
                )
                async with store:
                    for n, (a, i) in enumerate(order):
                        if n == warm * AGENTS:
                            start()
                        if n == warm * AGENTS + saves:
                            stop()
                            break
                        await store.save(a, docs[a][i])

            asyncio.run(run())
        elif side == "lg":
            saver = lg_open(path, sync)
            plans = {a: lg_plan(saver, wl.docs(a)) for a in wl.agent_ids}
            configs = {a: lg_config(a) for a in wl.agent_ids}
            for n, (a, i) in enumerate(order):
                if n == warm * AGENTS:
                    start()
                if n == warm * AGENTS + saves:
                    stop()
                    break
                cp, meta, versions = plans[a][i]
                configs[a] = saver.put(configs[a], cp, meta, versions)
            saver.conn.close()
        elif side == "minimal-detect":
            import sqlite3

            from bench_save_floor import minimal_file, minimal_saver

            asyncio.run(minimal_file(path, sync))
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA synchronous={sync}")
            save = minimal_saver(conn, True)
            docs = {a: wl.docs(a) for a in wl.agent_ids}
            for n, (a, i) in enumerate(order):
                if n == warm * AGENTS:
                    start()
                if n == warm * AGENTS + saves:
                    stop()
                    break
                save(a, docs[a][i])
            conn.close()
        else:
            raise SystemExit(f"unknown side {side}")
    return saves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("cmd", choices=["run", "child"])
    parser.add_argument("target", help="run: the output folder; child: the side")
    parser.add_argument("--sides", nargs="+", default=["sk", "minimal-detect", "lg"])
    parser.add_argument("--lib", help="(child) the window helper library")
    parser.add_argument("--saves", type=int, default=80)
    parser.add_argument("--warm", type=int, default=3, help="warm-up steps (of every agent)")
    parser.add_argument("--sync", default="NORMAL")
    parser.add_argument("--pass-every", type=float, default=1.0)
    parser.add_argument("--witness-interval", type=float, default=1000.0)
    args = parser.parse_args()
    opts = {"pass_every": args.pass_every, "witness_interval": args.witness_interval}
    if args.cmd == "child":
        child(args.target, args.saves, args.warm, args.sync, args.lib, opts)
        return
    out = Path(args.target)
    out.mkdir(parents=True, exist_ok=True)
    lib = str(helper(out))
    rows = []
    for side in args.sides:
        total = run_window(
            __file__,
            [
                *("child", side, "--lib", lib, "--saves", str(args.saves)),
                *("--warm", str(args.warm), "--sync", args.sync),
                *("--pass-every", str(args.pass_every)),
                *("--witness-interval", str(args.witness_interval)),
            ],
            out,
            side,
        )
        rows.append([side, f"{total / args.saves:,.0f}"])
    print(f"synchronous={args.sync}, {args.saves} saves counted after {args.warm} warm-up steps")
    print(table(["side", "instructions per save"], rows))


if __name__ == "__main__":
    main()
