"""KNOWN, NOT FIXED (found by the second read of h/pgpriv, branch h/readpriv): a tenant
role may insert the audit log's next entry itself (every role appends to the log:
``sk_allowed(log, 2)``, and it holds INSERT on ``sk_events``' columns) without moving
the log's head, in a transaction it keeps open. Every governed write of every tenant
then inserts the same (log, head + 1) and waits on the unique index for that
transaction, unbounded: neither the head row's bound (``sk_audit_head_lock``) nor the
feed's (``sk_feed_mark``) covers the wait, which is the index's. Measured: a save with
``audit_lock_timeout=0.3`` still waiting at the test's deadline.

A fix to weigh: the log's entries inserted only at or below the head the inserting
transaction already moved (the append functions moving the head first, under its
bounded row lock), or the insert's own wait bounded and raised as ``AuditLogLocked``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper.arguments import AUDIT_STREAM
from statekeeper.errors import BackendError

from .test_postgres_row_security import _as, tenant_roles
from .test_postgres_row_security_table_locks import _prepared, _store

#: a deadline, not a wait: the unbounded wait runs until it
_DEADLINE = 10.0


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlne_", ["alice", "bob"]) as made:
        yield made


@pytest.mark.xfail(strict=True, raises=TimeoutError, reason="unbounded: see the module")
async def test_a_tenant_holding_the_logs_next_entry_stalls_no_save_unbounded(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    s = sql.Identifier(schema)
    async with _store(schema, names["alice"], "alice", timeout=0.3) as alice:
        await alice.save("acme/support/h0", {"n": 0})
        with psycopg.connect(_as(names["bob"])) as bob:
            row = bob.execute(
                sql.SQL("SELECT head_seq FROM {s}.sk_agents WHERE agent_id = %s").format(s=s),
                (AUDIT_STREAM,),
            ).fetchone()
            assert row is not None
            bob.execute(
                sql.SQL(
                    "INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)"
                    " VALUES (%s, %s, 'x', 0, 'x', 'x')"
                ).format(s=s),
                (AUDIT_STREAM, row[0] + 1),
            )
            try:
                with pytest.raises(BackendError) as caught:
                    await asyncio.wait_for(alice.save("acme/support/h1", {"n": 1}), _DEADLINE)
                assert not caught.value.maybe_applied
            finally:
                bob.rollback()
