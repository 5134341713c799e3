"""Child process for the crash tests: write forever, acknowledge every write.

Usage: python _crash_child.py DB MODE WRITERS AGENTS SEED [FLUSH_SIZE]

Each writer coroutine writes to agent ``agent-{i % AGENTS}`` and, after every write the
store acknowledged (the call returned), prints ``ACK <agent> <seq> <writer> <n>`` on
stdout and flushes it, so the parent knows exactly which writes were acknowledged when
it kills this process with SIGKILL at a random moment. Prints ``READY`` once the store
is open. Never exits on its own.
"""

from __future__ import annotations

import asyncio
import random
import sys

from statekeeper import StateStore


async def writer(store: StateStore, index: int, agents: int, rng: random.Random) -> None:
    agent_id = f"agent-{index % agents}"
    out = sys.stdout
    for n in range(1, 10**9):
        doc = {"w": index, "n": n, "pad": "x" * rng.randrange(0, 300), "tail": list(range(n % 5))}
        choice = rng.random()
        if choice < 0.6 or n == 1:
            result = await store.save(agent_id, doc, fsm_state=f"s{n % 3}")
        else:
            ops = [
                {"op": "replace", "path": "/w", "value": index},
                {"op": "replace", "path": "/n", "value": n},
            ]
            key = f"w{index}-n{n}" if choice > 0.8 else None
            try:
                result = await store.append(
                    agent_id, "step", {"n": n}, ops=ops, idempotency_key=key
                )
            except Exception as exc:  # the agent may not exist yet for a second writer
                if type(exc).__name__ != "AgentNotFound":
                    raise
                continue
        out.write(f"ACK {agent_id} {result.last_seq} {index} {n}\n")
        out.flush()


async def main() -> None:
    path, mode, writers, agents, seed = sys.argv[1:6]
    flush_size = int(sys.argv[6]) if len(sys.argv) > 6 else 100
    rng = random.Random(int(seed))
    store = StateStore(
        f"sqlite:///{path}",
        durability=mode,
        snapshot_every=7,
        flush_size=flush_size,
        flush_interval=0.05,
    )
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    await asyncio.gather(
        *(writer(store, i, int(agents), random.Random(rng.random())) for i in range(int(writers)))
    )


if __name__ == "__main__":
    asyncio.run(main())
