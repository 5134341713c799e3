"""Retention and crypto-shredding on a store opened as a principal: they check the
policy (admin to destroy, read for a dry run) and land in the store's audit log
without being wired by hand."""

from __future__ import annotations

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import MemoryKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import AccessDenied, AgentForgotten
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.governance.shredding import forget

POLICY = parse_policy(
    """\
[principals.alice]
read = ["acme/**"]
write = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)


async def _entries(store: StateStore, ring: Keyring) -> list[tuple[str | None, str, str]]:
    log = AuditLog(store.backend, ring)
    return [(e.principal, e.operation, e.outcome) async for e in log.entries()]


async def test_forget_needs_admin_and_is_audited() -> None:
    ring = Keyring({"k1": bytes(range(32))}, data_keys=MemoryKeyVault())
    async with StateStore("memory://", keyring=ring) as plain:
        backend = plain.backend
        alice = StateStore(backend, keyring=ring, principal="alice", policy=POLICY, audit=Audit())
        ops = StateStore(backend, keyring=ring, principal="ops", policy=POLICY, audit=Audit())
        await alice.save("acme/t1", {"secret": "x"})
        with pytest.raises(AccessDenied):
            await forget(alice, "acme/t1")  # write is not enough to destroy a key
        assert (await alice.load("acme/t1")).data == {"secret": "x"}  # nothing destroyed
        await forget(ops, "acme/t1")
        with pytest.raises(AgentForgotten):
            await ops.load("acme/t1")
        entries = await _entries(plain, ring)
        assert ("alice", "forget", "denied") in entries
        assert ("ops", "forget", "ok") in entries


async def test_retention_needs_admin_to_purge_and_is_audited() -> None:
    ring = Keyring({"k1": bytes(range(32))})
    policy = RetentionPolicy.parse("acme keep_last=2\n")
    async with StateStore("memory://", keyring=ring) as plain:
        backend = plain.backend
        alice = StateStore(backend, keyring=ring, principal="alice", policy=POLICY, audit=Audit())
        ops = StateStore(backend, keyring=ring, principal="ops", policy=POLICY, audit=Audit())
        for n in range(6):
            await alice.save("acme/t1", {"n": n})
        planned = await apply_retention(alice, policy, dry_run=True)  # reading suffices
        assert [a.outcome for a in planned.actions] == ["dry-run"]
        refused = await apply_retention(alice, policy)
        assert [a.outcome for a in refused.actions] == ["refused"]
        assert await plain.head("acme/t1") == 6
        assert [e.seq async for e in plain.history("acme/t1")] == [1, 2, 3, 4, 5, 6]
        done = await apply_retention(ops, policy)
        assert [a.outcome for a in done.actions] == ["done"]
        entries = await _entries(plain, ring)
        assert ("alice", "retention", "denied") in entries
        assert ("ops", "compact", "done") in entries
