"""Retention's run lock under PostgreSQL row-level security: the role of a principal
admin of the namespace swept (of every namespace, for a run over the whole store) takes
the reserved lease; no other role does.

The run lock is a lease on a reserved id of the store's own (``RUN_LOCKS + "retention"``,
``… + "/" + namespace`` for a run in a namespace); the policies on ``sk_leases`` let a
role lease an agent of a namespace it may write only, and statekeeper's own ids are in
no tenant's namespace. So no role — not even the admin of every namespace — could take
it: every ``retention apply`` on a store under row security ran unlocked (two runs at
once each planned the same agents) and only said so (``RetentionReport.unlocked``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied, RetentionRunning
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.retention_lock import lock_id

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING
from .test_postgres_row_security import _as, tenant_roles

POLICY = parse_policy(
    """\
[principals.acme-admin]
admin = ["acme/**"]

[principals.acme-app]
write = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)
PRINCIPALS = ("acme-admin", "acme-app", "ops")
RETENTION = RetentionPolicy.parse("acme keep_last=1\n")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlk_", PRINCIPALS) as made:
        yield made


def _open(schema: str, roles: dict[str, str], principal: str, namespace: str = "") -> StateStore:
    return StateStore(
        f"{_as(roles[principal])}?schema={schema}", keyring=KEYRING, principal=principal,
        policy=POLICY, namespace=namespace or None,
    )  # fmt: skip


async def _enforced(schema: str, roles: dict[str, str]) -> None:
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        for n in range(3):
            await owner.save("acme/a1", {"n": n})
            await owner.save("globex/g1", {"n": n})
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)


async def test_a_namespace_admin_locks_its_run_and_the_store_admin_the_stores(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    await _enforced(schema, roles)
    async with _open(schema, roles, "acme-admin", "acme") as acme:
        report = await apply_retention(acme, RETENTION)
        assert report.unlocked == ""
        assert [a.agent_id for a in report.actions if a.outcome == "done"] == ["a1"]  # (in acme)
        lease = await acme.backend.get_lease(lock_id("acme"))
        assert lease is not None and lease.holder is None  # taken, released at the end
    async with _open(schema, roles, "ops") as ops:
        report = await apply_retention(ops, RETENTION)
        assert report.unlocked == ""
        lease = await ops.backend.get_lease(lock_id(""))
        assert lease is not None and lease.holder is None
        # so runs serialize across roles: acme's admin sees the store's run holding it
        held = await ops.backend.acquire_lease(lock_id(""), "a store-wide run", 60)
        async with _open(schema, roles, "acme-admin", "acme") as acme:
            with pytest.raises(RetentionRunning, match="of the store"):
                await apply_retention(acme, RETENTION)
        assert await ops.backend.release_lease(held.agent_id, "a store-wide run", held.token)


async def test_no_other_role_takes_a_run_lock(store: tuple[str, dict[str, str]]) -> None:
    schema, roles = store
    await _enforced(schema, roles)
    async with _open(schema, roles, "acme-app", "acme") as app:
        backend = app.backend
        for scope in ("acme", ""):  # a writer of acme is no admin of it
            with pytest.raises(AccessDenied):
                await backend.acquire_lease(lock_id(scope), "app", 60)
    async with _open(schema, roles, "acme-admin", "acme") as acme:
        backend = acme.backend
        # the admin of acme: not the whole store's, nor another namespace's, nor one
        # that only starts like its own
        for scope in ("", "globex", "acmeX", "acme-eu"):
            with pytest.raises(AccessDenied):
                await backend.acquire_lease(lock_id(scope), "acme", 60)
        held = await backend.acquire_lease(lock_id("acme/eu"), "acme", 60)  # (below it)
        assert await backend.release_lease(held.agent_id, "acme", held.token)
    # nor by SQL around the library: the reserved ids are no tenant's rows
    with (
        psycopg.connect(_as(roles["acme-app"]), autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(
            f"INSERT INTO {schema}.sk_leases (agent_id, holder, token, expires_at)"
            " VALUES (%s, 'x', 1, 1e12)",
            (lock_id("acme"),),
        )
