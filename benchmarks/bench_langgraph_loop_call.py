"""Instructions of one sync call on the saver's loop (``SharedLoop.call``) of a
coroutine that does nothing: the loop's own part of every sync saver call (issue 12,
"lgput"). Callgrind, instrumented only around ``N`` calls after 50 uncounted ones,
made from a thread other than the main one (``thread``: as LangGraph's background
executor makes a run's writes) or from the main thread (``main``: a run's first read
and its release; there the call also sets and restores the SIGINT handler). The
call is ``bare`` where the tree has it (see ``SharedLoop.call``)::

    PYTHONPATH=<tree>/src python benchmarks/bench_langgraph_loop_call.py thread /tmp/x
    PYTHONPATH=<tree>/src python benchmarks/bench_langgraph_loop_call.py main /tmp/x
"""

from __future__ import annotations

import ctypes
import inspect
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)
from callgrind_window import helper, run_window
from statekeeper.integrations.langgraph.loop import SharedLoop

N = 2000
#: ``bare=True`` where the tree's ``SharedLoop.call`` takes it
KW: dict[str, Any] = (
    {"bare": True} if "bare" in inspect.signature(SharedLoop.call).parameters else {}
)


async def _nothing() -> int:
    return 1


def calls(out: Path, where: str) -> None:
    window = ctypes.CDLL(str(helper(out)))
    loop = SharedLoop()
    # as in a saver with runs (their renewal timers start the background thread): no
    # look for work left on the loop after each call
    loop._started = True

    def go() -> None:
        for _ in range(50):
            loop.call(_nothing(), **KW)
        window.cg_start()
        for _ in range(N):
            loop.call(_nothing(), **KW)
        window.cg_stop()

    if where == "thread":
        caller = threading.Thread(target=go)
        caller.start()
        caller.join()
    else:
        go()
    loop._closed = True  # (no background thread was started: nothing to stop)


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("thread", "main", "child"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "child":
        calls(Path(sys.argv[2]), sys.argv[3])
        return
    out = Path(sys.argv[2])
    total = run_window(__file__, ["child", str(out), sys.argv[1]], out, "loopcall")
    print(f"{sys.argv[1]}: {total / N:,.0f} instructions a call", flush=True)


if __name__ == "__main__":
    main()
