"""A tenant's admin runs the namespace-wide operations on its own namespace, and
nothing else: backup, restore, retention, forget, listing and the change feed of a
store opened in ``tenant-a`` are checked against the namespace (``admin`` on
``tenant-a/**``), not against every namespace (``**``); a principal without it is
refused with AccessDenied naming the namespace, audited, and nothing is touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.url import open_backend
from statekeeper.codec.datakeys import MemoryKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AccessDenied, AgentForgotten
from statekeeper.governance import Audit, AuditLog, Policy, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.shredding import forget

from ..backends._services import fresh_url

POLICY = parse_policy(
    """\
[principals.a-admin]
admin = ["tenant-a/**"]

[principals.b-admin]
admin = ["tenant-b/**"]

[principals.a-support]
admin = ["tenant-a/support/**"]
read = ["tenant-a/**"]

[principals.ops]
admin = ["**"]
"""
)
IDS = ["tenant-a/t1", "tenant-a/support/t2", "tenant-b/u1", "tenant-b/u2"]


KEYRING = Keyring({"k1": bytes(range(32))})


@pytest.fixture(autouse=True)
def _vault(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key vault of the test's own (forget destroys data keys in it)."""
    keyring = Keyring({"k1": bytes(range(32))}, data_keys=MemoryKeyVault())
    monkeypatch.setitem(globals(), "KEYRING", keyring)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _as(backend: object, principal: str, namespace: str | None = "tenant-a") -> StateStore:
    options: dict[str, object] = {} if namespace is None else {"namespace": namespace}
    return StateStore(
        backend, keyring=KEYRING, principal=principal, policy=POLICY, audit=Audit(), **options
    )


async def _entries(store: StateStore) -> list[tuple[str | None, str, str, object]]:
    log = AuditLog(store.backend, KEYRING)
    return [
        (e.principal, e.operation, e.outcome, e.detail.get("namespace"))
        async for e in log.entries()
        if e.agent_id is None
    ]


async def _heads(backend: object) -> dict[str, int]:
    whole = StateStore(backend, keyring=KEYRING)
    return {info.agent_id: info.head_seq async for info in whole.iter_agents()}


def test_the_namespace_check_needs_one_pattern_over_the_whole_subtree() -> None:
    policy = Policy(
        {
            "a": {"admin": ["tenant-a/**"]},
            "wild": {"admin": ["*/**"]},
            "flat": {"admin": ["tenant-a", "tenant-a/*"]},
            "mid": {"admin": ["**/x"]},
            "root": {"admin": [""]},
        }
    )
    assert policy.covers("a", "tenant-a", "admin")
    assert policy.covers("a", "tenant-a/support", "write")
    assert not policy.covers("a", "tenant", "admin")
    assert not policy.covers("a", "tenant-ab", "read")
    assert not policy.covers("a", "", "read")  # the whole store takes **
    assert policy.covers("wild", "tenant-a", "admin") and not policy.covers("wild", "", "admin")
    # every agent of tenant-a/x/y is out of reach of both patterns
    assert not policy.covers("flat", "tenant-a", "admin")
    assert not policy.covers("mid", "tenant-a", "admin")
    assert not policy.covers("root", "", "admin")
    assert not policy.covers("nobody", "tenant-a", "read")
    with pytest.raises(AccessDenied, match="'tenant-a/\\*\\*'") as refused:
        policy.check_namespace("flat", "tenant-a", "admin", "backup")
    assert refused.value.namespace == "tenant-a" and refused.value.agent_id is None
    assert "in namespace 'tenant-a'" in str(refused.value)
    with pytest.raises(AccessDenied, match="does not name it"):
        policy.check_namespace("nobody", "tenant-a", "read", "list")
    with pytest.raises(AccessDenied, match="every namespace"):
        policy.check_namespace("a", "", "admin", "backup")


