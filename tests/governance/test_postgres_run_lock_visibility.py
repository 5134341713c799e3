"""Who reads a retention run lock under PostgreSQL row security
(``sql/row_security_runlock.sql``): the roles admin of a namespace above the lock's, at
it or below it (a run checks the locks above and below its namespace), the admins of
every namespace, no other role.

Was: every role with an ``admin`` grant on any namespace read every run lock, so the
admin of ``acme`` listed the runs of ``globex`` (their namespaces and holders: pid,
host, principal). A grant's literal prefix (``sk_grants.prefix``, migration 18) says
which locks are its; a store under row security from before migration 18 gets it in
place as it is opened, its grants unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.governance import parse_policy
from statekeeper.governance.policy import posix_pattern
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.governance.retention_lock import lock_id

from ..backends._services import POSTGRES_DSN
from .test_postgres_row_security import _as, tenant_roles

POLICY = parse_policy(
    """\
[principals.acme-admin]
admin = ["acme/**"]

[principals.eu-admin]
admin = ["acme/eu/**"]

[principals.globex-admin]
admin = ["globex/**"]

[principals.acme-app]
write = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)
PRINCIPALS = ("acme-admin", "eu-admin", "globex-admin", "acme-app", "ops")

#: the locks held in each case, by whom
HELD = {"": "ops", "acme": "acme-admin", "acme/eu": "eu-admin", "globex": "globex-admin"}

#: (principal, the namespaces of the held locks it reads)
SEES = [
    ("ops", ["", "acme", "acme/eu", "globex"]),
    ("acme-admin", ["", "acme", "acme/eu"]),  # (not globex's)
    ("eu-admin", ["", "acme", "acme/eu"]),  # (acme's: above its own)
    ("globex-admin", ["", "globex"]),
    ("acme-app", []),  # (a writer takes no lock, nor reads one)
]

