"""What ``idle_transaction_timeout`` costs on PostgreSQL: the statements the client sends
(every ``AsyncCursor.execute`` of psycopg — ``AsyncConnection.execute`` goes
through it — the pool's ``configure`` hook included; ``BEGIN``/``COMMIT`` of a
transaction block are not counted, the same on both sides) for a run of
single appends, ``append_together`` calls and feed reads, counted client-side.

The timeout is set once per new connection (``SET idle_in_transaction_session_timeout``
in the pool's ``configure`` hook), so an operation sends what it sent before; the run
shows one more statement per connection the pool made, none per operation.

A/B in the same minutes: run it with ``PYTHONPATH=<other tree>/src`` and without,
alternately; under ``perf stat -e instructions`` for the process's instructions."""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections import Counter
from typing import Any

import psycopg

import _common  # noqa: F401  (puts the measured tree's src/ on the path)
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.testing._contract import request

PG = "postgresql://postgres@127.0.0.1:5432/test"

sent: Counter[str] = Counter()


def _count(cls: Any) -> None:
    real = cls.execute

    async def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.decode() if isinstance(query, bytes) else str(query)
        sent["SET idle_in_transaction" if "idle_in_transaction" in text else "other"] += 1
        return await real(self, query, *args, **kwargs)

    cls.execute = execute


async def main(n: int) -> None:
    _count(psycopg.AsyncCursor)  # (AsyncConnection.execute goes through it)
    backend = PostgresBackend(PG, schema=f"sk_bench_{uuid.uuid4().hex[:8]}")
    try:
        await backend.open()
        print(f"statements opening the backend  {dict(sent)}")
        sent.clear()
        for i in range(n):
            await backend.append(request(f"s{i}", 0))
        single = sum(sent.values())
        sent.clear()
        for i in range(n):
            await backend.append_together([request(f"t{i}", 0), request(f"u{i}", 0)])
        together = sum(sent.values())
        sent.clear()
        for _ in range(n):
            await backend.read_feed(0, 10)
        feed = sum(sent.values())
        print(f"statements per append           {single / n:.3f}")
        print(f"statements per append_together  {together / n:.3f}")
        print(f"statements per read_feed        {feed / n:.3f}")
        stats = backend._pool.get_stats()
        print(f"pool connections made           {stats.get('connections_num')}")
    finally:
        await backend.drop_all()
        await backend.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=500, help="operations of each kind")
    asyncio.run(main(parser.parse_args().n))
