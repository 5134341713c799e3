"""CPU of the saver's memo upkeep after a checkpoint put (``writes._after_put``) on a
chat of ``N`` messages, every one of them used by the put (a turn's put of a
``MessagesState`` chat whose messages channel changed): the best of 9 rounds of 500
calls, the calling thread's CPU (``time.process_time``), less the copy of the put's
``used`` dict each call is given::

    PYTHONPATH=<tree>/src .venv/bin/python benchmarks/bench_langgraph_memo_pass.py 400

``PYTHONPATH=<another tree's src>`` measures another tree (benchmarks/_common.py lets
it win).
"""

from __future__ import annotations

import sys
import time
import timeit
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _common  # noqa: F401  (PYTHONPATH wins)


def main() -> None:
    from langchain_core.messages import HumanMessage

    from statekeeper.integrations.langgraph.stream import _Stream
    from statekeeper.integrations.langgraph.writes import _after_put

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    messages = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(n)]
    entries = {id(m): (weakref.ref(m), {"$p": f"k{i}"}, None) for i, m in enumerate(messages)}
    st = _Stream("t", "lg:t", {"ns": {}, "pool": {}}, 1, {})

    def copy() -> None:
        dict(entries)

    def one() -> None:
        _after_put(st, dict(entries), False)

    def best(fn: object) -> float:
        return min(timeit.repeat(fn, number=500, repeat=9, timer=time.process_time)) / 500  # type: ignore[arg-type]

    print(f"_after_put, {n} messages used: {(best(one) - best(copy)) * 1e6:.1f} µs a put")


if __name__ == "__main__":
    main()
