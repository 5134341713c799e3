"""A PostgreSQL backup cancelled while its ``COPY`` waits on a lock (a migration's
``ALTER TABLE`` holding the table): the cancellation does not wait for the lock. The
copy's thread is stopped by the server's cancel of that very statement (its own
connection, never one of the pool) and has ended, its connection closed, before the
cancellation goes on; the store's pool is untouched: a save and a backup right after."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup

from ..backends._services import POSTGRES_DSN, fresh_url
from ._point_in_time import keyring

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("postgresql", tmp_path) as url:
        yield url


def _waiting(conn: psycopg.Connection, table: str) -> list[int]:
    """The backends waiting for a lock on ``table``."""
    rows = conn.execute(
        "SELECT pid FROM pg_locks WHERE NOT granted AND relation = %s::regclass", (table,)
    ).fetchall()
    return [pid for (pid,) in rows]


def _alive(conn: psycopg.Connection, pid: int) -> bool:
    got = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
    return bool(got.fetchone()[0])  # type: ignore[index]


async def test_a_backup_whose_copy_waits_on_a_lock_is_cancelled_at_once(
    tmp_path: Path, pg_url: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    async with StateStore(pg_url, keyring=keyring()) as src:
        for i in range(20):
            await src.save(f"a{i:02d}", {"i": i})
        table = f"{src.backend.schema}.sk_events"  # type: ignore[attr-defined]
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as watch:
            locker = psycopg.connect(POSTGRES_DSN)
            try:
                locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                task = asyncio.ensure_future(backup(src, out / "b.skb", bkey))
                deadline = time.monotonic() + _WAIT
                while not (waiting := _waiting(watch, table)):  # the COPY waits
                    assert time.monotonic() < deadline and not task.done()
                    await asyncio.sleep(0)  # (polls the condition; lets the backup run)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), _WAIT)
                # the lock still held: the cancellation did not wait for it, and the
                # copy's backend (that one, cancelled by the server) is gone
                assert not locker.closed and locker.info.transaction_status
                deadline = time.monotonic() + _WAIT  # (its process exits after the close)
                while any(_alive(watch, pid) for pid in waiting):
                    assert time.monotonic() < deadline, waiting
                    await asyncio.sleep(0)
            finally:
                locker.rollback()
                locker.close()
        assert sorted(out.iterdir()) == []
        await src.save("after", {"ok": True})
        assert (await src.load("after")).data == {"ok": True}
        done = await backup(src, out / "again.skb", bkey)
        assert done.agents == 21
