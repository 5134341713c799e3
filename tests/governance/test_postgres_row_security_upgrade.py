"""A store put under row-level security before the markers' policy was narrowed (main
before h/trialgov): its ``sk_markers`` insert policy is the old one (any writer sets
any marker) until its owner enforces the policy again. Both before and after that, every
tenant goes on doing what it did: a new tenant's first save into the empty store (the
store's first feed id, "encrypted", "audit-log"), appends, leases, its subscription,
its witness, a tenant admin's retention, and the audit log verifies clean for the
owner and the admin of every namespace (enforce's own entry included)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import POSTGRES_DSN
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg, tenant_roles

POLICY = parse_policy(
    """\
[principals.acme-app]
write = ["acme/**"]

[principals.acme-admin]
admin = ["acme/**"]

[principals.globex-app]
write = ["globex/**"]

[principals.ops]
admin = ["**"]
"""
)
PRINCIPALS = ("acme-app", "acme-admin", "globex-app", "ops")
#: the insert policy sql/row_security.sql installed on sk_markers before h/trialgov
OLD_MARKERS_POLICY = """
DROP POLICY IF EXISTS sk_set ON {s}.sk_markers;
CREATE POLICY sk_set ON {s}.sk_markers FOR INSERT WITH CHECK (
    name = 'audit-log'
    OR EXISTS (SELECT 1 FROM {s}.sk_grants g WHERE g.db_role = current_user AND g.perm >= 2))
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    with tenant_roles(tmp_path, "sk_rlu_", PRINCIPALS) as made:
        yield made


def _open(schema: str, roles: dict[str, str], principal: str) -> StateStore:
    return StateStore(
        f"{_as(roles[principal])}?schema={schema}", keyring=KEYRING,
        principal=principal, policy=POLICY, audit=Audit(),
    )  # fmt: skip


def _markers_policy(schema: str) -> str:
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        row = conn.execute(
            "SELECT with_check FROM pg_policies WHERE schemaname = %s"
            " AND tablename = 'sk_markers' AND policyname = 'sk_set'",
            (schema,),
        ).fetchone()
    assert row is not None
    return str(row[0])


async def _tenants_work(schema: str, roles: dict[str, str], tag: str) -> None:
    for principal, ns in (("acme-app", "acme"), ("globex-app", "globex")):
        async with _open(schema, roles, principal) as tenant:
            agent = f"{ns}/{tag}"
            for n in range(3):
                await tenant.save(agent, {"n": n})
            await tenant.append(agent, "tool_call", {"tool": "search"})
            lease = await LeaseManager(tenant, holder="worker-1").acquire(f"{agent}-lease")
            await lease.release()
            assert (await tenant.load(agent)).data == {"n": 2}
            seen = {c.agent_id async for c in tenant.subscribe(stop_at_head=True)}
            assert f"{agent}" in seen and all(a.startswith(f"{ns}/") for a in seen), seen
            assert await tenant.witness_problems() == []
    async with _open(schema, roles, "acme-admin") as admin:
        report = await apply_retention(admin, RetentionPolicy.parse("acme keep_last=1"))
        assert [a.outcome for a in report.actions if a.agent_id == f"acme/{tag}"] == ["done"]
    async with _open(schema, roles, "ops") as ops:
        audited = await AuditLog(ops.backend, KEYRING).verify()
        assert audited.ok, audited
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}", keyring=KEYRING) as owner:
        audited = await AuditLog(owner.backend, KEYRING).verify()
        assert audited.ok, audited


async def test_a_store_under_the_old_markers_policy_keeps_working_and_upgrades(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}") as owner:  # made, nothing set
        await owner.count_agents()
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles)
    _pg(f"DELETE FROM {schema}.sk_markers", OLD_MARKERS_POLICY.format(s=schema))
    assert "sk_log_admin" not in _markers_policy(schema)
    # the store's first use is a tenant's, under the policy main left
    await _tenants_work(schema, roles, "before")
    # the owner enforces again with this code (and records it): the narrowed policy
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles, keyring=KEYRING)
    assert "sk_log_admin" in _markers_policy(schema)
    await _tenants_work(schema, roles, "after")
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        names = {str(r[0]) for r in conn.execute(f"SELECT name FROM {schema}.sk_markers")}
    assert {"encrypted", "audit-log"} <= names
    assert len([n for n in names if n.startswith("feed-id:")]) == 1  # never renewed


async def test_a_new_tenants_first_save_into_an_empty_store_under_the_new_policy(
    store: tuple[str, dict[str, str]],
) -> None:
    schema, roles = store
    async with StateStore(f"{POSTGRES_DSN}?schema={schema}") as owner:
        await owner.count_agents()
    _pg(f"DELETE FROM {schema}.sk_markers")
    await enforce_in_postgres(POSTGRES_DSN, schema, POLICY, roles=roles, keyring=KEYRING)
    await _tenants_work(schema, roles, "first")
