"""Backend-level lease details beyond the shared contract: the SQLite schema upgrade that
adds ``sk_leases``, and lease expiry on an injected clock."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper.backends import MemoryBackend, SQLiteBackend
from statekeeper.backends.sqlite import SCHEMA_VERSION
from statekeeper.errors import LeaseHeld
from statekeeper.testing import fenced, request


def test_an_older_sqlite_file_gets_the_lease_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"

    async def write() -> None:
        backend = SQLiteBackend(path)
        await backend.append(request("a", 0, 2))
        await backend.close()

    asyncio.run(write())
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("DROP TABLE sk_leases")  # as written by a version without leases
        conn.execute("UPDATE sk_meta SET value = '2' WHERE key = 'schema_version'")

    async def upgraded() -> None:
        backends = [SQLiteBackend(path) for _ in range(3)]  # several openers: idempotent
        lease = await backends[0].acquire_lease("a", "w1", 30)
        assert await backends[1].append(fenced("a", 2, lease.fence)) is not None
        for b in backends:
            await b.close()

    asyncio.run(upgraded())
    with closing(sqlite3.connect(path)) as conn:
        version = conn.execute("SELECT value FROM sk_meta WHERE key='schema_version'").fetchone()
        assert int(version[0]) == SCHEMA_VERSION >= 3
        assert conn.execute("SELECT holder, token FROM sk_leases").fetchall() == [("w1", 1)]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_expiry_follows_the_injected_clock(kind: str, tmp_path: Path) -> None:
    now = [1000.0]
    backend = (
        MemoryBackend(clock=lambda: now[0])
        if kind == "memory"
        else SQLiteBackend(tmp_path / "c.db", clock=lambda: now[0])
    )
    try:
        lease = await backend.acquire_lease("a", "w1", 10)
        assert lease.expires_at == 1010.0
        now[0] = 1009.9
        with pytest.raises(LeaseHeld):
            await backend.acquire_lease("a", "w2", 10)
        now[0] = 1010.0
        taken = await backend.acquire_lease("a", "w2", 10)
        assert taken.token == lease.token + 1
        renewed = await backend.renew_lease("a", "w2", taken.token, 5)
        assert renewed.expires_at == 1015.0
    finally:
        await backend.close()
