"""A chat turn's instructions split by phase: the graph's own work and each saver call
(callgrind, every thread), for statekeeper's saver and ``SqliteSaver`` (issue 12).

``bench_langgraph_write_window.py run sk-held N DIR chat WARM`` counts whole turns. Here
the same turns (``bench_langgraph_goals.py``'s chat graph, ``durability="sync"``, the
saver's defaults but ``writes_wait`` 1 s as ``sk-held``: no held write times out under
callgrind's slowdown) are cut at every entry to and exit from ``get_tuple``, ``put``
and ``put_writes`` with ``CALLGRIND_DUMP_STATS_AT``: each part is charged to the call
open when it ran (the innermost, when calls overlap on threads), else to the graph.
Instructions per turn, averaged over the window's turns::

    .venv/bin/python benchmarks/bench_langgraph_turn_calls.py run sk 3 /tmp/tc 150
    .venv/bin/python benchmarks/bench_langgraph_turn_calls.py run sqlite 3 /tmp/tc 150

(turns 151-153 of a chat: ~300 messages). ``PYTHONPATH=<another tree's src>`` measures
another tree (benchmarks/_common.py lets it win).
"""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)

_HELPER = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_part(const char* label) { CALLGRIND_DUMP_STATS_AT(label); }
void cg_stop(void) { CALLGRIND_DUMP_STATS_AT("graph"); CALLGRIND_STOP_INSTRUMENTATION; }
"""
CALLS = ("get_tuple", "put", "put_writes")


def helper(out: Path) -> Path:
    lib = out / "cgparts.so"
    if not lib.exists():
        src = out / "cgparts.c"
        src.write_text(_HELPER)
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def turns(kind: str, runs: int, out: Path, warm: int) -> None:
    from langchain_core.messages import HumanMessage

    from bench_langgraph import text  # type: ignore[import-not-found]
    from bench_langgraph_goals import chat_graph, sqlite_saver
    from statekeeper.integrations.langgraph import StatekeeperSaver

    cg = ctypes.CDLL(str(helper(out)))
    tmp = Path(tempfile.mkdtemp(dir=out))
    if kind == "sqlite":
        saver, close = sqlite_saver(tmp / "chat.db", "NORMAL")
    else:
        url = f"sqlite:///{tmp / 'chat.db'}?synchronous=NORMAL"
        sk = StatekeeperSaver.from_url(url, writes_wait=1.0)
        saver, close = sk, sk.close
    lock = threading.Lock()
    open_calls: list[str] = []
    active = [False]

    def wrap(name: str) -> None:
        method = getattr(saver, name)

        def wrapped(*a: Any, **k: Any) -> Any:
            if not active[0]:
                return method(*a, **k)
            with lock:
                cg.cg_part((open_calls[-1] if open_calls else "graph").encode())
                open_calls.append(name)
            try:
                return method(*a, **k)
            finally:
                with lock:
                    cg.cg_part(name.encode())
                    open_calls.remove(name)

        setattr(saver, name, wrapped)

    for name in CALLS:
        wrap(name)
    chat = chat_graph().compile(checkpointer=saver)
    cfg = {"configurable": {"thread_id": "chat"}}
    for t in range(warm + runs):
        if t == warm:
            active[0] = True
            cg.cg_start()
        message = HumanMessage(text(random.Random(-t), 300), id=f"h-{t}")
        chat.invoke({"messages": [message]}, cfg, durability="sync")
    cg.cg_stop()
    active[0] = False
    close()


def run(kind: str, runs: int, out: Path, warm: int) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    helper(out)
    prefix = out / f"turn-{kind}"
    for old in out.glob(f"turn-{kind}.*"):
        old.unlink()
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={prefix}.%p",
            sys.executable,
            __file__,
            "turns",
            kind,
            str(runs),
            str(out),
            str(warm),
        ],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
    )
    parts: Counter[str] = Counter()
    for dump in out.glob(f"turn-{kind}.*"):
        label, count = None, None
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.rsplit(": ", 1)[1]
            elif line.startswith(("totals:", "summary:")) and count is None:
                count = int(line.split()[1])
        if label is not None and count is not None and count < 2**63:
            parts[label] += count
    return {k: v / runs for k, v in parts.items()}


def main() -> None:
    if sys.argv[1] == "turns":
        turns(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "run":
        parts = run(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
        total = sum(parts.values())
        for k in ("graph", *CALLS):
            print(f"{k:11} {parts.get(k, 0):>14,.0f}")
        print(f"{'turn':11} {total:>14,.0f}")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
