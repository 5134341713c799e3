"""Child process for the multi-process tiered tests: one StateStore on a tiered URL.

Usage: python _tiered_child.py URL AGENT. Prints ``{"ready": true}``, then answers one
JSON line per command read from stdin:

* ``{"op": "save", "n": N}`` saves ``{"n": N}`` and prints ``{"seq": <last seq>}``
  once the store acknowledged it;
* ``{"op": "load"}`` prints ``{"seq": S, "n": N, "stats": {...}}`` (the tiered
  backend's counters);
* ``{"op": "exit"}`` closes the store and exits.

An exception is printed as ``{"error": "..."}`` (the test fails on it).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from statekeeper.store import StateStore


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def main(url: str, agent: str) -> None:
    loop = asyncio.get_running_loop()
    async with StateStore(url) as store:
        _reply({"ready": True})
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            try:
                if command["op"] == "save":
                    result = await store.save(agent, {"n": command["n"]})
                    _reply({"seq": result.last_seq})
                elif command["op"] == "load":
                    snap = await store.load(agent)
                    stats = dict(getattr(store.backend, "stats", {}))
                    _reply({"seq": snap.seq, "n": snap.data["n"], "stats": stats})
                else:
                    _reply({"bye": True})
                    return
            except Exception as exc:  # reported to the test, which fails on it
                _reply({"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
