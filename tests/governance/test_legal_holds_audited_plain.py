"""Placing and releasing a legal hold without a principal (no ``--as``) on a store that
keeps an audit log is audited too, as the docs promise: the entry names no principal
(``-``), as the audit log names every unprincipaled entry."""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper import StateStore, SyncStateStore
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import Audit, AuditLog
from statekeeper.governance.holds import add_hold, remove_hold
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process, one_error_line
from ._audited import ADMIN_POLICY, save_audited

KEY = bytes(range(32))


async def test_a_hold_placed_and_released_on_a_plain_store_with_an_audit_log_is_audited() -> None:
    keys = Keyring({"k1": KEY})
    async with StateStore("memory://", keyring=keys) as plain:
        ops = StateStore(
            plain.backend, keyring=keys, principal="ops", policy=ADMIN_POLICY, audit=Audit()
        )
        await ops.save("acme/alice", {"n": 1})  # the store now keeps an audit log
        assert await add_hold(plain, "acme/alice", "Smith v. Acme")
        assert await remove_hold(plain, "acme/alice", "case closed")
        assert not await remove_hold(plain, "acme/alice")  # nothing done: nothing recorded
        log = AuditLog(plain.backend, keys)
        held = [
            (e.principal, e.operation, e.outcome, e.detail.get("reason"))
            async for e in log.entries()
            if "hold" in e.operation
        ]
        assert held == [
            (None, "hold", "ok", "Smith v. Acme"),
            (None, "release-hold", "ok", "case closed"),
        ]
        assert (await log.verify()).ok


async def test_a_store_without_an_audit_log_gets_none_from_a_hold() -> None:
    keys = Keyring({"k1": KEY})
    async with StateStore("memory://", keyring=keys) as plain:
        await plain.save("acme/alice", {"n": 1})
        assert await add_hold(plain, "acme/alice", "Smith v. Acme")
        assert [e async for e in AuditLog(plain.backend, keys).entries()] == []


def test_hold_add_and_remove_without_as_show_in_statekeeper_audit(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    db = tmp_path / "s.db"
    save_audited(db, keys, ["acme/alice"])  # the store keeps an audit log
    common = ["--db", str(db), "--key-file", str(keys)]
    placed = cli_in_process("hold", "add", "acme/alice", "--reason", "Smith v. Acme", *common)
    assert placed.code == 0, str(placed)
    released = cli_in_process("hold", "remove", "acme/alice", "--reason", "case closed", *common)
    assert released.code == 0, str(released)
    shown = cli_in_process("audit", "--json", *common)
    assert shown.code == 0, str(shown)
    entries = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    held = [(e["operation"], e["principal"]) for e in entries if "hold" in e["operation"]]
    assert held == [("hold", None), ("release-hold", None)]


def test_audit_refuses_an_unknown_operation_naming_the_known_ones(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    db = tmp_path / "s.db"
    with SyncStateStore(
        f"sqlite:///{db}", keyring=Keyring.from_file(keys), principal="ops", policy=ADMIN_POLICY,
        audit=Audit(),
    ) as store:  # fmt: skip
        store.save("acme/alice", {"n": 1})
    common = ["--db", str(db), "--key-file", str(keys)]
    bogus = cli_in_process("audit", "--op", "bogus", *common)
    assert bogus.code == 2, str(bogus)
    line = one_error_line(bogus)
    assert "'bogus'" in line and "--op" in line
    assert "save" in line and "hold" in line and "release-hold" in line
    # a known operation with no entry yet is not an error: none to show
    none = cli_in_process("audit", "--op", "restore", *common)
    assert none.code == 0 and "no audit entries" in none.stdout, str(none)
    saved = cli_in_process("audit", "--op", "save", "--json", *common)
    assert saved.code == 0 and json.loads(saved.stdout.splitlines()[0])["operation"] == "save"
