"""Instructions of the saves of ``bench_hotpath.py``'s sequential rows by their place in a
round (issue 11, "perf-normal"): a round opens a new store file and saves 4 agents,
one more ~300-character message a step, so its first step is 4 creates, the first of
them the store's first write.

One process, ``--rounds`` rounds (a new file each, as ``bench_hotpath`` makes them),
under callgrind with instrumentation on only around the saves of one kind, every
thread counted (``CALLGRIND_START/STOP_INSTRUMENTATION`` around each, one dump at the
end):

- ``first``: the store's first save (its first write: the witness and key checks, a
  new agent's create);
- ``creates``: the other agents' first saves (creates on a store that has written);
- ``second``: each agent's second save (its first update);
- ``steady``: the saves of steps 3 and later.

``--side lg`` counts LangGraph ``SqliteSaver.put`` at the same places (its file set
up, untimed, as ``bench_hotpath`` does). The witness's once-a-second flush and the
loop poll are set as ``bench_seq_save_window.py`` sets them (valgrind's slowness would
put them in most saves)::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_first_save_window.py run /tmp/fw
    PYTHONPATH=src .venv/bin/python benchmarks/bench_first_save_window.py run /tmp/fw --sides sk lg
    callgrind_annotate --inclusive=yes /tmp/fw/sk-first.<pid>    # where they went
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Workload, lg_config, lg_open, lg_plan, table

AGENTS = 4
FIRST = 10
CHARS = 300
KINDS = ("first", "creates", "second", "steady")

_HELPER = """#include <valgrind/callgrind.h>
void cg_on(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_off(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_dump(void) { CALLGRIND_DUMP_STATS; }
"""


def _helper(out: Path) -> Path:
    lib = out / "cgonoff.so"
    if not lib.exists():
        src = out / "cgonoff.c"
        src.write_text(_HELPER)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def kind_of(step: int, j: int) -> str:
    if step == 0:
        return "first" if j == 0 else "creates"
    return "second" if step == 1 else "steady" if step >= 3 else "third"


def count(kind: str) -> int:
    """Saves of ``kind`` in one round."""
    steps = 8
    return sum(kind_of(s, j) == kind for s in range(steps) for j in range(AGENTS))


def child(side: str, kind: str, rounds: int, lib: str | None) -> None:
    steps = 8
    wl = Workload(AGENTS, FIRST, FIRST + steps - 1, chars=CHARS)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    on: Callable[[], object]
    off: Callable[[], object]
    if lib is None:
        on = off = dump = lambda: None
    else:
        cg = ctypes.CDLL(lib)
        on, off, dump = cg.cg_on, cg.cg_off, cg.cg_dump
    with tempfile.TemporaryDirectory() as tmp:
        if side == "sk":
            from statekeeper import StateStore
            from statekeeper.backends.sqlite import commits as sk_sqlite
            from statekeeper.backends.sqlite import lone as sk_sqlite_lone

            sk_sqlite.PASS_EVERY = sk_sqlite_lone.PASS_EVERY = 1.0  # type: ignore[misc]

            async def run() -> None:
                for r in range(rounds):
                    path = Path(tmp) / f"w{r}.db"
                    store = StateStore(
                        f"sqlite:///{path}?synchronous=NORMAL",
                        durability="sync",
                        witness_interval=1000.0,
                    )
                    for step in range(steps):
                        for j, a in enumerate(wl.agent_ids):
                            mine = kind_of(step, j) == kind
                            if mine:
                                on()
                            await store.save(a, docs[a][step])
                            if mine:
                                off()
                    await store.close()

            asyncio.run(run())
        else:
            for r in range(rounds):
                saver = lg_open(Path(tmp) / f"w{r}.db", "NORMAL")
                plans = {a: lg_plan(saver, docs[a]) for a in wl.agent_ids}
                configs = {a: lg_config(a) for a in wl.agent_ids}
                for step in range(steps):
                    for j, a in enumerate(wl.agent_ids):
                        mine = kind_of(step, j) == kind
                        cp, meta, versions = plans[a][step]
                        if mine:
                            on()
                        configs[a] = saver.put(configs[a], cp, meta, versions)
                        if mine:
                            off()
                saver.conn.close()
    on()
    dump()
    off()


def run_child(side: str, kind: str, rounds: int, out: Path) -> int:
    prefix = out / f"{side}-{kind}"
    for old in out.glob(f"{side}-{kind}.*"):
        old.unlink()
    subprocess.run(
        [
            *("valgrind", "--tool=callgrind", "--instr-atstart=no"),
            f"--callgrind-out-file={prefix}.%p",
            *(sys.executable, __file__, "child", side, "--kind", kind),
            *("--rounds", str(rounds), "--lib", str(_helper(out))),
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    totals = []
    for dump in out.glob(f"{side}-{kind}.*"):
        for line in dump.read_text(errors="replace").splitlines():
            # (the window's dump: "summary" is of its last part, "totals" of all)
            if line.startswith("totals:"):
                n = int(line.split()[1])
                if n < 2**63:
                    totals.append(n)
                break
    return max(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("cmd", choices=["run", "child"])
    parser.add_argument("target", help="run: the output folder; child: the side")
    parser.add_argument("--sides", nargs="+", default=["sk"], choices=["sk", "lg"])
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--kind", choices=KINDS, help="(child)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lib", help="(child) the window helper library")
    args = parser.parse_args()
    if args.cmd == "child":
        child(args.target, args.kind, args.rounds, args.lib)
        return
    out = Path(args.target)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for side in args.sides:
        row = [side]
        for kind in args.kinds:
            total = run_child(side, kind, args.rounds, out)
            row.append(f"{total / (args.rounds * count(kind)):,.0f}")
        rows.append(row)
    print(f"instructions a save, {args.rounds} rounds of a new file, synchronous=NORMAL")
    print(table(["side", *args.kinds], rows))


if __name__ == "__main__":
    main()
