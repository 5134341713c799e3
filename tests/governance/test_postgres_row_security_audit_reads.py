"""Under row-level security a tenant's database role appends to the shared audit log but
reads none of its entries: not through any table it can SELECT (events, snapshots, the
head rows), not through the change feed, and not by decrypting what it can read with the
audit key its process holds. A writer chains on the head's link alone (left by the
append before it, sealed under the audit key). The log stays whole: the owner and the
roles of admins on ``**`` read and verify every tenant's entries, and concurrent
appenders of several roles lose none. (Before: every role read every entry, and its
process decrypted the other tenants' agent ids, principals and operations.)"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.codec import Codec
from statekeeper.errors import StatekeeperError
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy(
    """\
[principals.a]
write = ["tenant-a/**"]

[principals.b]
write = ["tenant-b/**"]

[principals.ops]
admin = ["**"]
"""
)


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlar_")
    suffix = uuid.uuid4().hex[:8]
    roles = {p: f"sk_rlar_{p}_{suffix}" for p in ("a", "b", "ops")}
    _pg(*(f'CREATE ROLE "{r}" LOGIN' for r in roles.values()))
    try:
        yield schema, roles
    finally:
        drop_schema(schema)
        names = ", ".join(f'"{r}"' for r in roles.values())
        _pg(f"DROP OWNED BY {names}", *(f'DROP ROLE "{r}"' for r in roles.values()))


def _pg_rows(statement: sql.Composed, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        return conn.execute(statement, args).fetchall()


def _as_url(role: str, schema: str) -> str:
    return f"{_as(role)}?schema={schema}"


def _tenant(principal: str, roles: dict[str, str], schema: str) -> StateStore:
    return StateStore(
        _as_url(roles[principal], schema),
        keyring=KEYRING,
        principal=principal,
        policy=POLICY,
        audit=Audit(),
    )


def _plaintexts(role: str, schema: str) -> list[bytes]:
    """Everything ``role`` can SELECT from the store's tables, opened with the audit key
    where it opens (the raw bytes too, in case something is stored in the clear)."""
    codec = Codec(keyring=KEYRING)
    s = sql.Identifier(schema)
    out: list[bytes] = []
    with psycopg.connect(_as(role), autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT agent_id, seq, kind, ts, payload, checksum FROM {s}.sk_events").format(
                s=s
            )
        ).fetchall()
        rows += conn.execute(
            sql.SQL(
                "SELECT agent_id, seq, 'snapshot', ts, payload, checksum FROM {s}.sk_snapshots"
            ).format(s=s)
        ).fetchall()
        for table in ("sk_agents", "sk_idempotency", "sk_leases", "sk_markers"):
            for row in conn.execute(
                sql.SQL("SELECT * FROM {s}.{t}").format(s=s, t=sql.Identifier(table))
            ):
                out.append(repr(row).encode())
    for agent_id, seq, kind, ts, payload, checksum in rows:
        out.append(repr((agent_id, seq, kind, ts)).encode() + bytes(payload))
        with contextlib.suppress(StatekeeperError):  # not sealed under the audit key
            out.append(codec.open(agent_id, seq, kind, ts, bytes(payload), bytes(checksum)).body)
    return out


@pytest.mark.parametrize("layout", ["", "&partitions=4"])
async def test_a_tenant_role_appends_to_the_log_and_reads_no_other_tenants_entry(
    roles: tuple[str, dict[str, str]], layout: str
) -> None:
    schema, role_of = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}{layout}"
    async with StateStore(
        owner_url, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit()
    ) as ops:
        await ops.save("tenant-a/first", {"n": 0})  # the log exists before the policy
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=role_of)
    try:
        async with _tenant("a", role_of, schema) as a, _tenant("b", role_of, schema) as b:
            await a.save("tenant-a/bot", {"n": 1})
            await b.save("tenant-b/secret-deal", {"n": 1})  # the head is b's entry now
            await a.save("tenant-a/bot", {"n": 2})  # a chains on it
            await b.save("tenant-b/secret-deal", {"n": 2})
            await a.save("tenant-a/bot", {"n": 3})  # and again
            # a's own view of the log through the store: no entry at all
            assert [e async for e in AuditLog(a.backend, KEYRING).entries()] == []
        seen = b"\n".join(_plaintexts(role_of["a"], schema))
        assert b"tenant-b" not in seen and b"secret-deal" not in seen
        assert b'"principal":"b"' not in seen
        # the change feed hands role a no entry either
        feed = PostgresBackend(_as(role_of["a"]), schema=schema)
        try:
            await feed.open()
            records = await feed.read_feed(0, limit=1000)
        finally:
            await feed.close()
        assert records and all(r.agent_id.startswith("tenant-a/") for r in records)
        # the owner and the role of an admin on ** read and verify the whole log
        expected = [
            ("ops", "tenant-a/first"),
            ("a", "tenant-a/bot"),
            ("b", "tenant-b/secret-deal"),
            ("a", "tenant-a/bot"),
            ("b", "tenant-b/secret-deal"),
            ("a", "tenant-a/bot"),
        ]
        for url in (owner_url, _as_url(role_of["ops"], schema)):
            async with StateStore(url, keyring=KEYRING) as reader:
                log = AuditLog(reader.backend, KEYRING)
                report = await log.verify()
                saves = [(e.principal, e.agent_id) async for e in log.entries(operation="save")]
            assert report.ok, report.problems
            assert saves == expected
        # the log's rows stay unchangeable by a tenant role: entries and links alike
        # (a tenant role deletes through the delete functions only: migration 25)
        s = sql.Identifier(schema)
        with psycopg.connect(_as(role_of["a"]), autocommit=True) as conn:
            for table, delete in (
                ("sk_events", "SELECT 1 FROM {s}.sk_del_events(current_user, %s, NULL)"),
                ("sk_snapshots", "SELECT 1 FROM {s}.sk_del_snaps(current_user, %s, NULL, NULL)"),
            ):
                t = sql.Identifier(table)
                for statement in ("UPDATE {s}.{t} SET payload = 'x' WHERE agent_id = %s", delete):
                    done = conn.execute(sql.SQL(statement).format(s=s, t=t), (AUDIT_STREAM,))  # type: ignore[arg-type]
                    assert done.rowcount == 0, (statement, table)
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(
                        sql.SQL("DELETE FROM {s}.{t} WHERE agent_id = %s").format(s=s, t=t),
                        (AUDIT_STREAM,),
                    )
        async with StateStore(owner_url, keyring=KEYRING) as owner:
            assert (await AuditLog(owner.backend, KEYRING).verify()).ok
        links = _pg_rows(
            sql.SQL("SELECT seq FROM {s}.sk_snapshots WHERE agent_id = %s").format(s=s),
            AUDIT_STREAM,
        )
        assert links == [(len(expected),)]  # only the head's link is kept
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, role_of.values())


async def test_concurrent_appends_of_two_tenant_roles_lose_no_entry(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, role_of = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        await owner.backend.initialize()  # the log starts under the policy
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=role_of)
    per_writer = 12
    try:

        async def writes(principal: str, agent: str) -> None:
            async with _tenant(principal, role_of, schema) as store:
                for n in range(per_writer):
                    await store.save(agent, {"n": n})

        await asyncio.gather(
            writes("a", "tenant-a/one"),
            writes("a", "tenant-a/two"),
            writes("b", "tenant-b/one"),
            writes("b", "tenant-b/two"),
        )
        async with StateStore(owner_url, keyring=KEYRING) as owner:
            log = AuditLog(owner.backend, KEYRING)
            report = await log.verify()
            saves = [e.agent_id async for e in log.entries(operation="save")]
        assert report.ok, report.problems
        for agent in ("tenant-a/one", "tenant-a/two", "tenant-b/one", "tenant-b/two"):
            assert saves.count(agent) == per_writer
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, role_of.values())


async def test_a_key_rotation_by_an_admin_role_keeps_tenants_appending(
    roles: tuple[str, dict[str, str]],
) -> None:
    from statekeeper.security import Keyring
    from statekeeper.security.rekey import key_usage, rekey

    schema, role_of = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    old = Keyring({"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="})
    both = Keyring(
        {"k1": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
         "k2": "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="},
        active="k2",
    )  # fmt: skip
    new = Keyring({"k2": "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="})
    async with StateStore(owner_url, keyring=old) as owner:
        await owner.backend.initialize()
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=role_of)
    try:
        for principal in ("a", "b"):
            async with StateStore(
                _as_url(role_of[principal], schema),
                keyring=old,
                principal=principal,
                policy=POLICY,
                audit=Audit(),
            ) as tenant:
                await tenant.save(f"tenant-{principal}/x", {"n": 1})
        async with StateStore(
            _as_url(role_of["ops"], schema), keyring=both, principal="ops", policy=POLICY,
            audit=Audit(),
        ) as ops:  # fmt: skip
            await rekey(ops)
            assert "k1" not in await key_usage(ops)
        async with StateStore(
            _as_url(role_of["a"], schema), keyring=new, principal="a", policy=POLICY,
            audit=Audit(),
        ) as a:  # fmt: skip
            await a.save("tenant-a/x", {"n": 2})  # chains on the rotated log's head
        async with StateStore(owner_url, keyring=new) as owner:
            log = AuditLog(owner.backend, new)
            report = await log.verify()
            ops_seen = [(e.operation, e.agent_id) async for e in log.entries()]
        assert report.ok, report.problems
        assert ops_seen[:2] == [("save", "tenant-a/x"), ("save", "tenant-b/x")]
        assert ops_seen[-1] == ("save", "tenant-a/x")
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, role_of.values())


async def test_a_process_opened_before_the_policy_does_not_stop_tenants_appending(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, role_of = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(
        owner_url, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit()
    ) as early:
        await early.save("tenant-b/early", {"n": 1})
        await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=role_of)
        try:
            # written without its link (the process saw no row-level security as it
            # opened): the one entry a tenant role reads, until the next append
            await early.save("tenant-b/early", {"n": 2})
            async with _tenant("a", role_of, schema) as a:
                await a.save("tenant-a/bot", {"n": 1})
            seen = b"\n".join(_plaintexts(role_of["a"], schema))
            assert b"tenant-b" not in seen
            async with StateStore(owner_url, keyring=KEYRING) as owner:
                log = AuditLog(owner.backend, KEYRING)
                report = await log.verify()
                saves = [e.agent_id async for e in log.entries(operation="save")]
            assert report.ok, report.problems
            assert saves == ["tenant-b/early", "tenant-b/early", "tenant-a/bot"]
        finally:
            await stop_enforcing_in_postgres(POSTGRES_DSN, schema, role_of.values())
