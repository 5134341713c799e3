"""Migration 25's privileges (a tenant role cannot LOCK a table) for the roles that are
not plain tenants: a role row security does not bind (BYPASSRLS), and a role the
database's administrator gave SELECT alone (a reader following the feed, a backup).

Before (the merge of h/pgpriv): install_row_security took every given role's DELETE,
but a backend chose the delete functions only where row security binds its role, so a
BYPASSRLS role (the store administrator's, say) sent a plain DELETE, refused
(AccessDenied: "permission denied for table sk_agents"); and migration 25 gave every
role holding SELECT on sk_agents the columns' UPDATE and the delete functions, so a
read-only role could move and row-lock the audit log's head (every governed write then
waits on it), and a read-only BYPASSRLS role delete every tenant's rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM
from statekeeper.governance import Audit, parse_policy

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, tenant_roles
from .test_postgres_row_security_table_locks import _prepared, _store

_DELETES = ("sk_del_agents", "sk_del_events", "sk_del_snaps", "sk_del_keys")


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlro_", ["alice", "bob", "ops", "reader"]) as made:
        yield made


async def test_a_bypassrls_role_given_row_security_deletes(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as owner:
        owner.execute(sql.SQL("ALTER ROLE {} BYPASSRLS").format(sql.Identifier(names["ops"])))
    await _prepared(schema, {p: names[p] for p in ("alice", "bob", "ops")})
    async with StateStore(
        f"{_as(names['ops'])}?schema={schema}&audit_lock_timeout=0.5",
        keyring=KEYRING,
        principal="ops",
        policy=parse_policy(POLICY_TEXT),
        audit=Audit(),
    ) as ops:
        await ops.save("acme/support/o1", {"n": 1})
        assert await ops.delete("acme/support/o1")  # (was: AccessDenied, a DELETE refused)
        assert await ops.delete("globex/g1")  # (every namespace's: it is the admin)
    async with _store(schema, names["alice"], "alice") as alice:  # (a tenant's, unchanged)
        assert await alice.delete("acme/support/t1")


async def test_migration_25_gives_a_read_only_role_no_write(
    roles: tuple[str, dict[str, str]],
) -> None:
    schema, names = roles
    tenants = {p: names[p] for p in ("alice", "bob", "ops")}
    await _prepared(schema, tenants)
    s = sql.Identifier(schema)
    reader = sql.Identifier(names["reader"])
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as owner:
        # the store as an older statekeeper left it (see test_postgres_row_security_table_
        # locks.py's upgrade test), with a reader the administrator gave SELECT alone
        owner.execute(sql.SQL("DELETE FROM {s}.sk_migrations WHERE version >= 25").format(s=s))
        owner.execute(
            sql.SQL("GRANT UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r}").format(
                s=s, r=sql.SQL(", ").join(sql.Identifier(r) for r in tenants.values())
            )
        )
        for function in _DELETES:
            owner.execute(sql.SQL("DROP FUNCTION {s}.{f}").format(s=s, f=sql.Identifier(function)))
        owner.execute(sql.SQL("GRANT USAGE ON SCHEMA {s} TO {r}").format(s=s, r=reader))
        owner.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}").format(s=s, r=reader)
        )
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as upgraded:
        assert (await upgraded.load("globex/g1")).data == {"n": 1}  # (migrated)
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as owner:
        held = owner.execute(
            "SELECT has_any_column_privilege(%s, to_regclass(%s), 'UPDATE'),"
            " has_function_privilege(%s, %s, 'EXECUTE')",
            (
                names["reader"],
                f'"{schema}".sk_agents',
                names["reader"],
                f'"{schema}".sk_del_agents(name,text[],bigint,bytea)',
            ),
        ).fetchone()
    assert held == (False, False)  # (was: (True, True))
    with psycopg.connect(_as(names["reader"])) as conn:
        for statement in (
            "SELECT 1 FROM {s}.sk_agents WHERE agent_id = %s FOR UPDATE",
            "UPDATE {s}.sk_agents SET head_tag = NULL WHERE agent_id = %s",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL(statement).format(s=s), (AUDIT_STREAM,))
            conn.rollback()
        assert conn.execute(sql.SQL("SELECT count(*) FROM {s}.sk_agents").format(s=s)).fetchone()
    async with _store(schema, names["alice"], "alice") as alice:  # (the tenants go on)
        await alice.save("acme/support/u1", {"n": 1})
        assert await alice.delete("acme/support/u1")
