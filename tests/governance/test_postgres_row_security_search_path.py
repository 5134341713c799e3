"""Row-level security holds whatever search_path the tenant's session sets.

The policies call SQL functions (``sk_allowed``, ``sk_namespace``, ``sk_log_admin``) and
a trigger (``sk_audit_head_forward``) whose bodies PostgreSQL parses when they run, with
the search_path of the session running them. A tenant role that may create objects in
some schema (PostgreSQL 14 and older let every role create in ``public``) defines its
own ``~``, ``=``, ``>=``... there, puts that schema before ``pg_catalog``, and the checks
would use its operators: every tenant's rows readable and deletable, the audit log's
head moved back. Two real roles on the shared server (unique, dropped afterwards)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING, POLICY_TEXT
from .test_postgres_row_security import _as, _pg

#: operators and functions the policies' bodies use, each replaced by one that lets
#: everything through (a ``~`` that always matches, an ``=`` that always holds...)
_HIJACKS = [
    ("bool_tt", "text, text", "true"),
    ("bool_nn", "name, name", "true"),
    ("bool_ii", "integer, integer", "true"),
    ("bool_ll", "bigint, bigint", "false"),
]
_OPERATORS = [
    ("~", "text", "text", "bool_tt"),
    ("=", "text", "text", "bool_tt"),
    ("<>", "text", "text", "bool_tt"),
    ("=", "name", "name", "bool_nn"),
    (">=", "integer", "integer", "bool_ii"),
    ("<=", "integer", "integer", "bool_ii"),
    ("=", "integer", "integer", "bool_ii"),
    ("<", "bigint", "bigint", "bool_ll"),  # the audit head's "moved back?" is never true
]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlsp_")
    suffix = uuid.uuid4().hex[:8]
    role, own = f"sk_rlsp_bob_{suffix}", f"sk_rlsp_own_{suffix}"
    _pg(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield schema, role, own
    finally:
        drop_schema(schema)
        drop_schema(own)
        _pg(f'DROP OWNED BY "{role}"', f'DROP ROLE "{role}"')


def _hijack(conn: object, own: str) -> None:
    """In the tenant's session: its own operators, found before pg_catalog's."""
    run = conn.execute  # type: ignore[attr-defined]
    for name, args, result in _HIJACKS:
        run(
            f'CREATE FUNCTION "{own}".{name}({args}) RETURNS boolean '
            f"LANGUAGE sql AS $$SELECT {result}$$"
        )
    for op, left, right, function in _OPERATORS:
        run(f'CREATE OPERATOR "{own}".{op} (LEFTARG = {left}, RIGHTARG = {right}, '
            f'FUNCTION = "{own}".{function})')  # fmt: skip
    run(f'SET search_path = "{own}", pg_catalog')


async def test_a_tenant_role_cannot_reach_other_rows_through_its_own_operators(
    setup: tuple[str, str, str],
) -> None:
    import psycopg

    schema, role, own = setup
    policy = parse_policy(POLICY_TEXT)  # bob: write on globex/*
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("acme/support/t1", {"secret": "acme's"})
        await owner.save("globex/eu/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"bob": role})
    # the tenant's role may create in a schema of its own (as in "public" before PG 15)
    _pg(f'CREATE SCHEMA "{own}" AUTHORIZATION "{role}"')
    s = f'"{schema}"'
    with psycopg.connect(_as(role), autocommit=True) as conn:
        _hijack(conn, own)
        seen = conn.execute(f"SELECT agent_id FROM {s}.sk_agents ORDER BY 1").fetchall()
        assert seen == [("globex/eu/g1",)]
        events = conn.execute(f"SELECT DISTINCT agent_id FROM {s}.sk_events").fetchall()
        assert events == [("globex/eu/g1",)]
        # (its deletes go through the delete functions, their search_path pinned)
        conn.execute(f"SELECT {s}.sk_del_events(current_user, 'acme/support/t1', NULL)")
        conn.execute(
            f"SELECT {s}.sk_del_agents(current_user, ARRAY['acme/support/t1'], NULL, NULL)"
        )
        conn.execute(f"UPDATE {s}.sk_agents SET head_seq = 0 WHERE agent_id = 'acme/support/t1'")
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        # (its own "=" matched its own rows too: those it may change, its business)
        assert (await owner.load("acme/support/t1")).data == {"secret": "acme's"}
        assert (await owner.verify(["acme/support/t1"])).ok


async def test_a_tenant_role_cannot_move_the_audit_head_back_through_its_own_operators(
    setup: tuple[str, str, str],
) -> None:
    import psycopg

    from statekeeper.governance import Audit, AuditLog

    schema, role, own = setup
    policy = parse_policy(POLICY_TEXT)
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/eu/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"bob": role})
    _pg(f'CREATE SCHEMA "{own}" AUTHORIZATION "{role}"')
    url = f"{_as(role)}?schema={schema}"
    async with StateStore(url, keyring=KEYRING, principal="bob", policy=policy,
                          audit=Audit()) as bob:  # fmt: skip
        for n in range(2, 5):
            await bob.save("globex/eu/g1", {"n": n})
    s = f'"{schema}"'
    with psycopg.connect(_as(role), autocommit=True) as conn:
        _hijack(conn, own)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only moves forward"):
            conn.execute(
                f"UPDATE {s}.sk_agents SET head_seq = 1 WHERE agent_id = chr(1) || 'sk-audit/log'"
            )
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        report = await AuditLog(owner.backend, KEYRING).verify()
        assert report.ok, report.problems
        assert report.entries == 3


async def test_a_tenant_role_cannot_append_without_the_feeds_lock(
    setup: tuple[str, str, str],
) -> None:
    """The feed passes a position only once every append holding its lock has ended:
    an append made without it (the role's own no-op lock function found first) could
    commit behind the subscribers, its event never delivered to anyone."""
    import psycopg

    schema, role, own = setup
    policy = parse_policy(POLICY_TEXT)
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/eu/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"bob": role})
    _pg(f'CREATE SCHEMA "{own}" AUTHORIZATION "{role}"')
    s = f'"{schema}"'
    with psycopg.connect(_as(role)) as conn, psycopg.connect(POSTGRES_DSN) as watcher:
        conn.execute(
            f'CREATE FUNCTION "{own}".pg_advisory_xact_lock_shared(integer, integer) '
            "RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$"
        )
        conn.execute(f'SET search_path = "{own}", pg_catalog')
        conn.execute(
            f"INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)"
            " VALUES ('globex/eu/g2', 1, 'x', 0, '\\x00', '\\x00')"
        )  # its own namespace; the transaction stays open
        pid = conn.info.backend_pid
        held = watcher.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 23117"
            " AND objsubid = 2 AND granted AND pid = %s",
            (pid,),
        ).fetchone()
        conn.rollback()
    assert held == (1,)


async def test_a_tenant_role_with_the_replica_session_role_cannot_move_the_audit_head_back(
    setup: tuple[str, str, str],
) -> None:
    """``ALTER ROLE bob SET session_replication_role = replica`` (a superuser's setting,
    as for a bulk load): ordinary triggers do not fire in bob's sessions, and the audit
    head's forward-only trigger did not either — bob moved the head back. The
    triggers of row-level security are ``ENABLE ALWAYS``."""
    import psycopg

    schema, role, _ = setup
    policy = parse_policy(POLICY_TEXT)
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        await owner.save("globex/eu/g1", {"n": 1})
    await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles={"bob": role})
    url = f"{_as(role)}?schema={schema}"
    async with StateStore(url, keyring=KEYRING, principal="bob", policy=policy,
                          audit=Audit()) as bob:  # fmt: skip
        for n in range(2, 5):
            await bob.save("globex/eu/g1", {"n": n})
    _pg(f'ALTER ROLE "{role}" SET session_replication_role = replica')
    s = f'"{schema}"'
    with psycopg.connect(_as(role), autocommit=True) as conn:
        assert conn.execute("SHOW session_replication_role").fetchone() == ("replica",)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only moves forward"):
            conn.execute(
                f"UPDATE {s}.sk_agents SET head_seq = 1 WHERE agent_id = chr(1) || 'sk-audit/log'"
            )
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        report = await AuditLog(owner.backend, KEYRING).verify()
        assert report.ok, report.problems
