"""A store that keeps an audit log records its mutations also when it is opened without a
principal (no ``--as``; a plain ``StateStore``): the entry names no principal (``-``).
Before, ``statekeeper delete`` and ``forget`` without ``--as`` left no entry (holds
had a special case of their own), and ``audit verify`` then failed on the events the
delete removed "without the audit log"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import Audit, AuditLog
from statekeeper.governance.backup import BackupKey, backup
from statekeeper.governance.shredding import forget
from tests.keyfiles import write_key_file

from ..cli._subprocess import Run, cli_in_process
from ._audited import ADMIN_POLICY, save_audited


@pytest.fixture
def audited(tmp_path: Path) -> tuple[Path, Path]:
    """(store, key file with a key vault): agents acme/alice, acme/bob, acme/carol
    saved as 'ops', so the store keeps an audit log."""
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    made = cli_in_process("keys", "vault", "init", str(keys))
    assert made.code == 0, str(made)
    db = tmp_path / "s.db"
    save_audited(db, keys, ["acme/alice", "acme/bob", "acme/carol"])
    return db, keys


def _entries(db: Path, keys: Path) -> list[tuple[str, str | None, str | None]]:
    shown = cli_in_process("audit", "--json", "--db", str(db), "--key-file", str(keys))
    assert shown.code == 0, str(shown)
    lines = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    return [(e["operation"], e["principal"], e["agent_id"]) for e in lines]


def _verified(db: Path, keys: Path) -> Run:
    return cli_in_process("audit", "verify", "--db", str(db), "--key-file", str(keys))


def test_delete_and_forget_without_as_are_audited(audited: tuple[Path, Path]) -> None:
    db, keys = audited
    common = ["--db", str(db), "--key-file", str(keys)]
    deleted = cli_in_process("delete", "acme/bob", "--yes", *common)
    assert deleted.code == 0, str(deleted)
    forgot = cli_in_process("forget", "acme/carol", "--yes", "--purge", *common)
    assert forgot.code == 0, str(forgot)
    after = [e for e in _entries(db, keys) if e[0] != "save"]
    assert ("delete", None, "acme/bob") in after, after  # main: no entry
    assert ("forget", None, "acme/carol") in after, after
    assert ("delete", None, "acme/carol") in after, after  # --purge's delete
    verified = _verified(db, keys)
    assert verified.code == 0, str(verified)  # main: 1, events removed unrecorded
    shown = cli_in_process("audit", *common)
    assert any(" - " in line and "delete" in line for line in shown.stdout.splitlines())


def test_a_store_without_an_audit_log_gets_none(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    db = tmp_path / "s.db"
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        store.save("acme/bob", {"n": 1})
    common = ["--db", str(db), "--key-file", str(keys)]
    deleted = cli_in_process("delete", "acme/bob", "--yes", *common)
    assert deleted.code == 0, str(deleted)
    assert _entries(db, keys) == []  # no log started by a delete


async def test_forget_through_a_plain_store_that_keeps_a_log_is_audited(tmp_path: Path) -> None:
    vault = SqliteKeyVault(tmp_path / "vault.db")
    keys = Keyring({"k1": bytes(range(32))}, data_keys=vault)
    async with StateStore("memory://", keyring=keys) as plain:
        ops = StateStore(
            plain.backend, keyring=keys, principal="ops", policy=ADMIN_POLICY, audit=Audit()
        )
        await ops.save("acme/alice", {"n": 1})  # the store now keeps an audit log
        await backup(plain, tmp_path / "b.skb", BackupKey(os.urandom(32)))
        result = await forget(plain, "acme/alice", purge=True)
        assert result.destroyed
        log = AuditLog(plain.backend, keys)
        ops_seen = [(e.principal, e.operation) async for e in log.entries()]
        assert (None, "backup") in ops_seen, ops_seen  # main: none
        assert (None, "forget") in ops_seen, ops_seen  # main: none
        assert (await log.verify()).ok
