"""A client frozen inside a transaction of several statements (SIGSTOP, a paused VM, a
long GC pause, a partition) no longer stalls every other process's change feed, nor
the writes to its agents, until its TCP connection dies: the server ends its session
after ``idle_transaction_timeout`` (``idle_in_transaction_session_timeout``) and rolls
its transaction back; the frozen client, once it continues, is told its write failed
and was not stored.

Before, the frozen ``append_together`` kept the feed's advisory lock (and its agents'
row locks): the frontier never passed its position, so an event another process
committed after it never reached a subscriber, and an append to the same agent waited
for ever. The ``HANG`` bounds below only make the old code fail instead of hanging the
suite: they are far beyond the second asked for.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import statekeeper
from statekeeper.backends import PostgresBackend
from statekeeper.errors import ConfigurationError
from statekeeper.testing import request

from ._services import PrivatePostgres, private_postgres

HANG = 90  # seconds: "never" on the old code
IDLE = "idle_transaction_timeout=1"

#: the frozen writer: its append_together stops inside the transaction, after the
#: events' INSERT took the feed lock, until its stdin says go on
_CHILD = """
import asyncio, json, sys
from statekeeper.backends import PostgresBackend
from statekeeper.backends.postgres import appends
from statekeeper.errors import StatekeeperError
from statekeeper.testing import request

real = appends.filtered_at_head

def held(req, row):
    appends.filtered_at_head = real
    print("holding", flush=True)
    sys.stdin.readline()
    return real(req, row)

async def main():
    backend = PostgresBackend.from_url(sys.argv[1])
    try:
        await backend.append(request("w", 0))  # opened: the pool's connections made
        appends.filtered_at_head = held
        try:
            await backend.append_together([request("a", 1, timestamp=111.0)])
        except StatekeeperError as exc:
            out = {"error": type(exc).__name__, "maybe_applied": exc.maybe_applied}
        else:
            out = {"error": None}
        print(json.dumps(out), flush=True)
    finally:
        await backend.close()

asyncio.run(main())
"""


@pytest.fixture
def server() -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        yield server


async def feed_lock_held(server: PrivatePostgres) -> None:
    """Wait until a session idle in its transaction (the child's) holds the feed lock."""
    async with await psycopg.AsyncConnection.connect(server.dsn, autocommit=True) as conn:
        for _ in range(HANG * 10):
            cur = await conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                " WHERE l.locktype = 'advisory' AND l.classid = 23117 AND l.granted"
                " AND a.state = 'idle in transaction'"
            )
            row = await cur.fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.1)
    raise AssertionError("the child never held the feed lock")


@pytest.mark.slow  # (a private server and a frozen child process)
async def test_a_writer_frozen_in_its_transaction_stalls_no_feed_nor_write(
    server: PrivatePostgres,
) -> None:
    url = f"{server.dsn}?{IDLE}"
    backend = PostgresBackend.from_url(url)
    await backend.append(request("a", 0))
    src = str(Path(statekeeper.__file__).parents[1])
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CHILD,
        url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": src},
    )
    assert child.stdin is not None and child.stdout is not None
    stopped = False
    try:
        line = await asyncio.wait_for(child.stdout.readline(), HANG)
        assert line.strip() == b"holding", line
        await feed_lock_held(server)
        os.kill(child.pid, signal.SIGSTOP)  # frozen holding the lock, idle in its transaction
        stopped = True

        # the feed delivers what another process committed after the frozen writer's
        # position...
        await backend.append(request("b", 0))

        async def delivered() -> list[tuple[str, int]]:
            while True:
                records = await backend.read_feed(0)
                got = [(r.agent_id, r.event.seq) for r in records]
                if ("b", 1) in got:
                    return got
                await backend.wait_feed(records[-1].position if records else 0, 0.5)

        assert await asyncio.wait_for(delivered(), HANG) == [("a", 1), ("w", 1), ("b", 1)]
        # ...and its write to the frozen writer's agent completes
        await asyncio.wait_for(backend.append(request("a", 1)), HANG)

        # the frozen writer continues: told its write failed, and nothing of it stored
        os.kill(child.pid, signal.SIGCONT)
        stopped = False
        child.stdin.write(b"\n")
        await child.stdin.drain()
        answer = json.loads(await asyncio.wait_for(child.stdout.readline(), HANG))
        assert answer == {"error": "BackendError", "maybe_applied": False}
        events = await backend.read("a")
        assert [(e.seq, e.timestamp) for e in events] == [(1, 1.0), (2, 2.0)]
    finally:
        if stopped:
            os.kill(child.pid, signal.SIGCONT)
        if child.returncode is None:
            child.kill()
        await child.wait()
        await backend.close()


def test_idle_transaction_timeout_is_read_from_the_url() -> None:
    PostgresBackend.from_url("postgresql://u@h/db?idle_transaction_timeout=2.5")
    PostgresBackend.from_url("postgresql://u@h/db?idle_transaction_timeout=0")  # off
    with pytest.raises(ConfigurationError, match="idle_transaction_timeout"):
        PostgresBackend.from_url("postgresql://u@h/db?idle_transaction_timeout=-1")
