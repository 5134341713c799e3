"""A tenant role cannot hold the audit log's next entry against every governed write.

Every role appends to the log (``sk_allowed(log, 2)``) and holds INSERT on
``sk_events``' columns. Before (found by the second read of h/pgpriv): a tenant role
inserted the log's next entry (log, head + 1) without moving the log's head, in a
transaction it kept open, and every governed write of every tenant, inserting the same
entry, waited on the unique index for that transaction, unbounded (neither the head
row's bound, ``sk_audit_head_lock``, nor the feed's covers that wait): a save with
``audit_lock_timeout=0.3`` still waiting at the test's deadline. Now (migration 26) a
role that is not a log admin inserts an entry only at or below the head its own
transaction sees, so it must move the head first, which locks the head's row: the
others' wait is the bounded one (``AuditLogLocked``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM
from statekeeper.errors import AuditLogLocked

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING
from .test_postgres_row_security import _as, tenant_roles
from .test_postgres_row_security_table_locks import _prepared, _store

#: a deadline, not a wait: the unbounded wait ran until it
_DEADLINE = 10.0

_NEXT = (
    "INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)"
    " VALUES (%s, %s, 'x', 0, 'x', 'x')"
)
_OLD_POLICY = (  # (sql/row_security.sql's block "table", before migration 26)
    "DROP POLICY sk_insert ON {s}.sk_events;"
    " CREATE POLICY sk_insert ON {s}.sk_events FOR INSERT WITH CHECK ({s}.sk_allowed(agent_id, 2))"
)


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlne_", ["alice", "bob"]) as made:
        yield made


def _head(conn: psycopg.Connection, schema: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT head_seq FROM {s}.sk_agents WHERE agent_id = %s").format(
            s=sql.Identifier(schema)
        ),
        (AUDIT_STREAM,),
    ).fetchone()
    assert row is not None
    return int(row[0])


async def _holding_the_next_entry_stalls_nothing(schema: str, names: dict[str, str]) -> None:
    s = sql.Identifier(schema)
    async with _store(schema, names["alice"], "alice", timeout=0.3) as alice:
        await alice.save("acme/support/h0", {"n": 0})
        with psycopg.connect(_as(names["bob"])) as bob:
            head = _head(bob, schema)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):  # (was: inserted)
                bob.execute(sql.SQL(_NEXT).format(s=s), (AUDIT_STREAM, head + 1))
            bob.rollback()
            await asyncio.wait_for(alice.save("acme/support/h1", {"n": 1}), _DEADLINE)
            # the head moved first (its row locked), the entry then allowed: bounded
            head = _head(bob, schema)
            bob.execute(
                sql.SQL("UPDATE {s}.sk_agents SET head_seq = %s WHERE agent_id = %s").format(s=s),
                (head + 1, AUDIT_STREAM),
            )
            bob.execute(sql.SQL(_NEXT).format(s=s), (AUDIT_STREAM, head + 1))
            try:
                with pytest.raises(AuditLogLocked) as caught:
                    await asyncio.wait_for(alice.save("acme/support/h2", {"n": 2}), _DEADLINE)
                assert not caught.value.maybe_applied
            finally:
                bob.rollback()
        await alice.save("acme/support/h2", {"n": 2})


async def test_a_tenant_holding_the_logs_next_entry_stalls_no_save(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    await _holding_the_next_entry_stalls_nothing(schema, names)


async def test_a_store_under_row_security_before_migration_26_is_upgraded(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    await _prepared(schema, names)
    s = sql.Identifier(schema)
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as owner:
        owner.execute(sql.SQL("DELETE FROM {s}.sk_migrations WHERE version = 26").format(s=s))
        owner.execute(sql.SQL(_OLD_POLICY).format(s=s))
    with psycopg.connect(_as(names["bob"])) as bob:  # (what the old policy allowed)
        bob.execute(sql.SQL(_NEXT).format(s=s), (AUDIT_STREAM, _head(bob, schema) + 1))
        bob.rollback()
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as upgraded:
        assert (await upgraded.load("globex/g1")).data == {"n": 1}  # (migrated)
    await _holding_the_next_entry_stalls_nothing(schema, names)
