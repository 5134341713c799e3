"""Which roles take a namespace's retention run lock under PostgreSQL row security
(``sql/row_security_runlock.sql``): the role of a principal admin of the namespace and
of every namespace below it, no other — whatever the admin grant's pattern.

The lock of a namespace serializes every run below it too (a run in ``acme/b/cc`` is
refused while ``acme/b``'s lock is held), so a role taking it blocks the runs of the
admins of every namespace below. "Admin of every namespace below" was checked with a
probe: the namespace and the namespace two one-character segments below it
(``N/\\x02/\\x02``) both matched by one grant. A pattern whose last segment is ``?``
matches that probe and not a namespace below whose last segment is longer: the admin
of ``acme/**/?`` (the namespaces under acme named by one character) took the lock of
``acme/b``, blocking the runs of ``acme/b/cc``'s admins.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.governance.retention_lock import lock_id

from ..backends._services import POSTGRES_DSN
from .test_postgres_row_security import _as, tenant_roles

POLICY = parse_policy(
    """\
[principals.one-char]
admin = ["acme/**/?"]

[principals.any-one-char]
admin = ["**/?"]

[principals.children]
admin = ["acme/*"]

[principals.dotted]
admin = ["a.b/**"]

[principals.plus]
admin = ["x+y/**", "t(1)/[z]/**"]

[principals.middle]
admin = ["**/eu/**"]
"""
)
PRINCIPALS = ("one-char", "any-one-char", "children", "dotted", "plus", "middle")

#: (principal, namespace of the lock, may take it)
CASES = [
    ("one-char", "acme/b", False),  # (acme/b/cc is not its)
    ("one-char", "acme", False),
    ("any-one-char", "a", False),
    ("any-one-char", "a/b", False),
    ("children", "acme/b", False),  # (acme/b/c is not its)
    ("dotted", "a.b", True),
    ("dotted", "a.b/c", True),
    ("dotted", "aXb", False),  # ('.' is no wildcard)
    ("dotted", "a.b.c", False),
    ("plus", "x+y", True),
    ("plus", "xxy", False),
    ("plus", "x+y+", False),
    ("plus", "t(1)/[z]", True),
    ("plus", "t1/z", False),
    ("middle", "acme/eu", True),
    ("middle", "eu/x", True),
    ("middle", "acme/eux", False),
    ("middle", "acme", False),
]


@pytest.fixture(scope="module")
def enforced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    import asyncio

    tmp_path: Path = tmp_path_factory.mktemp("runlock_scope")
    with tenant_roles(tmp_path, "sk_rls_", PRINCIPALS) as (schema, roles):

        async def made() -> None:
            owner = PostgresBackend(POSTGRES_DSN, schema=schema)
            try:
                await owner.open()
            finally:
                await owner.close()
            await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)

        asyncio.run(made())
        yield schema, roles


@pytest.mark.parametrize(
    ("principal", "scope", "allowed"), CASES, ids=[f"{p}:{n}" for p, n, _ in CASES]
)
async def test_a_namespace_lock_is_taken_by_admins_of_all_below_it_only(
    enforced: tuple[str, dict[str, str]], principal: str, scope: str, allowed: bool
) -> None:
    schema, roles = enforced
    backend = PostgresBackend(_as(roles[principal]), schema=schema, max_size=1)
    try:
        await backend.open()
        if not allowed:
            with pytest.raises(AccessDenied):
                await backend.acquire_lease(lock_id(scope), principal, 60)
            return
        held = await backend.acquire_lease(lock_id(scope), principal, 60)
        assert await backend.release_lease(held.agent_id, principal, held.token)
    finally:
        await backend.close()


async def test_a_run_under_older_row_security_says_what_to_run(tmp_path: Path) -> None:
    """Row security an older statekeeper enforced has no run-lock policies: a run of
    the store's admin goes unlocked, and its report names what restores the lock."""
    from statekeeper import StateStore
    from statekeeper.governance.retention import RetentionPolicy, apply_retention

    from .conftest import KEYRING

    policy = parse_policy('[principals.ops]\nadmin = ["**"]\n')
    with tenant_roles(tmp_path, "sk_rlo_", ("ops",)) as (schema, roles):
        async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
            for n in range(2):
                await owner.save("acme/a1", {"n": n})
        await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles=roles)
        older = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
        try:
            await older.open()
            async with older._connection() as conn:  # (as an older statekeeper left it)
                for name in ("read", "take", "renew"):
                    await conn.execute(f"DROP POLICY sk_run_lock_{name} ON {schema}.sk_leases")
        finally:
            await older.close()
        async with StateStore(
            f"{_as(roles['ops'])}?schema={schema}", keyring=KEYRING, principal="ops",
            policy=policy,
        ) as ops:  # fmt: skip
            report = await apply_retention(ops, RetentionPolicy.parse("acme keep_last=1\n"))
        assert "enforce_in_postgres" in report.unlocked
        assert "owner" in report.unlocked  # (who runs it)
        await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles=roles)
        async with StateStore(
            f"{_as(roles['ops'])}?schema={schema}", keyring=KEYRING, principal="ops",
            policy=policy,
        ) as ops:  # fmt: skip
            report = await apply_retention(ops, RetentionPolicy.parse("acme keep_last=1\n"))
        assert report.unlocked == ""


async def test_an_expired_run_lock_is_taken_over_across_roles(tmp_path: Path) -> None:
    """A run lock whose run stopped renewing (expired, not released: no role deletes
    one) is taken by the next run of another role that may take it; the stopped run
    then cannot renew it: LeaseLost, as on every engine (was: AccessDenied saying the
    store admin's role "may not write that namespace": a renewal or release matching no
    row asked sk_allowed, which reaches no run lock, so a run whose lock was taken over
    stopped with a refusal, not LeaseLost); a released one is taken again."""
    from statekeeper.errors import LeaseLost

    policy = parse_policy(
        '[principals.acme-admin]\nadmin = ["acme/**"]\n\n[principals.ops]\nadmin = ["**"]\n'
    )
    with tenant_roles(tmp_path, "sk_rlx_", ("acme-admin", "ops")) as (schema, roles):
        owner = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
        ops = PostgresBackend(_as(roles["ops"]), schema=schema, max_size=1)
        acme = PostgresBackend(_as(roles["acme-admin"]), schema=schema, max_size=1)
        try:
            await owner.open()
            await enforce_in_postgres(POSTGRES_DSN, schema, policy, roles=roles)
            await ops.open()
            await acme.open()
            stopped = await ops.acquire_lease(lock_id("acme"), "ops run", 60)
            async with owner._connection() as conn:  # (its time passed: no waiting)
                await conn.execute(
                    f"UPDATE {schema}.sk_leases SET expires_at = 1 WHERE agent_id = %s",
                    (lock_id("acme"),),
                )
            taken = await acme.acquire_lease(lock_id("acme"), "acme run", 60)
            assert taken.token > stopped.token
            with pytest.raises(LeaseLost):
                await ops.renew_lease(lock_id("acme"), "ops run", stopped.token, 60)
            assert not await ops.release_lease(lock_id("acme"), "ops run", stopped.token)
            assert await acme.release_lease(lock_id("acme"), "acme run", taken.token)
            again = await ops.acquire_lease(lock_id("acme"), "ops run", 60)
            assert again.token > taken.token
            assert await ops.release_lease(lock_id("acme"), "ops run", again.token)
        finally:
            for backend in (acme, ops, owner):
                await backend.close()
