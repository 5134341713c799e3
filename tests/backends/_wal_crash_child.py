"""Child process of the WAL-growth crash test: save forever, acknowledge every save.

Usage: python _wal_crash_child.py DB. Saves a chat state of one agent, ``a``, growing
by one ~300-character message a save (its last 20 kept), at ``synchronous=FULL`` with
``durability="sync"``, and after every save the store acknowledged prints
``{"n": n, "seq": seq}`` on stdout, flushed. Never exits on its own: the parent kills
it with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys

from statekeeper import StateStore
from statekeeper.errors import AgentNotFound


async def main(path: str) -> None:
    store = StateStore(f"sqlite:///{path}?synchronous=FULL", durability="sync")
    start = 0
    with contextlib.suppress(AgentNotFound):  # (a new file: none yet)
        start = (await store.load("a")).data["n"] + 1
    messages: list[str] = []
    out = sys.stdout
    for n in range(start, start + 10**9):
        messages = [*messages[-19:], f"message {n}: " + "x" * 300]
        result = await store.save("a", {"n": n, "messages": messages})
        out.write(json.dumps({"n": n, "seq": result.last_seq}) + "\n")
        out.flush()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
