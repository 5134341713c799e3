"""Instructions of one sync ``put`` on the calling thread alone (callgrind,
``CALLGRIND_TOGGLE_COLLECT`` around the puts): the part of a ``put`` its caller's
thread runs — on SQLite all of it (the commit is made inline) — without the saver's
background thread, whose timed passes over the loop under callgrind's slowdown follow
the wall time and spread ``bench_langgraph_put_window.py``'s every-thread count by
±10 k a ``put``.

``PUTS`` checkpoints of a one-integer state are put one after the other on one cached
thread (each the child of the last, as a graph's steps; SQLite ``NORMAL``;
``fork_protection=False``), after ``WARM`` uncounted ones::

    .venv/bin/python benchmarks/bench_langgraph_put_thread.py run sk 200 /tmp/lgput
    .venv/bin/python benchmarks/bench_langgraph_put_thread.py run sqlite 200 /tmp/lgput

prints the instructions per ``put``. ``PYTHONPATH=<another tree's src>`` measures
another tree (benchmarks/_common.py lets it win).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)

WARM = 20

_HELPER = """#include <valgrind/callgrind.h>
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""


def helper(out: Path) -> Path:
    """The toggle helper library in ``out`` (compiled once)."""
    lib = out / "cgtoggle.so"
    if not lib.exists():
        src = out / "cgtoggle.c"
        src.write_text(_HELPER)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def puts(kind: str, n: int, out: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from bench_langgraph_goals import sqlite_saver
    from statekeeper.integrations.langgraph import StatekeeperSaver

    toggle = ctypes.CDLL(str(helper(out))).cg_toggle
    tmp = Path(tempfile.mkdtemp(dir=out))
    saver: Any
    if kind == "sqlite":
        saver, close = sqlite_saver(tmp / "put.db", "NORMAL")
    else:
        url = f"sqlite:///{tmp / 'put.db'}?synchronous=NORMAL"
        saver = StatekeeperSaver.from_url(url, fork_protection=False)
        close = saver.close
    checkpoints = []
    for step in range(WARM + n):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": step}
        checkpoint["channel_versions"] = {"n": step + 1}
        checkpoints.append(checkpoint)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for step, checkpoint in enumerate(checkpoints):
        if step == WARM:
            toggle()
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {"n": step + 1})
    toggle()
    close()


def run(kind: str, n: int, out: Path) -> float:
    out.mkdir(parents=True, exist_ok=True)
    helper(out)
    dump = out / f"put-thread-{kind}.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--callgrind-out-file={dump}",
            sys.executable,
            __file__,
            "puts",
            kind,
            str(n),
            str(out),
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1]) / n
    raise SystemExit(f"no totals in {dump}")


def main() -> None:
    cmd = sys.argv[1]
    if cmd == "puts":
        puts(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    elif cmd == "run":
        print(f"{run(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])):,.0f}")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
