"""The tools that work below a store's public calls, on a store opened in a namespace:
leases, retention, backup/restore, forget, and the errors every call raises. Each
takes relative ids, touches only its namespace, and names relative ids back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.codec.datakeys import MemoryKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import (
    AccessDenied,
    AgentForgotten,
    AgentNotFound,
    BackupError,
    ConflictError,
    LeaseHeld,
    LeaseLost,
)
from statekeeper.governance import Audit, Policy
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.shredding import forget

from ..backends._services import fresh_url
from .conftest import KEYRING

ENGINES = ["memory", "sqlite", "postgresql", "redis"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_leases_take_relative_ids_and_fence_the_stored_agent(
    tmp_path: Path, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        backend = MemoryBackend() if engine == "memory" else url
        async with StateStore(backend, namespace="acme") as acme:
            whole = StateStore(acme.backend)
            other = StateStore(acme.backend, namespace="globex")
            alice = LeaseManager(acme, holder="alice")
            bob = LeaseManager(acme, holder="bob")
            lease = await alice.acquire("a-1", ttl=30)
            # the lease is on the stored agent: the whole store sees it under its full id
            stored = await LeaseManager(whole, holder="x").current("acme/a-1")
            assert stored is not None and stored.holder == "alice"
            assert lease.agent_id == "a-1" and lease.stored_id == "acme/a-1"
            assert await LeaseManager(whole, holder="x").current("a-1") is None
            current = await bob.current("a-1")
            assert current is not None and current.agent_id == "a-1"
            # another namespace's a-1 is another agent: its lease is free
            assert (await LeaseManager(other, holder="bob").acquire("a-1")).token >= 1
            with pytest.raises(LeaseHeld) as held:
                await bob.acquire("a-1")
            assert held.value.agent_id == "a-1" and "'acme/a-1'" not in str(held.value)
            # a write under the lease is fenced on the stored agent
            await acme.save("a-1", {"n": 1}, lease=lease)
            await lease.renew()
            assert await lease.release() is True
            newer = await bob.acquire("a-1")
            with pytest.raises(LeaseLost) as lost:
                await acme.save("a-1", {"n": 2}, lease=lease)
            assert lost.value.agent_id == "a-1" and "acme/a-1" not in str(lost.value)
            await acme.save("a-1", {"n": 3}, lease=newer)
            assert (await whole.load("acme/a-1")).data == {"n": 3}
            await newer.release()
            await other.flush()


async def test_leases_on_a_governed_namespaced_store_check_and_audit_full_ids(
    policy: Policy,
) -> None:
    backend = MemoryBackend()
    alice = StateStore(backend, namespace="acme/support", principal="alice", policy=policy,
                       audit=Audit(), keyring=KEYRING)  # fmt: skip
    sales = StateStore(backend, namespace="acme/sales", principal="alice", policy=policy,
                       audit=Audit(), keyring=KEYRING)  # fmt: skip
    lease = await LeaseManager(alice, holder="w").acquire("t-1")
    await lease.release()
    with pytest.raises(AccessDenied) as denied:
        await LeaseManager(sales, holder="w").acquire("s-1")  # alice only reads sales
    assert denied.value.agent_id == "s-1"
    ops = StateStore(backend, principal="ops", policy=policy, audit=Audit(), keyring=KEYRING)
    from statekeeper.governance import AuditLog

    await alice.flush()
    await sales.flush()
    entries = [e async for e in AuditLog(backend, KEYRING).entries()]
    seen = {(e.operation, e.agent_id, e.outcome) for e in entries}
    assert ("lease", "acme/support/t-1", "ok") in seen
    assert ("lease", "acme/sales/s-1", "denied") in seen
    await ops.close()


async def test_errors_name_the_relative_id() -> None:
    backend = MemoryBackend()
    async with StateStore(backend, namespace="acme/support") as support:
        with pytest.raises(AgentNotFound) as missing:
            await support.load("a-9")
        assert missing.value.agent_id == "a-9"
        assert str(missing.value) == "agent 'a-9' not found"
        await support.save("a-1", {"n": 1})
        with pytest.raises(ConflictError) as conflict:
            await support.save("a-1", {"n": 2}, expected_seq=0)
        assert conflict.value.agent_id == "a-1"
        assert "acme/support" not in str(conflict.value)
        with pytest.raises(AgentNotFound) as snapshot:
            await support.snapshot("a-9")
        assert snapshot.value.agent_id == "a-9"
        with pytest.raises(AgentNotFound) as at_time:
            await support.load("a-9", at_seq=1)
        assert str(at_time.value) == "agent 'a-9' not found"


async def test_retention_through_a_namespace_touches_only_it() -> None:
    policy = RetentionPolicy.parse("*  keep_last=2\nacme/stale  ttl=1h\nhold  acme/legal/*")
    t0 = 1_000_000.0
    backend = MemoryBackend()
    whole = StateStore(backend, clock=lambda: t0)
    acme = StateStore(backend, namespace="acme", clock=lambda: t0)
    for agent_id in ["acme/a", "acme/stale/s", "acme/legal/l", "globex/g", "acme2/x"]:
        for i in range(6):
            await whole.save(agent_id, {"i": i})
    dry = await apply_retention(acme, policy, dry_run=True, now=t0 + 7200)
    assert {(a.agent_id, a.kind) for a in dry.actions} == {("a", "compact"), ("stale/s", "purge")}
    report = await apply_retention(acme, policy, now=t0 + 7200)
    assert (report.scanned, report.held, report.purged) == (3, 1, 1)
    assert report.last_agent == "stale/s"
    assert [e.seq for e in await backend.read("acme/a")] == [5, 6]
    assert await whole.head("acme/stale/s") == 0
    # outside the namespace nothing moved (the same policy applies to them)
    for untouched in ["globex/g", "acme2/x", "acme/legal/l"]:
        assert len(await backend.read(untouched)) == 6
    assert (await acme.verify()).ok
    await acme.flush()
    await whole.close()


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_backup_of_a_namespace_holds_it_only_and_restores(
    tmp_path: Path, engine: str
) -> None:
    key = BackupKey(os.urandom(32))
    file = tmp_path / "acme.skb"
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=KEYRING) as whole:
            for agent_id in ["acme/a", "acme/eu/b", "acmex/c", "globex/d"]:
                await whole.save(agent_id, {"id": agent_id})
            acme = StateStore(whole.backend, namespace="acme", keyring=KEYRING)
            result = await backup(acme, file, key)
            assert result.agents == 2
            await acme.flush()
            # an incremental needs a parent of the same namespace
            with pytest.raises(BackupError, match="namespace"):
                await backup(whole, tmp_path / "inc.skb", key, since=file)
    # into a whole store: the stored ids, nothing else
    async with StateStore("memory://", keyring=KEYRING) as target:
        await restore(target, [file], key)
        assert [i.agent_id async for i in target.iter_agents()] == ["acme/a", "acme/eu/b"]
    # into a view of the same namespace (or one above it): relative ids there
    backend = MemoryBackend()
    async with StateStore(backend, namespace="acme", keyring=KEYRING) as view:
        await restore(view, [file], key)
        assert [i.agent_id async for i in view.iter_agents()] == ["a", "eu/b"]
        assert (await view.load("eu/b")).data == {"id": "acme/eu/b"}
    # a view of another namespace takes nothing
    backend = MemoryBackend()
    async with StateStore(backend, namespace="acme/eu", keyring=KEYRING) as narrow:
        with pytest.raises(BackupError, match="outside namespace 'acme/eu'"):
            await restore(narrow, [file], key)
        assert await StateStore(backend).count_agents() == 0


async def test_forget_through_a_namespace_shreds_the_stored_agent() -> None:
    keys = Keyring({"k1": bytes(range(32))}, data_keys=MemoryKeyVault())
    backend = MemoryBackend()
    whole = StateStore(backend, keyring=keys)
    acme = StateStore(backend, namespace="acme", keyring=keys)
    await acme.save("alice", {"n": 1})
    await acme.save("bob", {"n": 1})
    result = await forget(acme, "alice")
    assert result.agent_id == "alice" and result.destroyed
    with pytest.raises(AgentForgotten):
        await whole.load("acme/alice")
    assert (await whole.load("acme/bob")).data == {"n": 1}
    with pytest.raises(AgentNotFound) as missing:
        await forget(acme, "nobody")
    assert missing.value.agent_id == "nobody"
    await acme.flush()
    await whole.close()


@pytest.mark.parametrize("engine", ENGINES)
async def test_count_agents_counts_the_namespace_only(tmp_path: Path, engine: str) -> None:
    neighbours = ["acme", "acme.x", "acme0", "acmf", "acm/e", "globex/a"]
    inside = ["acme/a", "acme/b/c", "acme/b/d", "acme/\u00e9t\u00e9"]
    with fresh_url(engine, tmp_path) as url:
        backend = MemoryBackend() if engine == "memory" else url
        async with StateStore(backend) as whole:
            for agent_id in neighbours + inside:
                await whole.save(agent_id, {})
            acme = StateStore(whole.backend, namespace="acme")
            assert await acme.count_agents() == 4
            assert await StateStore(whole.backend, namespace="acme/b").count_agents() == 2
            assert await StateStore(whole.backend, namespace="nobody").count_agents() == 0
            assert await whole.backend.count_prefix("acme/") == 4
            assert await whole.count_agents() == 10


async def test_count_agents_of_a_namespace_does_not_list_on_sqlite(tmp_path: Path) -> None:
    from statekeeper.backends.sqlite import SQLiteBackend

    class Listing(SQLiteBackend):
        listed = 0

        async def list_agents(self, after: str | None = None, limit: int = 100) -> list[Any]:
            Listing.listed += 1
            return await super().list_agents(after=after, limit=limit)

    async with StateStore(Listing(str(tmp_path / "c.db")), namespace="acme") as acme:
        for i in range(3):
            await acme.save(f"a-{i}", {})
        Listing.listed = 0
        assert await acme.count_agents() == 3
        assert Listing.listed == 0  # an index range, not a listing
