"""What the per-change depth check (statekeeper.codec.depth) costs a save: N saves of
a growing chat (one message and one counter per save) on a SQLite store, default
options. Run under callgrind with N=0 and N=400 and subtract: the instructions of 400
saves (docs/benchmarks.md, "trialdata").

    valgrind --tool=callgrind python benchmarks/bench_trialdata_depth.py 400
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from statekeeper import StateStore


async def main(saves: int) -> None:
    with tempfile.TemporaryDirectory() as where:
        async with StateStore(f"sqlite:///{where}/b.db") as store:
            doc: dict[str, object] = {"messages": [], "n": 0}
            messages: list[dict[str, str]] = []
            doc["messages"] = messages
            for i in range(saves):
                messages.append({"role": "user", "content": "x" * 300 + str(i)})
                doc["n"] = i
                await store.save("chat", doc)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 400))
