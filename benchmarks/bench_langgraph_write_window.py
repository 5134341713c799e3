"""Instructions of the saver's small-graph writes alone (callgrind, instrumentation on
only around the runs): issue 12's small-graph write goal, A/B between trees.

``bench_langgraph_write_callgrind.py`` counts whole processes (imports included, ~4.6 G
instructions of a ~6 G total) and subtracts two of them: under a load of 20 one such
pair took over 15 minutes. Here ``--instr-atstart=no`` runs the start-up and two warm-up
runs uninstrumented, and the helper of ``callgrind_window.py`` starts
instrumentation right before ``RUNS`` more 30-step runs (``durability="sync"``, one new
thread each, ``writes_wait=0`` so no timing window changes the commits, SQLite
``NORMAL``) and dumps it right after, every thread counted::

    .venv/bin/python benchmarks/bench_langgraph_write_window.py run sk 10 /tmp/lgwin
    .venv/bin/python benchmarks/bench_langgraph_write_window.py run sk-nofp 10 /tmp/lgwin
    .venv/bin/python benchmarks/bench_langgraph_write_window.py run sqlite 10 /tmp/lgwin

prints the instructions per run. ``run sk 40 /tmp/lgwin chat`` counts the chat
workload instead (``bench_langgraph_goals.py``'s chat graph, one turn a run, all on
one thread, after ``WARM`` uninstrumented turns, or as many as a sixth argument says:
``run sk-held 5 /tmp/lgwin chat 191`` counts turns 192-196 of a 196-turn chat):
instructions per turn. ``sk-nofp``:
the saver with ``fork_protection=False`` (deterministic: no claim renewal task, so no
timed passes of the background thread over the loop, whose number under callgrind
grows with the wall time; since h/lgsaver the renewal is a timer and ``sk`` is
deterministic too). ``sk-held``: the saver with its held writes (``writes_wait`` 1 s:
each step's writes are taken into its checkpoint's commit, none times out under
callgrind), the path a graph run takes with the saver's defaults.
``PYTHONPATH=<another tree's src>`` measures another tree (benchmarks/_common.py lets
it win).
"""

from __future__ import annotations

import ctypes
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window

WARM = 2


def write(kind: str, runs: int, out: Path, workload: str = "small", warm: int = WARM) -> None:
    import random

    from langchain_core.messages import HumanMessage

    from bench_langgraph import text  # type: ignore[import-not-found]
    from bench_langgraph_goals import chat_graph, small_graph, sqlite_saver
    from statekeeper.integrations.langgraph import StatekeeperSaver

    window = ctypes.CDLL(str(helper(out)))
    tmp = Path(tempfile.mkdtemp(dir=out))
    if kind == "sqlite":
        saver, close = sqlite_saver(tmp / "small.db", "NORMAL")
    else:
        url = f"sqlite:///{tmp / 'small.db'}?synchronous=NORMAL"
        # sk-nofp: fork protection off, so no claim-renewal task keeps the saver's
        # background thread passing over the loop every 20 ms (under callgrind's
        # ~50x slowdown those passes grow with the wall time, not with the work)
        # sk-held: the saver's held writes (a step's writes wait for its checkpoint's
        # commit), with a 1 s writes_wait: the default 5 ms can run out under
        # callgrind's slowdown before the checkpoint comes (a commit more, by chance)
        # sk-held-nofp: held writes as sk-held, fork protection off (the claims' cost)
        wait = 1.0 if kind.startswith("sk-held") else 0
        protect = kind not in ("sk-nofp", "sk-held-nofp")
        sk = StatekeeperSaver.from_url(url, writes_wait=wait, fork_protection=protect)
        saver, close = sk, sk.close
    if workload == "chat":
        chat = chat_graph().compile(checkpointer=saver)
        for t in range(warm + runs):
            if t == warm:
                window.cg_start()
            message = HumanMessage(text(random.Random(-t), 300), id=f"h-{t}")
            cfg = {"configurable": {"thread_id": "chat"}}
            chat.invoke({"messages": [message]}, cfg, durability="sync")
        window.cg_stop()
        close()
        return
    graph = small_graph(30).compile(checkpointer=saver)
    for t in range(WARM + runs):
        if t == WARM:
            window.cg_start()
        cfg = {"configurable": {"thread_id": f"small-{t}"}, "recursion_limit": 120}
        graph.invoke({"n": 0}, cfg, durability="sync")
    window.cg_stop()
    close()


def run(kind: str, runs: int, out: Path, workload: str = "small", warm: int = WARM) -> float:
    args = ["write", kind, str(runs), str(out), workload, str(warm)]
    return run_window(__file__, args, out, f"write-{kind}-{workload}") / runs


def main() -> None:
    cmd = sys.argv[1]
    if cmd == "write":
        warm = int(sys.argv[6]) if len(sys.argv) > 6 else WARM
        write(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), *sys.argv[5:6], warm=warm)
    elif cmd == "run":
        warm = int(sys.argv[6]) if len(sys.argv) > 6 else WARM
        runs = int(sys.argv[3])
        print(f"{run(sys.argv[2], runs, Path(sys.argv[4]), *sys.argv[5:6], warm=warm):,.0f}")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
