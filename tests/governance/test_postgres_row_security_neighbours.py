"""Row-level security on a store whose schema holds another application's tables too
(a store in ``public``, or in the application's own schema). Installing it granted each
principal's role ``SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA`` — the other
application's tables too, which the role was never meant to touch (a tenant confined to
its namespaces could read and rewrite them) — and removing it revoked ``ALL ON ALL
TABLES IN SCHEMA`` and the schema's ``USAGE``: the privileges the role had on the other
application's tables (granted by their owner) went with it. Now both name the store's
own tables, sequence and functions only."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, _pg


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlsn_")
    role = f"sk_rlsn_alice_{uuid.uuid4().hex[:8]}"
    _pg(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield schema, role
    finally:
        drop_schema(schema)
        _pg(f'DROP OWNED BY "{role}"', f'DROP ROLE "{role}"')


def _may(role: str, table: str, privilege: str) -> bool:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        row = conn.execute("SELECT has_table_privilege(%s, %s, %s)", (role, table, privilege))
        found = row.fetchone()
    return bool(found and found[0])


def _schema_usage(role: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        row = conn.execute("SELECT has_schema_privilege(%s, %s, 'USAGE')", (role, schema))
        found = row.fetchone()
    return bool(found and found[0])


async def test_the_other_applications_tables_keep_their_privileges(
    setup: tuple[str, str],
) -> None:
    schema, role = setup
    policy = parse_policy(POLICY_TEXT)
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("acme/support/t1", {"n": 1})
    private, shared = f'"{schema}".app_private', f'"{schema}".app_shared'
    _pg(  # the application's tables; it lets the role read one of them
        f"CREATE TABLE {private} (id int PRIMARY KEY, secret text)",
        f"INSERT INTO {private} VALUES (1, 'payroll')",
        f"CREATE TABLE {shared} (id int PRIMARY KEY)",
        f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"',
        f'GRANT SELECT ON {shared} TO "{role}"',
    )
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"alice": role})
    for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE"):
        assert not _may(role, private, privilege), privilege  # (before: all four)
    assert _may(role, shared, "SELECT") and not _may(role, shared, "DELETE")
    # the store works for the role as before
    async with StateStore(
        f"{_as(role)}?schema={schema}", keyring=KEYRING, principal="alice", policy=policy
    ) as alice:
        await alice.save("acme/support/t2", {"n": 2})
        assert (await alice.load("acme/support/t1")).data == {"n": 1}
    await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [role])
    assert _may(role, shared, "SELECT")  # (before: revoked with the store's)
    assert _schema_usage(role, schema)  # (before: revoked)
    assert not _may(role, f'"{schema}".sk_agents', "SELECT")


async def test_a_schema_of_the_store_alone_is_revoked_whole(setup: tuple[str, str]) -> None:
    schema, role = setup
    policy = parse_policy(POLICY_TEXT)
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("acme/support/t1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"alice": role})
    assert _schema_usage(role, schema) and _may(role, f'"{schema}".sk_events', "SELECT")
    await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [role])
    assert not _schema_usage(role, schema)
    assert not _may(role, f'"{schema}".sk_events', "SELECT")
