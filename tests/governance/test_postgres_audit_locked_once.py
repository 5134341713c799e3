"""A write meeting the audit log's head locked (``AuditLogLocked``, migration 24) waits
for it ``audit_lock_timeout`` once, not once per request and per queued call.

Before: a save that timed out then recorded its failure in the same locked log (a
second wait); the writes of one process queued behind it on the log's own lock each
waited their full timeout in turn (six concurrent saves: twelve waits); and a batch
(group commit) met it once for the batch, then once per request sent again alone.
With the default 10 s, a caller waited minutes for the error the option bounds at 10 s.
Now a failure that is the log's lock is not recorded in that log (a note says so), the
calls queued behind a write that met the lock fail at once (nothing written), and a
batch's requests all fail with it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM
from statekeeper.errors import AuditLogLocked
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.records import AppendRequest, AuditMark, RawEvent

from ..backends._services import POSTGRES_DSN, fresh_url
from .conftest import KEYRING, POLICY_TEXT

#: a deadline for a condition, not a wait
_DEADLINE = 30.0


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("postgresql", tmp_path) as made:
        yield made


def _store(url: str, **options: Any) -> StateStore:
    return StateStore(
        f"{url}&audit_lock_timeout=0.3",
        keyring=KEYRING,
        principal="ops",
        policy=parse_policy(POLICY_TEXT),
        audit=Audit(),
        **options,
    )


def _holder(url: str) -> psycopg.Connection:
    """A connection holding the log's head row locked (until its rollback)."""
    schema = url.split("schema=")[1]
    conn = psycopg.connect(POSTGRES_DSN)
    conn.execute(
        sql.SQL("SELECT 1 FROM {}.sk_agents WHERE agent_id = %s FOR UPDATE").format(
            sql.Identifier(schema)
        ),
        (AUDIT_STREAM,),
    )
    return conn


def _counting(store: StateStore, calls: list[str], before: Any = None) -> None:
    """Count the store's engine writes (``before``: awaited ahead of the first)."""
    backend = store.backend
    together, append = backend.append_together, backend.append

    async def counted_together(*args: Any, **kw: Any) -> Any:
        calls.append("together")
        if before is not None and len(calls) == 1:
            await before()
        return await together(*args, **kw)

    async def counted_append(*args: Any, **kw: Any) -> Any:
        calls.append("append")
        return await append(*args, **kw)

    backend.append_together = counted_together  # type: ignore[method-assign]
    backend.append = counted_append  # type: ignore[method-assign]


async def test_a_save_meeting_the_locked_log_waits_for_it_once(url: str) -> None:
    async with _store(url) as store:
        await store.save("acme/support/t0", {"n": 0})
        calls: list[str] = []
        _counting(store, calls)
        holder = _holder(url)
        try:
            with pytest.raises(AuditLogLocked) as caught:
                await asyncio.wait_for(store.save("acme/support/t1", {"n": 1}), _DEADLINE)
        finally:
            holder.close()
        assert not caught.value.maybe_applied
        # (was: the failure recorded in the locked log too, a second wait)
        assert calls == ["together"]
        assert "not recorded" in " ".join(getattr(caught.value, "__notes__", []))
        await store.save("acme/support/t1", {"n": 1})  # released: the same write commits
        assert (await store.load("acme/support/t1")).data == {"n": 1}
        assert (await AuditLog(store.backend, KEYRING).verify()).ok


async def test_saves_queued_behind_a_locked_log_fail_at_once(url: str) -> None:
    async with _store(url) as store:
        await store.save("acme/support/t0", {"n": 0})
        log = store._atomic_sink  # type: ignore[attr-defined]
        assert log is not None
        others = 5

        async def queued() -> None:  # the other saves wait their turn on the log
            deadline = time.monotonic() + _DEADLINE
            while len(getattr(log._lock, "_waiters", None) or ()) < others:
                assert time.monotonic() < deadline, "the saves never queued"
                await asyncio.sleep(0)

        calls: list[str] = []
        _counting(store, calls, queued)
        holder = _holder(url)
        try:
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(store.save(f"acme/support/t{i}", {"n": i}) for i in range(1, others + 2)),
                    return_exceptions=True,
                ),
                _DEADLINE,
            )
        finally:
            holder.close()
        assert all(isinstance(r, AuditLogLocked) and not r.maybe_applied for r in results), results
        assert calls == ["together"]  # (was: 6 waits for the lock, and 6 more)
        for i in range(1, others + 2):  # nothing was written: each write made again
            await store.save(f"acme/support/t{i}", {"n": i})
        assert (await AuditLog(store.backend, KEYRING).verify()).ok


async def test_a_batch_meets_the_locked_log_once(url: str) -> None:
    async with _store(url) as store:
        await store.save("acme/support/t0", {"n": 0})
        log = AuditLog(store.backend, KEYRING)
        agents = [f"acme/support/b{i}" for i in range(4)]
        requests = [AppendRequest(a, 0, [RawEvent(1, "k", 1.0, b"x", bytes(32))]) for a in agents]
        marks = [[AuditMark("save", "ops", a, 1, 1)] for a in agents]
        calls: list[str] = []
        _counting(store, calls)
        holder = _holder(url)
        try:
            results = await asyncio.wait_for(log.write_with(requests, marks), _DEADLINE)
        finally:
            holder.close()
        assert all(isinstance(r, AuditLogLocked) and not r.maybe_applied for r in results), results
        assert len({id(r) for r in results}) == len(results)  # (one each: notes, tracebacks)
        assert calls == ["together"]  # (was: once for the batch, then once per request)
        assert [await store.backend.head(a) for a in agents] == [0, 0, 0, 0]
        again = await log.write_with(requests, marks)  # nothing was written: made again
        assert not any(isinstance(r, BaseException) for r in again), again
        assert (await log.verify()).ok
