"""A checkpoint ``put``'s own cost, single-threaded (issue 12, the flat put).

``bench_langgraph_layers.py`` counts a LangGraph run's instructions on every thread;
on a loaded machine the order in which LangGraph's threads meet (a step's writes
parked before its checkpoint's ``put`` or after) moves a run's count by several
million instructions, more than one layer's change. This script takes the threads
out: one thread calls the saver as a 30-step run's steps do, ``put_writes`` then
``put`` (outside a LangGraph run: each write commits alone, each ``put`` on the cached
thread), under callgrind, instrumented only around ``RUNS`` sequences after two
uncounted ones; it prints instructions per ``put`` + ``put_writes`` pair (``--puts-only``:
per ``put``, no writes). Run it with two trees' ``PYTHONPATH`` to compare them::

    PYTHONPATH=<tree>/src python benchmarks/bench_langgraph_flatput.py 4 /tmp/x
    PYTHONPATH=<tree>/src python benchmarks/bench_langgraph_flatput.py 4 /tmp/x --puts-only

``--on-thread`` makes the calls from a thread other than the main one, as LangGraph's
background executor makes a run's writes (a main-thread call also sets and restores
the SIGINT handler: see ``integrations/langgraph/interrupts.py``). ``--new-threads``
makes each step's calls on a thread started for them, as LangGraph starts new executor
threads for each ``invoke`` (what a saver keeps per thread is paid again on each).
"""

from __future__ import annotations

import ctypes
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window, slowed_clock

STEPS = 30
WARM = 2
#: each step's ``put_writes`` too (``--puts-only``: the ``put`` calls alone)
WRITES = "--puts-only" not in sys.argv
#: the calls made from another thread than the main one (``--on-thread``)
ON_THREAD = "--on-thread" in sys.argv
#: each step's calls on a new thread (``--new-threads``)
NEW_THREADS = "--new-threads" in sys.argv


def sequence(saver: Any, thread: str) -> None:
    """A 30-step run's saver calls on one thread: each step's write, its checkpoint."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for step in range(STEPS):
        checkpoint: Any = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=-1))
        checkpoint["channel_values"] = {"n": step}
        checkpoint["channel_versions"] = {"n": step + 1, "__start__": 1}
        checkpoint["versions_seen"] = {"step": {"n": step}, "__input__": {}}
        checkpoint["updated_channels"] = ["n"]
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        if NEW_THREADS:
            made: list[Any] = []
            args = (config, checkpoint, metadata, step, made)
            caller = threading.Thread(target=_step_calls, args=(saver, *args))
            caller.start()
            caller.join()
            config = made[0]
            continue
        config = saver.put(config, checkpoint, metadata, {"n": step + 1})
        if WRITES:
            saver.put_writes(config, [("n", step + 1)], f"task-{step}")


def _step_calls(
    saver: Any, config: Any, checkpoint: Any, metadata: Any, step: int, made: list[Any]
) -> None:
    config = saver.put(config, checkpoint, metadata, {"n": step + 1})
    if WRITES:
        saver.put_writes(config, [("n", step + 1)], f"task-{step}")
    made.append(config)


def write(runs: int, out: Path) -> None:
    from statekeeper.integrations.langgraph import StatekeeperSaver

    slowed_clock()
    window = ctypes.CDLL(str(helper(out)))
    tmp = Path(tempfile.mkdtemp(dir=out))
    saver = StatekeeperSaver.from_url(f"sqlite:///{tmp / 'flat.db'}?synchronous=NORMAL")

    def calls() -> None:
        for t in range(WARM + runs):
            if t == WARM:
                window.cg_start()
            sequence(saver, f"flat-{t}")
        window.cg_stop()

    if ON_THREAD:
        caller = threading.Thread(target=calls)
        caller.start()
        caller.join()
    else:
        calls()
    saver.close()


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] in ("-h", "--help"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "write":
        write(int(sys.argv[2]), Path(sys.argv[3]))
        return
    runs, out = int(sys.argv[1]), Path(sys.argv[2])
    rest = ([] if WRITES else ["--puts-only"]) + (["--on-thread"] if ON_THREAD else [])
    rest += ["--new-threads"] if NEW_THREADS else []
    total = run_window(__file__, ["write", str(runs), str(out), *rest], out, "flatput")
    what = "put + put_writes" if WRITES else "put"
    print(f"{total / runs / STEPS:>12,.0f} instructions a {what}", flush=True)


if __name__ == "__main__":
    main()
