"""Under row-level security, a write that claims a head row (inserted at 0, its first
lock: migrations 20, 21) and does not take it over deletes it again, also the audit
log's and a namespace's tombstone stream's: none is left committed.

A role that is not a log admin may not delete those two kinds of head row (policy
sk_delete: a delete's notice must stay), so the claim stayed: a batch creating a
tenant's tombstone stream with a refused fence, a fenced creation of it refused alone,
an absence check of it — each committed a head row at 0 with no stream, listed by the
backend as a stream of no event (the store's own listings hide these streams). Now a
head row at 0 is the role's to delete (migration 22). Real roles on the shared server
(unique, dropped afterwards); the store's next creation of the stream still works.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import LeaseLost
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres, stop_enforcing_in_postgres
from statekeeper.records import AppendRequest, AppendResult, StreamChange
from statekeeper.store import feed_deletes
from statekeeper.testing import request

from ..backends._services import POSTGRES_DSN
from ..backends.test_postgres_together_lock_order import _waiting_on
from .conftest import KEYRING
from .test_postgres_row_security import _as, tenant_roles

POLICY = parse_policy(
    """\
[principals.a-admin]
admin = ["tenant-a/**"]
"""
)

TOMB = feed_deletes.stream_of_namespace("tenant-a")


@pytest.fixture
async def tenant(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """(schema, the tenant's role): ``tenant-a/t0`` stored, the policy enforced."""
    with tenant_roles(tmp_path, "sk_rlcl_", ["a-admin"]) as (schema, roles):
        async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
            await owner.save("tenant-a/t0", {"n": 0})
        role = roles["a-admin"]
        await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles={"a-admin": role})
        try:
            yield schema, role
        finally:
            await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [role])


def _heads(schema: str) -> dict[str, int]:
    """Every head row, as the tables' owner reads them."""
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        rows = conn.execute(f'SELECT agent_id, head_seq FROM "{schema}".sk_agents').fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


async def _next_creation_works(schema: str, role: str) -> None:
    """The tenant's delete writes its tombstone: the stream created at 1."""
    url = f"{_as(role)}?schema={schema}"
    async with StateStore(
        url, keyring=KEYRING, principal="a-admin", policy=POLICY, audit=Audit()
    ) as st:
        assert await st.delete("tenant-a/t0")
        assert await st.list_agents() == []
    assert _heads(schema)[TOMB] == 1


def _fenced(agent_id: str) -> AppendRequest:
    return dataclasses.replace(request(agent_id, 0), fence=("nobody", 1))


async def test_a_batch_whose_new_tombstone_stream_is_refused_leaves_no_head_row(
    tenant: tuple[str, str],
) -> None:
    schema, role = tenant
    backend = PostgresBackend(_as(role), schema=schema)
    await backend.open()
    try:
        out = await backend.append_batch([_fenced(TOMB), request("tenant-a/x", 0)])
        assert isinstance(out[0], LeaseLost), out
        assert out[1] == AppendResult("tenant-a/x", 1, 1)
        assert TOMB not in _heads(schema)  # (was: at 0, committed)
        assert [a.agent_id for a in await backend.list_agents()] == ["tenant-a/t0", "tenant-a/x"]
        assert await backend.count_agents() == 2
    finally:
        await backend.close()
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:  # (its raw event: not the store's)
        conn.execute(f'DELETE FROM "{schema}".sk_events WHERE agent_id = %s', ("tenant-a/x",))
        conn.execute(f'DELETE FROM "{schema}".sk_agents WHERE agent_id = %s', ("tenant-a/x",))
    await _next_creation_works(schema, role)


async def test_a_fenced_creation_refused_alone_leaves_no_head_row(
    tenant: tuple[str, str],
) -> None:
    schema, role = tenant
    backend = PostgresBackend(_as(role), schema=schema)
    await backend.open()
    try:
        with pytest.raises(LeaseLost):
            await backend.append(_fenced(TOMB))
        assert TOMB not in _heads(schema)  # (was: at 0, committed)
        assert [a.agent_id for a in await backend.list_agents()] == ["tenant-a/t0"]
    finally:
        await backend.close()
    await _next_creation_works(schema, role)


