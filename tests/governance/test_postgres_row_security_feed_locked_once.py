"""A governed write meeting the change feed's lock held by another role (``FeedLocked``,
row-level security, migration 25) waits for it ``audit_lock_timeout`` once, as one
meeting the audit log's head locked does (``test_postgres_audit_locked_once.py``).

Every write of events waits for the feed's advisory lock under row security, the audit
log's own appends too. Before (the merge of h/pgpriv): a save that met it then recorded
its failure in the audit log, whose append waited for the same lock again (1.06 s for a
0.5 s bound); six concurrent saves of one process waited twelve bounds (6.2 s), each
queued on the log's turn waiting its own; a batch met it once for the batch, then once
per request sent again alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.errors import FeedLocked
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.records import AppendRequest, AuditMark, RawEvent

from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_audit_locked_once import _counting
from .test_postgres_row_security import _as, tenant_roles
from .test_postgres_row_security_table_locks import _prepared

#: a deadline for a condition, not a wait
_DEADLINE = 30.0


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlfo_", ["alice", "bob"]) as made:
        yield made


def _store(schema: str, role: str) -> StateStore:
    return StateStore(
        f"{_as(role)}?schema={schema}&audit_lock_timeout=0.3",
        keyring=KEYRING,
        principal="alice",
        policy=parse_policy(POLICY_TEXT),
        audit=Audit(),
    )


def _holder(schema: str, role: str) -> psycopg.Connection:
    """Another tenant's connection holding the feed's lock exclusively (until closed)."""
    conn = psycopg.connect(_as(role))
    conn.execute(
        "SELECT pg_advisory_xact_lock(23117, hashtext(%s))", (f"statekeeper-feed:{schema}",)
    )
    return conn


async def test_a_save_meeting_the_locked_feed_waits_for_it_once(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    async with _store(schema, names["alice"]) as store:
        await store.save("acme/support/t0", {"n": 0})
        calls: list[str] = []
        _counting(store, calls)
        holder = _holder(schema, names["bob"])
        try:
            with pytest.raises(FeedLocked) as caught:
                await asyncio.wait_for(store.save("acme/support/t1", {"n": 1}), _DEADLINE)
        finally:
            holder.close()
        assert not caught.value.maybe_applied
        # (was: the failure recorded in the log, whose append met the feed's lock again)
        assert calls == ["together"]
        notes = " ".join(getattr(caught.value, "__notes__", []))
        assert "not recorded" in notes and "failed too" not in notes
        await store.save("acme/support/t1", {"n": 1})  # released: the same write commits
        assert (await store.load("acme/support/t1")).data == {"n": 1}


async def test_saves_queued_behind_a_locked_feed_fail_at_once(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    async with _store(schema, names["alice"]) as store:
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
        holder = _holder(schema, names["bob"])
        try:
            results: list[Any] = await asyncio.wait_for(
                asyncio.gather(
                    *(store.save(f"acme/support/t{i}", {"n": i}) for i in range(1, others + 2)),
                    return_exceptions=True,
                ),
                _DEADLINE,
            )
        finally:
            holder.close()
        assert all(isinstance(r, FeedLocked) and not r.maybe_applied for r in results), results
        assert calls == ["together"]  # (was: 6 waits for the lock, and 6 more)
        for i in range(1, others + 2):  # nothing was written: each write made again
            await store.save(f"acme/support/t{i}", {"n": i})


async def test_a_batch_meets_the_locked_feed_once(roles: tuple[str, dict[str, str]]) -> None:
    schema, names = roles
    await _prepared(schema, names)
    async with _store(schema, names["alice"]) as store:
        await store.save("acme/support/t0", {"n": 0})
        log = AuditLog(store.backend, KEYRING)
        agents = [f"acme/support/b{i}" for i in range(4)]
        requests = [AppendRequest(a, 0, [RawEvent(1, "k", 1.0, b"x", bytes(32))]) for a in agents]
        marks = [[AuditMark("save", "alice", a, 1, 1)] for a in agents]
        calls: list[str] = []
        _counting(store, calls)
        holder = _holder(schema, names["bob"])
        try:
            results = await asyncio.wait_for(log.write_with(requests, marks), _DEADLINE)
        finally:
            holder.close()
        assert all(isinstance(r, FeedLocked) and not r.maybe_applied for r in results), results
        assert len({id(r) for r in results}) == len(results)  # (one each: notes, tracebacks)
        assert calls == ["together"]  # (was: once for the batch, then once per request)
        assert [await store.backend.head(a) for a in agents] == [0, 0, 0, 0]
        again = await log.write_with(requests, marks)  # nothing was written: made again
        assert not any(isinstance(r, BaseException) for r in again), again
