"""A tenant's administrator on a PostgreSQL store secured by row-level security: two
database roles, one per tenant admin (admin on ``tenant-a/**`` and ``tenant-b/**``).
Each backs up, restores into and runs retention on its own namespace through a store
opened in it; the other's namespace is refused by the store, and its rows are out of
reach of the role even below the store's checks."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres
from .conftest import KEYRING
from .test_postgres_row_security import _as, _pg

POLICY = parse_policy(
    """\
[principals.a-admin]
admin = ["tenant-a/**"]

[principals.b-admin]
admin = ["tenant-b/**"]
"""
)


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_rlt_")
    suffix = uuid.uuid4().hex[:8]
    a_role, b_role = f"sk_rlt_a_{suffix}", f"sk_rlt_b_{suffix}"
    _pg(f'CREATE ROLE "{a_role}" LOGIN', f'CREATE ROLE "{b_role}" LOGIN')
    try:
        yield schema, a_role, b_role
    finally:
        drop_schema(schema)
        _pg(
            f'DROP OWNED BY "{a_role}", "{b_role}"',
            f'DROP ROLE "{a_role}"',
            f'DROP ROLE "{b_role}"',
        )


async def test_each_tenant_admin_backs_up_its_namespace_under_row_security(
    roles: tuple[str, str, str], tmp_path: Path
) -> None:
    schema, a_role, b_role = roles
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=KEYRING) as owner:
        for agent_id in ["tenant-a/t1", "tenant-a/eu/t2", "tenant-b/u1"]:
            for n in range(3):
                await owner.save(agent_id, {"n": n})
    await enforce_in_postgres(
        POSTGRES_DSN, schema, POLICY, roles={"a-admin": a_role, "b-admin": b_role}
    )
    key = BackupKey(os.urandom(32))

    def open_in(ns: str, principal: str, role: str) -> StateStore:
        return StateStore(
            f"{_as(role)}?schema={schema}", keyring=KEYRING, namespace=ns,
            principal=principal, policy=POLICY, audit=Audit(),
        )  # fmt: skip

    async with open_in("tenant-a", "a-admin", a_role) as tenant_a:
        result = await backup(tenant_a, tmp_path / "a.skb", key)
        assert result.agents == 2
        report = await apply_retention(tenant_a, RetentionPolicy.parse("* keep_last=1"))
        assert {(a.agent_id, a.outcome) for a in report.actions} == {
            ("t1", "done"),
            ("eu/t2", "done"),
        }
        # a tenant's role may not trim the feed all tenants share: said, not silent
        assert all("feed's floor not raised" in a.reason for a in report.actions)
        assert report.feed_through is None
    async with open_in("tenant-a", "b-admin", b_role) as stranger:
        with pytest.raises(AccessDenied, match="namespace 'tenant-a'"):
            await backup(stranger, tmp_path / "stolen.skb", key)
        # below the store's check, the role sees no row of tenant-a either
        assert await stranger.backend.head("tenant-a/t1") == 0
        assert [a.agent_id async for a in StateStore(stranger.backend).iter_agents()] == [
            "tenant-b/u1"
        ]
    assert not (tmp_path / "stolen.skb").exists()
    async with open_in("tenant-b", "b-admin", b_role) as tenant_b:
        assert (await backup(tenant_b, tmp_path / "b.skb", key)).agents == 1
    # tenant-a's backup restores into another store's tenant-a, by its admin
    with_target = namespace(tmp_path, "sk_rlt_dst_")
    try:
        target = StateStore(
            f"{POSTGRES_DSN}?schema={with_target}", keyring=KEYRING, namespace="tenant-a",
            principal="a-admin", policy=POLICY, audit=Audit(),
        )  # fmt: skip
        async with target:
            assert (await restore(target, [tmp_path / "a.skb"], key)).agents == 2
            assert (await target.load("eu/t2")).data == {"n": 2}
    finally:
        drop_schema(with_target)
    await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [a_role, b_role])
