"""Instructions of one sync ``put`` alone (callgrind, instrumentation on only around
the puts): the saver's own cost per checkpoint, without LangGraph's graph around it.

``PUTS`` checkpoints of a one-integer state are put one after the other on one cached
thread (each the child of the last, as a graph's steps; SQLite ``NORMAL``), after
``WARM`` uninstrumented ones; every thread is counted::

    .venv/bin/python benchmarks/bench_langgraph_put_window.py run sk 200 /tmp/lgput
    .venv/bin/python benchmarks/bench_langgraph_put_window.py run sqlite 200 /tmp/lgput

prints the instructions per ``put``. ``sk``: the saver with its defaults but
``fork_protection=False`` (a put made outside a run: no claim); ``sqlite``:
``SqliteSaver``. ``PYTHONPATH=<another tree's src>`` measures another tree
(benchmarks/_common.py lets it win).
"""

from __future__ import annotations

import ctypes
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window

WARM = 20


def puts(kind: str, n: int, out: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from bench_langgraph_goals import sqlite_saver
    from statekeeper.integrations.langgraph import StatekeeperSaver

    window = ctypes.CDLL(str(helper(out)))
    tmp = Path(tempfile.mkdtemp(dir=out))
    saver: Any
    if kind == "sqlite":
        saver, close = sqlite_saver(tmp / "put.db", "NORMAL")
    else:
        url = f"sqlite:///{tmp / 'put.db'}?synchronous=NORMAL"
        saver = StatekeeperSaver.from_url(url, fork_protection=False)
        close = saver.close
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for step in range(WARM + n):
        if step == WARM:
            window.cg_start()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": step}
        checkpoint["channel_versions"] = {"n": step + 1}
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {"n": step + 1})
    window.cg_stop()
    close()


def run(kind: str, n: int, out: Path) -> float:
    return run_window(__file__, ["puts", kind, str(n), str(out)], out, f"put-{kind}") / n


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
