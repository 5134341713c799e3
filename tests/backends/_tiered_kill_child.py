"""Child process for ``test_tiered_killed_steps.py``: demote (or bring back) agent ``a``
of the tiered store in DIR (SQLite durable and cold tiers), SIGKILLing itself just
before its K-th call that changes a tier — a condition, not a time.

Usage: python _tiered_kill_child.py DIR demote|rehydrate K. Prints the step it was
killed before (``kill before durable.append``), or ``done`` when there were fewer than
K such calls (it finished).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend

_WRITES = (
    "append",
    "append_batch",
    "append_together",
    "delete_agent",
    "delete_agent_at",
    "save_snapshot",
)


def _killing(backend: SQLiteBackend, tier: str, calls: list[int], k: int) -> SQLiteBackend:
    for name in _WRITES:
        call = getattr(backend, name)

        def hooked(*args: Any, _call: Any = call, _name: str = name, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] == k:
                sys.stdout.write(f"kill before {tier}.{_name}\n")
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return _call(*args, **kwargs)

        setattr(backend, name, hooked)
    return backend


async def main(where: str, op: str, k: int) -> None:
    calls = [0]
    durable = _killing(SQLiteBackend(f"{where}/durable.db"), "durable", calls, k)
    cold = _killing(SQLiteBackend(f"{where}/cold.db"), "cold", calls, k)
    backend = TieredBackend(durable, cold=cold, idle_after=1)
    try:
        if op == "demote":
            assert await backend.demote("a")
        else:
            assert len(await backend.read("a")) == 4
    finally:
        await backend.close()
    print("done")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
