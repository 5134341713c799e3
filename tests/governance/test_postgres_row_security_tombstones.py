"""Under row-level security a tenant's delete leaves its feed tombstone, in the same
commit, and a tenant cannot forge or erase the tombstones of another tenant's agents.

Before, a store on a schema under row-level security wrote no tombstone at all (a
tenant's role may write no stream outside its namespaces, the store's one tombstone
stream neither): a deleted agent stayed in every consumer's read model for ever. Now
each namespace has its own tombstone stream, which the policy gives exactly the roles
that may write (append) or read the namespace's agents, and no tenant may rewrite or
delete; a reader refuses a tombstone naming an agent outside its stream's namespace.
Real roles on the shared server (unique, dropped afterwards)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied, IntegrityError, StatekeeperError
from statekeeper.feed import ProjectionRunner
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.store import feed_deletes
from statekeeper.store.feed_deletes import AGENT_DELETED

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy(
    """\
[principals.a-admin]
admin = ["tenant-a/**"]

[principals.b-writer]
write = ["tenant-b/**"]

[principals.ops]
admin = ["**"]
"""
)


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, str, str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rltb_")
    suffix = uuid.uuid4().hex[:8]
    a_role, b_role, ops = f"sk_rltb_a_{suffix}", f"sk_rltb_b_{suffix}", f"sk_rltb_o_{suffix}"
    _pg(*(f'CREATE ROLE "{r}" LOGIN' for r in (a_role, b_role, ops)))
    try:
        yield schema, a_role, b_role, ops
    finally:
        drop_schema(schema)
        _pg(
            f'DROP OWNED BY "{a_role}", "{b_role}", "{ops}"',
            *(f'DROP ROLE "{r}"' for r in (a_role, b_role, ops)),
        )


def _open(schema: str, principal: str, role: str) -> StateStore:
    return StateStore(
        f"{_as(role)}?schema={schema}", keyring=KEYRING, principal=principal,
        policy=POLICY, audit=Audit(),
    )  # fmt: skip


async def test_a_tenants_delete_leaves_its_tombstone_under_row_security(
    roles: tuple[str, str, str, str], tmp_path: Path
) -> None:
    schema, a_role, b_role, ops_role = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        for agent_id in ["tenant-a/t1", "tenant-a/eu/t2", "tenant-b/u1"]:
            for n in range(2):
                await owner.save(agent_id, {"n": n})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, POLICY, roles={"a-admin": a_role, "b-writer": b_role, "ops": ops_role}
    )
    try:
        async with _open(schema, "ops", ops_role) as ops:
            async with ProjectionRunner(ops, tmp_path / "rm.db") as runner:
                await runner.catch_up()
                async with _open(schema, "a-admin", a_role) as tenant_a:
                    assert await tenant_a.delete("tenant-a/t1")
                    assert await tenant_a.delete("tenant-a/eu/t2")
                    assert await tenant_a.list_agents() == []  # the tombstones stay hidden
                    # the tenant's own consumer sees its tombstones (and nothing else's)
                    mine = [c async for c in tenant_a.subscribe(stop_at_head=True)]
                    assert [(c.agent_id, c.deleted) for c in mine if c.deleted] == [
                        ("tenant-a/t1", True),
                        ("tenant-a/eu/t2", True),
                    ]
                await runner.catch_up()
                rows = await runner.query("SELECT agent_id FROM agent_states ORDER BY agent_id")
                assert [r[0] for r in rows] == ["tenant-b/u1"]  # (all three, before)
                tombs = [c async for c in ops.subscribe(stop_at_head=True) if c.deleted]
                assert [(c.agent_id, c.seq, c.type) for c in tombs] == [
                    ("tenant-a/t1", 2, AGENT_DELETED),
                    ("tenant-a/eu/t2", 2, AGENT_DELETED),
                ]
                # the delete and its tombstone are one commit: the same transaction id
                import psycopg

                with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
                    rows_ = conn.execute(
                        f"SELECT agent_id, xmin::text FROM {schema}.sk_events"
                        " WHERE agent_id LIKE %s",
                        ("\x01sk-feed/deleted%",),
                    ).fetchall()
                    logged = conn.execute(
                        f"SELECT xmin::text FROM {schema}.sk_events WHERE agent_id = %s",
                        ("\x01sk-audit/log",),
                    ).fetchall()
                assert {r[1] for r in rows_} <= {r[0] for r in logged}  # with its entry
                assert {r[0] for r in rows_} == {
                    feed_deletes.stream_of_namespace("tenant-a"),
                    feed_deletes.stream_of_namespace("tenant-a/eu"),
                }
            async with _open(schema, "ops", ops_role) as again:
                assert await again.count_agents() == 1
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [a_role, b_role, ops_role])


async def test_a_tenant_cannot_forge_or_erase_another_tenants_tombstones(
    roles: tuple[str, str, str, str],
) -> None:
    schema, a_role, b_role, ops_role = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        await owner.save("tenant-a/t1", {"n": 0})
        await owner.save("tenant-b/u1", {"n": 0})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, POLICY, roles={"a-admin": a_role, "b-writer": b_role, "ops": ops_role}
    )
    try:
        async with _open(schema, "a-admin", a_role) as tenant_a:
            assert await tenant_a.delete("tenant-a/t1")
        async with _open(schema, "b-writer", b_role) as tenant_b:
            codec, backend = tenant_b.codec, tenant_b.backend
            # tenant b writes into tenant a's tombstone stream: refused by the server
            stream_a = feed_deletes.stream_of_namespace("tenant-a")
            with pytest.raises(StatekeeperError):
                await backend.append(_forged(codec, stream_a, 1, "tenant-a/x"))
            # ...and erases none of its rows
            raw = PostgresBackend(_as(b_role), schema=schema, max_size=1)
            try:
                assert await raw.head(stream_a) == 0  # not even readable
                with pytest.raises(AccessDenied):
                    await raw.delete_agent(stream_a)
            finally:
                await raw.close()
            # a tombstone of tenant a's agent in tenant b's own stream: refused on read
            stream_b = feed_deletes.stream_of_namespace("tenant-b")
            await backend.append(_forged(codec, stream_b, 0, "tenant-a/t2"))
        async with _open(schema, "ops", ops_role) as ops:
            assert await ops.backend.head(stream_a) == 1  # tenant a's tombstone stands
            with pytest.raises(IntegrityError, match="outside"):
                _ = [c async for c in ops.subscribe(stop_at_head=True)]
        # the tenant may append to its own stream, but rewrite or delete none of it
        tenant_raw = PostgresBackend(_as(a_role), schema=schema, max_size=1)
        try:
            assert await tenant_raw.head(stream_a) == 1
            with pytest.raises(AccessDenied):
                await tenant_raw.delete_agent(stream_a)
            assert await tenant_raw.head(stream_a) == 1
        finally:
            await tenant_raw.close()
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [a_role, b_role, ops_role])


def _forged(codec: object, stream: str, base: int, agent_id: str) -> AppendRequest:
    from statekeeper.codec import ZERO_LINK

    ts = time.time()
    body = {"agent_id": agent_id, "head": 1, "forgotten": False}
    sealed = codec.encode(stream, base + 1, AGENT_DELETED, ts, body, ZERO_LINK)  # type: ignore[attr-defined]
    raw = RawEvent(base + 1, AGENT_DELETED, ts, sealed.payload, sealed.checksum)
    return AppendRequest(stream, base, [raw])