#: the run-lock function before migration 18 (main at 28cbb49a): every role with an
#: admin grant read every run lock
OLD_RUN_LOCK = """
CREATE OR REPLACE FUNCTION {s}.sk_run_lock(p_agent text, p_need integer) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
    SELECT CASE
        WHEN p_agent = (chr(1) || 'sk-runlock/retention')
        THEN (p_need <= 1 AND EXISTS (SELECT 1 FROM {s}.sk_grants g
                                       WHERE g.db_role = current_user AND g.perm = 3))
             OR {s}.sk_log_admin()
        WHEN left(p_agent, 22) = (chr(1) || 'sk-runlock/retention/')
        THEN (p_need <= 1 AND EXISTS (SELECT 1 FROM {s}.sk_grants g
                                       WHERE g.db_role = current_user AND g.perm = 3))
             OR {s}.sk_log_admin()
             OR EXISTS (SELECT 1 FROM {s}.sk_grants g
                         WHERE g.db_role = current_user AND g.perm = 3
                           AND substr(p_agent, 23) ~ g.pattern
                           AND (right(g.pattern, 7) = '(/.*)?$' OR g.pattern = '^.*$'))
        ELSE false END
$fn$;
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlv_", PRINCIPALS) as made:
        yield made


async def _enforced(schema: str, roles: dict[str, str]) -> None:
    owner = PostgresBackend(POSTGRES_DSN, schema=schema)
    try:
        await owner.open()
    finally:
        await owner.close()
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)


def _as_before_migration_18(schema: str) -> None:
    """The schema as row security and migrations up to 17 left it."""
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn, conn.transaction():
        conn.execute(f"ALTER TABLE {schema}.sk_grants DROP COLUMN IF EXISTS prefix")
        conn.execute(f"DROP FUNCTION IF EXISTS {schema}.sk_grant_prefix(text)")
        conn.execute(OLD_RUN_LOCK.replace("{s}", f'"{schema}"'))  # type: ignore[arg-type]
        conn.execute(f"DELETE FROM {schema}.sk_migrations WHERE version >= 18")


async def _backend(schema: str, roles: dict[str, str], principal: str) -> PostgresBackend:
    backend = PostgresBackend(_as(roles[principal]), schema=schema, max_size=1)
    await backend.open()
    return backend


async def _check_who_sees_what(schema: str, roles: dict[str, str]) -> None:
    held = {}
    try:
        for scope, principal in HELD.items():
            backend = await _backend(schema, roles, principal)
            held[scope] = backend, await backend.acquire_lease(lock_id(scope), principal, 60)
        for principal, sees in SEES:
            backend = await _backend(schema, roles, principal)
            try:
                leases = await backend.list_leases("", 100)
                listed = [i.agent_id for i in leases if i.agent_id.startswith(lock_id(""))]
                assert listed == [lock_id(scope) for scope in sees], principal
                for scope in HELD:
                    got = await backend.get_lease(lock_id(scope))
                    assert (got is not None) is (scope in sees), (principal, scope)
            finally:
                await backend.close()
    finally:
        for backend, info in held.values():
            assert info.holder is not None
            await backend.release_lease(info.agent_id, info.holder, info.token)
            await backend.close()


async def test_a_run_lock_is_read_by_the_admins_above_at_or_below_its_namespace_only(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    await _enforced(schema, roles)
    await _check_who_sees_what(schema, roles)


async def test_a_store_under_older_row_security_is_upgraded_in_place(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    await _enforced(schema, roles)
    _as_before_migration_18(schema)
    owner = PostgresBackend(POSTGRES_DSN, schema=schema)  # (its owner opens it: migrated)
    try:
        await owner.open()
    finally:
        await owner.close()
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT pattern, prefix FROM {schema}.sk_grants ORDER BY pattern"  # type: ignore[arg-type]
        ).fetchall()
    assert ("^acme(/.*)?$", "acme") in rows and ("^.*$", "") in rows
    await _check_who_sees_what(schema, roles)  # (the grants installed before: unchanged)


#: (a namespace pattern, its literal prefix: the namespaces it matches are it or below it)
PREFIXES = [
    ("**", ""),
    ("", ""),
    ("*", ""),
    ("**/eu", ""),
    ("acme", "acme"),
    ("acme/**", "acme"),
    ("acme/*", "acme"),
    ("acme/**/eu", "acme"),
    ("acme/eu", "acme/eu"),
    ("acme/e?", "acme"),
    ("acme/eu*/x", "acme"),
    ("a.b/x+y/**", "a.b/x+y"),
    ("t(1)/[z]/**", "t(1)/[z]"),
    ("ac*/x", ""),
]


#: regular expressions given to install_row_security by hand: a prefix only when every
#: namespace they match is it or below it ('' otherwise: the grant reads every lock)
HAND_WRITTEN = [
    ("^acme/x|^globex", ""),
    ("^acme/.*$", "acme"),
    ("^acme/*x$", ""),  # ('/*': any number of '/', 'acmex' too)
    ("^acme/?$", ""),
    ("acme/x$", ""),  # (not anchored)
    ("^acme\\d/x$", ""),  # ('\\d' is a class, not the letter)
    ("^acme\\\\|x$", ""),
    ("^acme\\|/x$", "acme|/x"),  # (an escaped '|': a character of the segment)
    # (second read, h/pgread: a quantifier after a literal, a class of '/', an escaped '/')
    ("^acme\\.*/x$", ""),  # ('\\.*': any number of '.': 'acme../x', not below 'acme')
    ("^ab{2}/x$", ""),  # ('b{2}': 'abb/x', not 'ab/...')
    ("^acme[/]x$", ""),  # (a bracket: no literal segment boundary read)
    ("^acme/x+/y$", "acme"),
    ("^a/b\\/c$", "a/b/c"),  # (an escaped '/': the namespace 'a/b/c' alone)
]


async def test_a_grants_prefix_is_its_patterns_literal_segments(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, _ = store
    owner = PostgresBackend(POSTGRES_DSN, schema=schema)
    try:
        await owner.open()
    finally:
        await owner.close()
    cases = [(posix_pattern(p), prefix) for p, prefix in PREFIXES] + HAND_WRITTEN
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        got = [
            (rx, conn.execute(f"SELECT {schema}.sk_grant_prefix(%s)", (rx,)).fetchone())  # type: ignore[arg-type]
            for rx, _ in cases
        ]
    assert got == [(rx, (prefix,)) for rx, prefix in cases]
