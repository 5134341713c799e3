"""psycopg 3.1 (pyproject's range starts at 3.1.18) has no ``Connection.cancel_safe``
(new in 3.2): the PostgreSQL copy's stop called it all the same, its thread died of an
``AttributeError`` and nothing was cancelled: a backup whose ``COPY`` waits on a lock
waited for the lock. Now psycopg 3.1's cancel is sent instead (from the same thread
of its own). psycopg 3.1 is stood in for by removing ``cancel_safe``."""

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


async def test_a_copy_waiting_on_a_lock_is_cancelled_on_psycopg_3_1(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(psycopg.Connection, "cancel_safe")
    bkey = BackupKey(os.urandom(32))
    out = tmp_path / "out"
    out.mkdir()
    async with StateStore(pg_url, keyring=keyring()) as src:
        for i in range(5):
            await src.save(f"a{i}", {"i": i})
        table = f"{src.backend.schema}.sk_events"  # type: ignore[attr-defined]
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as watch:
            locker = psycopg.connect(POSTGRES_DSN)
            try:
                locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                task = asyncio.ensure_future(backup(src, out / "b.skb", bkey))
                deadline = time.monotonic() + _WAIT
                query = (
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass"
                )
                while not watch.execute(query, (table,)).fetchone()[0]:  # type: ignore[index]
                    assert time.monotonic() < deadline and not task.done()
                    await asyncio.sleep(0)  # (polls the condition; lets the backup run)
                task.cancel()
                # (before: the COPY waited for the lock, so the cancellation did)
                done, _ = await asyncio.wait({task}, timeout=_WAIT)
                assert done, "the cancel did not reach the server"
                assert task.cancelled()
                assert not locker.closed and locker.info.transaction_status
            finally:
                locker.rollback()
                locker.close()
        assert sorted(out.iterdir()) == []
