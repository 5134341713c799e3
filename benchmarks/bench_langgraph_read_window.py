"""Instructions of one ``get_tuple`` alone (callgrind, instrumentation on only around it),
on ``bench_langgraph_cold_callgrind.py``'s 200-turn chat files: issue 12's read goals.

``bench_langgraph_cold_callgrind.py`` counts a whole process and subtracts one without
the reads; that also counts opening and closing each saver. Here a small C helper
(compiled on first use from valgrind's ``callgrind.h``) starts callgrind's
instrumentation right before the read and dumps and stops it right after, so the
count is the read's own, in every thread (the saver's store reads may run in an
executor). ``WHICH``: ``latest`` / ``older`` (a new saver: cold; ``older`` after the
latest, as the goals benchmark reads it), ``warm-latest`` / ``warm-older`` (the same
saver's 4th read); ``open`` / ``first``: a new saver's ``from_url`` (``SqliteSaver(conn)``
+ ``setup``), its first read (a thread that is not there)::

    .venv/bin/python benchmarks/bench_langgraph_cold_callgrind.py write /tmp/cg
    .venv/bin/python benchmarks/bench_langgraph_read_window.py run sk latest /tmp/cg
    .venv/bin/python benchmarks/bench_langgraph_read_window.py all /tmp/cg   # the table

``PYTHONPATH=<another tree's src>`` measures another tree on the same files. (Note:
``CALLGRIND_TOGGLE_COLLECT`` would count the calling thread only.)
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_langgraph_goals as goals
from callgrind_window import helper, run_window

WHICH = ("latest", "older", "warm-latest", "warm-older")
#: a new saver's steps before its cold read: ``open`` (``from_url`` / ``SqliteSaver(conn)``
#: + ``setup``) and ``first`` (its first read: a thread that is not there)
BEFORE = ("open", "first")


def read(kind: str, out: Path, which: str) -> None:
    """Two savers in turn (the first makes the process warm: imports, caches of
    message classes), the second's read counted."""
    window = ctypes.CDLL(str(helper(out)))
    cid = json.loads((out / "older.json").read_text())[kind][3]
    for last in (False, True):
        if last and which == "open":
            window.cg_start()
        saver, close = goals.SAVERS[kind](out / f"{kind}.db", "NORMAL")
        if last and which in BEFORE:
            if which == "open":
                window.cg_stop()
            else:
                window.cg_start()
            saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
            if which == "first":
                window.cg_stop()
            close()
            return
        saver.get_tuple({"configurable": {"thread_id": "absent", "checkpoint_ns": ""}})
        conf = {"thread_id": "chat", "checkpoint_ns": ""}
        if which.endswith("older"):
            assert saver.get_tuple({"configurable": conf})
            conf = {**conf, "checkpoint_id": cid}
        if which.startswith("warm"):
            for _ in range(3):
                assert saver.get_tuple({"configurable": conf})
        if last:
            window.cg_start()
        found = saver.get_tuple({"configurable": conf})
        if last:
            window.cg_stop()
        assert found is not None
        del found
        close()
        # freed before the next saver's window opens: a saver rebound inside ``open``
        # freed the first one's caches there (~1.6 M instructions of dealloc)
        del saver, close


def run(kind: str, which: str, out: Path) -> int:
    return run_window(__file__, ["read", kind, which, str(out)], out, f"window-{kind}-{which}")


def main() -> None:
    cmd = sys.argv[1]
    if cmd == "read":
        read(sys.argv[2], Path(sys.argv[4]), sys.argv[3])
    elif cmd == "run":
        print(f"{run(sys.argv[2], sys.argv[3], Path(sys.argv[4])):,}")
    elif cmd == "all":
        out = Path(sys.argv[2])
        print("| read | statekeeper | SqliteSaver | ratio |\n|---|---|---|---|")
        for which in (*BEFORE, *WHICH):
            ours, peer = run("sk", which, out), run("sqlite", which, out)
            print(f"| {which} | {ours:,} | {peer:,} | {peer / ours:.2f}x |")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
