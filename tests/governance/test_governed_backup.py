"""Backups and restores on stores opened as a principal: a backup needs admin on every
namespace (it copies every stream, the audit log included), a restore needs admin on
every namespace it writes into; refusals raise AccessDenied, write nothing and are
audited; successful runs land in the store's own audit log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.url import open_backend
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, AuditLog, parse_policy
from statekeeper.governance.backup import BackupKey, backup, restore

from ..backends._services import fresh_url
from .conftest import KEYRING

POLICY = parse_policy(
    """\
[principals.alice]
read = ["**"]

[principals.acme-ops]
admin = ["acme/**"]

[principals.ops]
admin = ["**"]
"""
)


@pytest.fixture(params=["memory", "sqlite"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _open(url: str, principal: str | None) -> StateStore:
    if principal is None:
        return StateStore(url, keyring=KEYRING)
    return StateStore(url, keyring=KEYRING, principal=principal, policy=POLICY, audit=Audit())


async def _entries(store: StateStore) -> list[tuple[str | None, str, str, str | None]]:
    log = AuditLog(store.backend, KEYRING)
    return [(e.principal, e.operation, e.outcome, e.agent_id) async for e in log.entries()]


async def test_a_backup_needs_store_admin_and_is_audited(engine: str, tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    with fresh_url(engine, tmp_path) as url:
        backend = open_backend(url)
        ops = StateStore(backend, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit())
        alice = StateStore(
            backend, keyring=KEYRING, principal="alice", policy=POLICY, audit=Audit()
        )
        await ops.save("acme/t1", {"n": 1})
        await ops.save("globex/g1", {"n": 1})
        refused = tmp_path / "refused.skb"
        with pytest.raises(AccessDenied, match="every namespace"):
            await backup(alice, refused, bkey)  # reading every agent is not enough
        assert not refused.exists()  # nothing written
        result = await backup(ops, tmp_path / "full.skb", bkey)
        assert (result.agents, result.internal) == (2, 1)  # the audit log counted apart
        entries = await _entries(ops)
        assert ("alice", "backup", "denied", None) in entries
        assert ("ops", "backup", "ok", None) in entries
        await ops.close()


async def test_a_restore_needs_admin_where_it_writes_and_is_audited(
    engine: str, tmp_path: Path
) -> None:
    bkey = BackupKey(os.urandom(32))
    acme_only, mixed = tmp_path / "acme.skb", tmp_path / "mixed.skb"
    with fresh_url(engine, tmp_path, "src.db") as url:
        async with _open(url, None) as plain:  # no audit log: only agent streams
            await plain.save("acme/support/t1", {"n": 1})
            await plain.save("acme/t2", {"n": 1})
            await backup(plain, acme_only, bkey)
            await plain.save("globex/g1", {"n": 1})
            await backup(plain, mixed, bkey)
    with fresh_url(engine, tmp_path, "dst.db") as url:
        backend = open_backend(url)

        def as_(principal: str) -> StateStore:
            return StateStore(
                backend, keyring=KEYRING, principal=principal, policy=POLICY, audit=Audit()
            )

        alice, acme_ops = as_("alice"), as_("acme-ops")
        with pytest.raises(AccessDenied, match="admin on namespace 'acme/support'"):
            await restore(alice, [acme_only], bkey)  # reading is not restoring
        with pytest.raises(AccessDenied, match="globex"):
            await restore(acme_ops, [mixed], bkey)  # one agent outside its namespaces
        assert await as_("ops").count_agents() == 0  # nothing restored either time
        result = await restore(acme_ops, [acme_only], bkey)
        assert result.agents == 2
        assert (await alice.load("acme/support/t1")).data == {"n": 1}
        entries = await _entries(alice)
        assert ("alice", "restore", "denied", "acme/support/t1") in entries
        assert ("acme-ops", "restore", "denied", "globex/g1") in entries
        assert ("acme-ops", "restore", "ok", None) in entries
        await alice.close()


async def test_a_governed_backup_restores_with_its_audit_log(engine: str, tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "full.skb"
    with fresh_url(engine, tmp_path, "src.db") as url:
        async with _open(url, "ops") as ops:
            await ops.save("acme/t1", {"n": 1})
            await backup(ops, file, bkey)
    with fresh_url(engine, tmp_path, "dst1.db") as url:
        async with _open(url, "ops") as ops:
            result = await restore(ops, [file], bkey)  # an empty target: the log comes too
            assert (result.agents, result.internal, result.kept_internal) == (1, 1, [])
            entries = await _entries(ops)
            assert entries[0] == ("ops", "save", "ok", "acme/t1")  # the source's history
            assert entries[-1] == ("ops", "restore", "ok", None)
            assert (await AuditLog(ops.backend, KEYRING).verify()).ok
    with fresh_url(engine, tmp_path, "dst2.db") as url:
        backend = open_backend(url)
        acme_ops = StateStore(
            backend, keyring=KEYRING, principal="acme-ops", policy=POLICY, audit=Audit()
        )
        with pytest.raises(AccessDenied, match="every namespace"):
            await restore(acme_ops, [file], bkey)  # the backup holds the audit log
        ops = StateStore(backend, keyring=KEYRING, principal="ops", policy=POLICY, audit=Audit())
        # the target has a log of its own now (the refusal): it is kept, not overwritten
        result = await restore(ops, [file], bkey)
        assert (result.agents, result.kept_internal) == (1, ["\x01sk-audit/log"])
        assert (await ops.load("acme/t1")).data == {"n": 1}
        assert await _entries(ops) == [
            ("acme-ops", "restore", "denied", None),
            ("ops", "restore", "started", None),  # entry first (restoreaudit.py)
            ("ops", "restore", "ok", None),
        ]
        await ops.close()