async def test_an_absence_check_of_a_tombstone_stream_leaves_no_head_row(
    tenant: tuple[str, str],
) -> None:
    schema, role = tenant
    backend = PostgresBackend(_as(role), schema=schema)
    await backend.open()
    try:
        out = await backend.append_together(
            [request("tenant-a/y", 0)], [StreamChange(TOMB, absent=True)]
        )
        assert out == [AppendResult("tenant-a/y", 1, 1)]
        assert TOMB not in _heads(schema)  # (was: at 0, committed)
    finally:
        await backend.close()


async def test_a_store_enforced_before_gets_the_policy_as_it_upgrades(
    tenant: tuple[str, str],
) -> None:
    """Row security installed by a version before migration 22: the migration gives the
    head rows at 0 their policy (the owner's next open), and a refused creation of a
    tombstone stream leaves nothing."""
    schema, role = tenant
    s = f'"{schema}"'
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:  # (the policy before)
        conn.execute(f"DROP POLICY sk_delete ON {s}.sk_agents")
        conn.execute(
            f"CREATE POLICY sk_delete ON {s}.sk_agents FOR DELETE USING ("
            f" {s}.sk_allowed(agent_id, 2) AND agent_id <> chr(1) || 'sk-audit/log'"
            f" AND (NOT {s}.sk_tombstones(agent_id) OR {s}.sk_log_admin()))"
        )
        conn.execute(f"DELETE FROM {s}.sk_migrations WHERE version >= 22")  # (a store at 21)
    owner = PostgresBackend(POSTGRES_DSN, schema=schema)
    await owner.open()  # (migrates)
    await owner.close()
    backend = PostgresBackend(_as(role), schema=schema)
    await backend.open()
    try:
        with pytest.raises(LeaseLost):
            await backend.append(_fenced(TOMB))
        assert TOMB not in _heads(schema)
    finally:
        await backend.close()


async def test_a_tenant_deletes_no_tombstone_row_a_creation_took_over_meanwhile(
    tenant: tuple[str, str],
) -> None:
    """The tenant's delete of its tombstone stream's head row while at 0 (a claim left),
    waiting on a creation taking that row over: the creation commits (head 1), and the
    delete, its policy checked again on the row as committed (a head past 0), deletes
    nothing - the stream and its notice stay. Nor may it delete another namespace's row
    at 0."""
    schema, role = tenant
    s = f'"{schema}"'
    other_ns = feed_deletes.stream_of_namespace("tenant-b")
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:  # (claims left, at 0)
        for agent in (TOMB, other_ns):
            conn.execute(
                f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
                " VALUES (%s, 0, 0, 0)",
                (agent,),
            )
    async with (
        await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN) as creation,  # (the owner's)
        await psycopg.AsyncConnection.connect(_as(role), autocommit=True) as own,
    ):
        # (a tenant role deletes through the delete function: migration 25)
        delete = f"SELECT 1 FROM {s}.sk_del_agents(current_user, ARRAY[%s], NULL, NULL)"
        cur = await own.execute(delete, (other_ns,))
        assert cur.rowcount == 0  # (not its namespace: not even seen)
        await creation.execute(
            f"UPDATE {s}.sk_agents SET head_seq = 1 WHERE agent_id = %s AND head_seq = 0",
            (TOMB,),
        )
        deleting = asyncio.ensure_future(own.execute(delete, (TOMB,)))
        await _waiting_on(watch, creation.info.backend_pid)
        await creation.commit()
        cur = await asyncio.wait_for(deleting, timeout=60)
        assert cur.rowcount == 0
    assert _heads(schema)[TOMB] == 1
    assert _heads(schema)[other_ns] == 0