async def test_a_tenant_admin_backs_up_and_restores_its_namespace_only(
    engine: str, tmp_path: Path
) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "a.skb"
    with fresh_url(engine, tmp_path, "src.db") as url:
        backend = open_backend(url)
        ops = _as(backend, "ops", None)
        for agent_id in IDS:
            await ops.save(agent_id, {"id": agent_id})
        result = await backup(_as(backend, "a-admin"), file, bkey)
        assert result.agents == 2  # tenant-a's two agents, no audit log, no tenant-b
        for who, where in [("b-admin", "tenant-a"), ("a-support", "tenant-a"),
                           ("a-admin", None)]:  # fmt: skip
            refused = tmp_path / f"{who}-{where}.skb"
            with pytest.raises(AccessDenied) as denied:
                await backup(_as(backend, who, where), refused, bkey)
            assert denied.value.namespace == (where or "")
            assert not refused.exists()
        entries = await _entries(ops)
        assert ("a-admin", "backup", "ok", None) in entries
        assert ("b-admin", "backup", "denied", "tenant-a") in entries
        assert ("a-support", "backup", "denied", "tenant-a") in entries
        assert ("a-admin", "backup", "denied", "") in entries
        await ops.close()
    with fresh_url(engine, tmp_path, "dst.db") as url:
        backend = open_backend(url)
        with pytest.raises(AccessDenied, match="namespace 'tenant-a'"):
            await restore(_as(backend, "b-admin"), [file], bkey)
        with pytest.raises(AccessDenied, match="namespace 'tenant-a'"):
            await restore(_as(backend, "a-support"), [file], bkey)
        assert await _heads(backend) == {}  # nothing restored
        restored = await restore(_as(backend, "a-admin"), [file], bkey)
        assert restored.agents == 2
        assert await _heads(backend) == {"tenant-a/t1": 1, "tenant-a/support/t2": 1}
        ops = _as(backend, "ops", None)
        entries = await _entries(ops)
        assert ("b-admin", "restore", "denied", "tenant-a") in entries
        assert ("a-admin", "restore", "ok", None) in entries
        await ops.close()


async def test_a_tenant_admin_runs_retention_and_forgets_in_its_namespace_only(
    engine: str, tmp_path: Path
) -> None:
    with fresh_url(engine, tmp_path) as url:
        backend = open_backend(url)
        ops = _as(backend, "ops", None)
        for agent_id in IDS:
            for n in range(3):
                await ops.save(agent_id, {"n": n})
        policy = RetentionPolicy.parse("* keep_last=1")
        before = await _heads(backend)
        for who in ["b-admin", "a-support"]:
            with pytest.raises(AccessDenied, match="namespace 'tenant-a'"):
                await apply_retention(_as(backend, who), policy)
        # a dry run only reads: a-support may read all of tenant-a
        planned = await apply_retention(_as(backend, "a-support"), policy, dry_run=True)
        assert {a.agent_id for a in planned.actions} == {"t1", "support/t2"}
        with pytest.raises(AccessDenied):
            await apply_retention(_as(backend, "b-admin"), policy, dry_run=True)
        tenant_a = _as(backend, "a-admin")
        report = await apply_retention(tenant_a, policy)
        assert {(a.agent_id, a.outcome) for a in report.actions} == {
            ("t1", "done"),
            ("support/t2", "done"),
        }
        with pytest.raises(AccessDenied):
            await forget(_as(backend, "b-admin"), "t1")
        await forget(tenant_a, "t1")
        with pytest.raises(AgentForgotten):
            await tenant_a.load("t1")
        # tenant-b: untouched by all of it
        after = await _heads(backend)
        assert after["tenant-b/u1"] == before["tenant-b/u1"]
        assert (await ops.load("tenant-b/u2")).data == {"n": 2}
        entries = await _entries(ops)
        assert ("b-admin", "retention", "denied", "tenant-a") in entries
        assert ("a-support", "retention", "denied", "tenant-a") in entries
        await ops.close()


async def test_listing_a_namespace_needs_read_somewhere_in_it(engine: str, tmp_path: Path) -> None:
    with fresh_url(engine, tmp_path) as url:
        backend = open_backend(url)
        ops = _as(backend, "ops", None)
        for agent_id in IDS:
            await ops.save(agent_id, {"id": agent_id})
        tenant_a = _as(backend, "a-admin")
        assert [i.agent_id for i in await tenant_a.list_agents()] == ["support/t2", "t1"]
        assert await tenant_a.count_agents() == 2
        assert {p.agent_id for p in (await tenant_a.verify()).problems} == set()
        # tenant-b's admin sees nothing of tenant-a: refused, not an empty page
        other = _as(backend, "b-admin")
        for call in (other.list_agents, other.count_agents, other.verify):
            with pytest.raises(AccessDenied, match="no agent in namespace 'tenant-a'"):
                await call()
        with pytest.raises(AccessDenied, match="tenant-a"):
            await _as(backend, "b-admin", "tenant-a/support").list_agents()
        with pytest.raises(AccessDenied):
            await _as(backend, "b-admin").subscribe().next_batch()
        # a-support reads tenant-a and below: lists both, may admin only support/
        support = _as(backend, "a-support")
        assert await support.count_agents() == 2
        entries = await _entries(ops)
        assert ("b-admin", "list", "denied", "tenant-a") in entries
        await ops.close()
