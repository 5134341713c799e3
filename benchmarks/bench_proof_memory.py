"""What the flat save's proofs (``store/proofs.py``) keep alive in the store's cache.

``StateStore`` with its default ``cache_size`` (1,024 agents, a bound by count); N
agents, each a chat of ``--messages`` flat messages (~300 characters) saved as one
create then ``--saves`` steady saves of one message more (the flat save: its proof made
at the first, used from the second). Then the caller drops its documents (as a server
handling one request per agent does), and tracemalloc (``gc.collect()`` first) says:

* **cache**: the Python heap the store still holds for the N agents (what dropping
  every cached record frees: their packed bytes, the proofs and what the proofs keep
  alive);
* **proofs**: what dropping only the records' proofs frees (``record.proofs = None``):
  the proofs' own bytes and the message objects that only they keep alive;
* **kept by caller**: the same ``proofs`` figure when the caller keeps its documents
  (a proof's own bytes alone).

The same workload on SQLite (``synchronous=OFF``: nothing of the backend on the Python
heap). Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_proof_memory.py
    PYTHONPATH=src .venv/bin/python benchmarks/bench_proof_memory.py --agents 100 1000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import human_bytes, table
from statekeeper import StateStore
from statekeeper.store import proofs as _proofs

PAD = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 5  # ~280 characters


def _message(agent: int, i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"{agent}:{i} {PAD}", "n": i}


def _held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def _measure(agents: int, messages: int, saves: int, keep: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="proofmem-") as tmp:
        async with StateStore(f"sqlite:///{tmp}/p.db?synchronous=OFF") as store:
            cache = store._cache
            chats: list[list[dict[str, Any]]] = []
            base = _held()
            for a in range(agents):
                chat = [_message(a, i) for i in range(messages - saves)]
                await store.save(f"a{a}", {"messages": chat})
                for _ in range(saves):
                    chat.append(_message(a, len(chat)))
                    await store.save(f"a{a}", {"messages": chat})
                if keep:
                    chats.append(chat)
                del chat
            records = list(cache._data.values())
            with_proofs = sum(1 for r in records if r.proofs)
            full = _held()
            for record in records:
                record.proofs = None
            no_proofs = _held()
            cache.clear()
            del records
            empty = _held()
            return {
                "agents": agents,
                "messages": messages,
                "caller_keeps": keep,
                "records_with_proof": with_proofs,
                "heap_after_saves": full - base,
                "cache": full - empty,
                "proofs": full - no_proofs,
                "proofs_per_agent": (full - no_proofs) / agents,
                "cache_per_agent": (full - empty) / agents,
                "native": _proofs.NATIVE,
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tracemalloc.start()
    rows = []
    for agents in args.agents:
        for keep in (False, True):
            rows.append(asyncio.run(_measure(agents, args.messages, args.saves, keep)))
    if args.json:
        print(json.dumps(rows))
        return
    print(
        table(
            [
                "agents",
                "caller keeps docs",
                "with proof",
                "cache holds",
                "of it proofs",
                "proofs / agent",
                "cache / agent",
            ],
            [
                [
                    r["agents"],
                    "yes" if r["caller_keeps"] else "no",
                    r["records_with_proof"],
                    human_bytes(r["cache"]),
                    human_bytes(r["proofs"]),
                    human_bytes(r["proofs_per_agent"]),
                    human_bytes(r["cache_per_agent"]),
                ]
                for r in rows
            ],
        )
    )
    print(f"native proofs (version tags): {rows[0]['native']}; {args.messages} messages an agent")


if __name__ == "__main__":
    main()
