"""The footprint of a save interleaved with the peer's (issue 11): what a cold save touches.

``bench_hotpath.py`` section 1 interleaves, per operation, ``StateStore.save``,
LangGraph ``SqliteSaver.put`` and a bare one-row commit (``seq_round``). Each call
then starts on caches the other two left behind, so its CPU follows the code and
data it touches (its footprint) more than its instruction count (docs/benchmarks.md,
"savecpu"). This measures that footprint, load-independently:

- ``--cache`` (default): the interleaved loop (4 agents, 10 -> 30 messages as in
  ``--quick``, rotating order) under ``valgrind --tool=callgrind --cache-sim=yes
  --branch-sim=yes`` with caches pinned to this machine's per-core sizes (I1 and D1
  32 KiB, the 512 KiB L2 as the last level). Collection is switched on only around the
  calls of one side (a tiny C helper issuing ``CALLGRIND_TOGGLE_COLLECT``, built with
  ``gcc`` at start), after two warm-up steps, while every side keeps running: the
  simulated caches see the whole loop, the counts are of one side's calls. Per call:
  instructions, I1/D1/last-level misses, branch mispredictions. ``--alone`` runs the
  counted side only (warm: nothing between its calls) for the contrast.
- ``--python``: per call, without valgrind, the distinct Python functions (code
  objects) and C functions a call enters (``sys.setprofile``) and the bytecodes it
  runs (``sys.settrace`` opcode events), event-loop thread.

Run::

    .venv/bin/python benchmarks/bench_save_footprint.py                 # --cache, NORMAL
    .venv/bin/python benchmarks/bench_save_footprint.py --sync FULL --alone
    .venv/bin/python benchmarks/bench_save_footprint.py --python
    .venv/bin/python benchmarks/bench_save_footprint.py --minimal --sides minimal sk lg
    PYTHONPATH=<other tree>/src .venv/bin/python benchmarks/bench_save_footprint.py
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import BareCommits, Workload, lg_config, lg_open, lg_plan, table

CHARS = 300
SIDES = ("sk", "lg", "bare")
#: with ``--minimal``: bench_save_floor's ``minimal`` sides join the loop (a save with
#: every guarantee in the least Python, raw sqlite3; see that module)
MINIMAL = ("minimal", "minimal-detect")
WARM = 2  # steps before counting
CACHES = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=524288,8,64"]
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw", "Bcm", "Bim")
_TOGGLE_C = """
#include <valgrind/callgrind.h>
void sk_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""


