"""Instructions per save as the history grows (issue 11, "O(size of the change)").

``bench_store_cpu.py --only history`` measures CPU time per save at a history of
300 and 3,000 messages; on a loaded machine that time moves 2-3x between runs. This
script counts instructions instead: each case runs in a child process under
``valgrind --tool=callgrind`` twice, with ``--small`` and ``--large`` saves, and the
difference of the totals over the difference of the saves is the cost of one save in
the steady state (start-up, imports, the first full diff cancel out).

Cases, on ``memory://`` (the store's own CPU, no engine), each save appending one
~300-character message to a history of ``H`` messages and setting ``step``:

- ``dict``: ``store.save(agent_id, doc)`` of the caller's own dict;
- ``agent``: ``agent.data[...]`` mutated, then ``DurableAgent.save()``.

A save whose cost is O(size of the change) shows the same count at every ``H``.

Run::

    .venv/bin/python benchmarks/bench_hot_history_instructions.py
    .venv/bin/python benchmarks/bench_hot_history_instructions.py --history 300 3000 --large 25
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MESSAGE = "x" * 300
CASES = ("dict", "agent")


def message(i: int) -> dict[str, object]:
    return {"role": "user" if i % 2 else "ai", "content": f"{i} {MESSAGE}"}


async def child(case: str, history: int, saves: int) -> None:
    """The measured process: ``saves`` steady-state saves at ``history`` messages."""
    from statekeeper import StateStore

    async with StateStore("memory://", snapshot_every=10**9, snapshot_bytes=None) as store:
        if case == "dict":
            doc: dict[str, Any] = {"messages": [message(i) for i in range(history)], "step": 0}
            await store.save("plain", doc)
            await store.save("plain", doc)  # the first save after a create: the full diff
            for i in range(saves):
                doc["messages"].append(message(history + i))
                doc["step"] = i
                await store.save("plain", doc)
        else:
            first = {"messages": [message(i) for i in range(history)]}
            agent = await store.agent("durable", initial_data=first)
            agent.data["messages"].append(message(history))
            await agent.save()
            for i in range(saves):
                agent.data["messages"].append(message(history + i + 1))
                agent.data["step"] = i
                await agent.save()


def instructions(case: str, history: int, saves: int, out: Path) -> int:
    """Total instructions (every thread) of one child run under callgrind."""
    target = out / f"cg.{case}.{history}.{saves}"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={target}",
            sys.executable,
            __file__,
            "--child",
            case,
            str(history),
            str(saves),
        ],
        check=True,
        capture_output=True,
    )
    total = 0
    for path in out.glob(f"{target.name}*"):  # one file per thread with --separate-threads
        found = re.search(rb"^(?:summary|totals): (\d+)", path.read_bytes(), re.M)
        if found:
            total += int(found.group(1))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("CASE", "HISTORY", "SAVES"))
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--history", type=int, nargs="+", default=[300, 3000])
    parser.add_argument("--small", type=int, default=5)
    parser.add_argument("--large", type=int, default=25)
    args = parser.parse_args()
    if args.child:
        case, history, saves = args.child
        asyncio.run(child(case, int(history), int(saves)))
        return
    results: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            for history in args.history:
                small = instructions(case, history, args.small, Path(tmp))
                large = instructions(case, history, args.large, Path(tmp))
                per_save = (large - small) // (args.large - args.small)
                results[f"{case} at {history} messages: instructions per save"] = per_save
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
