"""Wall time per ``delete_agent`` / ``delete_agent_at`` on PostgreSQL and Redis: what the
exact retry after a lost reply costs (PostgreSQL: ``SELECT txid_current()`` in the
delete's transaction; Redis: the receipt ``SET`` in the delete script).

A/B in the same minutes: run it with ``PYTHONPATH=<other tree>/src`` and without,
alternately (the servers are shared: compare medians of several runs)."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.redis import RedisBackend
from statekeeper.testing._contract import request

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


async def per_call(backend: Any, n: int, conditional: bool) -> float:
    """Microseconds per delete of ``n`` two-event agents."""
    ids = [f"b{i}" for i in range(n)]
    for agent_id in ids:
        await backend.append(request(agent_id, 0, 2))
    started = time.perf_counter()
    for agent_id in ids:
        if conditional:
            await backend.delete_agent_at(agent_id, 2)
        else:
            await backend.delete_agent(agent_id)
    return (time.perf_counter() - started) / n * 1e6


async def main(n: int) -> None:
    tag = uuid.uuid4().hex[:8]
    pg = PostgresBackend(PG, schema=f"sk_bench_{tag}")
    rd = RedisBackend(REDIS, prefix=f"skbench{tag}:")
    try:
        for name, backend in (("postgresql", pg), ("redis", rd)):
            for conditional in (False, True):
                what = "delete_agent_at" if conditional else "delete_agent"
                print(f"{name} {what}\t{await per_call(backend, n, conditional):.0f} us")
    finally:
        await rd.drop_all()
        await rd.close()
        await pg.drop_all()
        await pg.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300, help="agents deleted per measure")
    asyncio.run(main(parser.parse_args().n))