def _toggler(tmp: Path) -> Callable[[], Any]:
    src, lib = tmp / "toggle.c", tmp / "toggle.so"
    src.write_text(_TOGGLE_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return ctypes.CDLL(str(lib)).sk_toggle


async def interleaved(
    tmp: Path,
    sync: str,
    counted: str,
    alone: bool,
    around: Callable[[str, bool], None],
    last: int = 30,
    minimal: bool = False,
    steady: bool = False,
) -> int:
    """The loop of ``bench_hotpath.seq_round`` (first rotation 0); ``around(side, start)``
    is called right before and after each counted call past the warm-up. Returns the
    calls counted."""
    from statekeeper import StateStore

    wl = Workload(4, 10, last, chars=CHARS)
    if steady:  # (see --steady)
        from statekeeper.backends.sqlite import commits as sk_sqlite
        from statekeeper.backends.sqlite import lone as sk_sqlite_lone

        sk_sqlite.PASS_EVERY = sk_sqlite_lone.PASS_EVERY = 1.0  # type: ignore[misc]
    from statekeeper.security.highwater import DEFAULT_INTERVAL

    store = StateStore(
        f"sqlite:///{tmp / 'sk.db'}?synchronous={sync}",
        durability="sync",
        witness_interval=1000.0 if steady else DEFAULT_INTERVAL,
    )
    saver = lg_open(tmp / "lg.db", sync)
    bare = BareCommits(tmp / "bare.db", sync, 500)
    docs = {a: wl.docs(a) for a in wl.agent_ids}
    plans = {a: lg_plan(saver, docs[a]) for a in wl.agent_ids}
    configs = {a: lg_config(a) for a in wl.agent_ids}
    saves: dict[str, Callable[[str, dict[str, Any]], None]] = {}
    kept: list[Any] = []
    if minimal or counted in MINIMAL:
        from bench_save_floor import MinimalSide, minimal_file

        for name in MINIMAL:
            await minimal_file(tmp / f"{name}.db", sync)
            kept.append(MinimalSide(tmp / f"{name}.db", sync, 0, detect=name != "minimal"))
            saves[name] = kept[-1].save
    sides = (counted,) if alone else SIDES + (MINIMAL if saves else ())
    counted_calls = 0
    try:
        i = 0
        for step in range(len(wl.sizes)):
            for a in wl.agent_ids:
                i += 1
                k = i % len(sides)
                for side in sides[k:] + sides[:k]:
                    on = side == counted and step >= WARM
                    if on:
                        around(side, True)
                    if side == "sk":
                        await store.save(a, docs[a][step])
                    elif side == "lg":
                        cp, meta, versions = plans[a][step]
                        configs[a] = saver.put(configs[a], cp, meta, versions)
                    elif side == "bare":
                        bare.commit()
                    else:
                        saves[side](a, docs[a][step])
                    if on:
                        around(side, False)
                        counted_calls += 1
    finally:
        await store.close()
        saver.conn.close()
        bare.close()
        for m in kept:
            m.close()
    return counted_calls


def child(sync: str, counted: str, alone: bool, minimal: bool = False, steady: bool = False) -> int:
    with tempfile.TemporaryDirectory() as d:
        toggle = _toggler(Path(d))
        return asyncio.run(
            interleaved(
                Path(d), sync, counted, alone, lambda s, b: toggle(), minimal=minimal, steady=steady
            )
        )


def cache_counts(
    sync: str,
    side: str,
    alone: bool,
    keep: Path | None,
    minimal: bool = False,
    steady: bool = False,
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        out = (keep or Path(d)) / f"callgrind.{sync}.{side}{'.alone' if alone else ''}.out"
        cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--branch-sim=yes", *CACHES]
        cmd += ["--collect-atstart=no", f"--callgrind-out-file={out}", sys.executable]
        cmd += [__file__, "--child", sync, side] + (["--alone"] if alone else [])
        cmd += ["--minimal"] if minimal else []
        cmd += ["--steady"] if steady else []
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        calls = int(proc.stdout.strip().splitlines()[-1])
        text = out.read_text()
        names = re.search(r"^events: (.+)$", text, re.M)
        assert names is not None
        totals = [0] * len(names.group(1).split())
        for m in re.finditer(r"^summary: (.+)$", text, re.M):
            for j, v in enumerate(m.group(1).split()):
                totals[j] += int(v)
    got = dict(zip(names.group(1).split(), totals, strict=True))
    return {e: got.get(e, 0) / calls for e in EVENTS} | {"calls": calls}


async def _python_side(sync: str, side: str, minimal: bool = False) -> list[Any]:
    """Per call of ``side``: distinct Python functions, distinct C functions, bytecodes."""
    codes: set[Any] = set()
    cfuncs: set[Any] = set()
    ops = [0]
    per: dict[str, list[float]] = {"py": [], "c": []}

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            codes.add(frame.f_code)
        elif event == "c_call":
            cfuncs.add(arg)

    def trace(frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            ops[0] += 1
        return trace

    def around_prof(_side: str, start: bool) -> None:
        if start:
            codes.clear()
            cfuncs.clear()
            sys.setprofile(prof)
        else:
            sys.setprofile(None)
            per["py"].append(len(codes))
            per["c"].append(len(cfuncs))

    def around_trace(_side: str, start: bool) -> None:
        sys.settrace(trace if start else None)

    with tempfile.TemporaryDirectory() as d:
        n = await interleaved(Path(d), sync, side, False, around_prof, minimal=minimal)
    with tempfile.TemporaryDirectory() as d:
        await interleaved(Path(d), sync, side, False, around_trace, minimal=minimal)
    # (the counting callback itself is one Python function and one C call: taken out)
    return [
        side,
        f"{sum(per['py']) / n - 1:.1f}",
        f"{sum(per['c']) / n - 1:.1f}",
        f"{ops[0] / n:,.0f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", nargs=2, metavar=("SYNC", "SIDE"))
    parser.add_argument("--sync", default="NORMAL", choices=["FULL", "NORMAL", "OFF"])
    parser.add_argument("--sides", nargs="+", default=["sk", "lg"], choices=SIDES + MINIMAL)
    parser.add_argument(
        "--minimal", action="store_true", help="the minimal sides run in the loop too"
    )
    parser.add_argument("--alone", action="store_true", help="also the side alone (warm)")
    parser.add_argument("--python", action="store_true", help="Python functions and bytecodes")
    parser.add_argument("--keep", type=Path, help="keep the callgrind files here (annotate)")
    parser.add_argument(
        "--steady",
        action="store_true",
        help="no loop poll (PASS_EVERY 1 s) nor witness flush (1,000 s) in a counted save:"
        " under valgrind every save would make both, on a quiet machine few do",
    )
    args = parser.parse_args()
    if args.child:
        print(child(args.child[0], args.child[1], args.alone, args.minimal, args.steady))
        return
    if args.python:
        rows = [asyncio.run(_python_side(args.sync, side, args.minimal)) for side in args.sides]
        head = ["side", "Python functions / call", "C functions / call", "bytecodes / call"]
        print(table(head, rows))
        return
    rows = []
    for alone in (False, True) if args.alone else (False,):
        for side in args.sides:
            r = cache_counts(args.sync, side, alone, args.keep, args.minimal, args.steady)
            label = f"{side} {'alone' if alone else 'interleaved'}"
            rows.append([label] + [f"{r[e]:,.0f}" for e in EVENTS] + [int(r["calls"])])
    print(f"synchronous={args.sync}, per call (callgrind cache-sim, {' '.join(CACHES)})")
    print(table(["side", *EVENTS, "calls"], rows))


if __name__ == "__main__":
    main()
