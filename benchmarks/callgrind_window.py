"""Callgrind with instrumentation on only inside a window the measured process opens and
closes itself: the shared launcher of ``bench_langgraph_read_window.py`` and
``bench_langgraph_write_window.py``.

A small C helper (compiled on first use from valgrind's ``callgrind.h``) gives the child
``cg_start`` (start instrumentation) and ``cg_stop`` (dump the counters, stop); the child
is run under ``valgrind --tool=callgrind --instr-atstart=no`` with one output file per
process, and the window's total is read back from the dumps. ``CALLGRIND_TOGGLE_COLLECT``
would count the calling thread only; this counts every thread (a saver's store reads may
run in an executor).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_HELPER = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION; }
"""


def slowed_clock() -> None:
    """In the measured child: when ``CG_PASS_EVERY`` is set (seconds), the SQLite
    engine's ``PASS_EVERY`` takes it. The engine commits a lone append at once only
    while a pass of the loop was made less than ``PASS_EVERY`` (1 ms) ago or nothing
    waits; under callgrind everything runs ~50x slower, so 1 ms goes by inside nearly
    every append and the windows count the queued path (a pass of the loop, the
    coroutines) that an unslowed process seldom takes: ``CG_PASS_EVERY=0.05`` counts
    the case mix of a real run (docs/benchmarks.md, "lgsmall2": under callgrind at
    1 ms the lean keyed append committed 22 of 360 appends at once, at 50 ms 330; 239
    of 240 without callgrind)."""
    every = os.environ.get("CG_PASS_EVERY")
    if every:
        from statekeeper.backends.sqlite import commits as sqlite
        from statekeeper.backends.sqlite import lone as sqlite_lone

        sqlite.PASS_EVERY = sqlite_lone.PASS_EVERY = float(every)  # type: ignore[attr-defined]


def helper(out: Path) -> Path:
    """The helper library in ``out`` (compiled once), for ``ctypes.CDLL`` in the child."""
    lib = out / "cgwindow.so"
    if not lib.exists():
        src = out / "cgwindow.c"
        src.write_text(_HELPER)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def run_window(script: str, args: list[str], out: Path, name: str) -> int:
    """Run ``script args`` under callgrind (outputs ``out/name.<pid>``, earlier ones
    removed) and return the instructions counted in its window."""
    out.mkdir(parents=True, exist_ok=True)
    helper(out)
    prefix = out / name
    for old in out.glob(f"{name}.*"):
        old.unlink()
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={prefix}.%p",
            sys.executable,
            script,
            *args,
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    totals = []
    for dump in out.glob(f"{name}.*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith(("totals:", "summary:")):
                count = int(line.split()[1])
                # the dump at exit (after the window's dump zeroed the counters) may
                # print a small negative summary as an unsigned 64-bit number: skipped
                if count < 2**63:
                    totals.append(count)
                break
    return max(totals)  # the window's dump (the one at exit holds ~nothing)
