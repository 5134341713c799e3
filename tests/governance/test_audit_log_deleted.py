"""An audit log deleted whole (its events and its head row) is found: the store carries
a marker set with the log's first entry, so ``audit verify`` tells a deleted log from
none, and a writer that finds the log empty in a marked store says so in the first
entry of the new one. (Before: "audit log: 0 entries, ok", exit 0, and the next
governed write started a fresh log that verified.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from statekeeper import StateStore
from statekeeper.arguments import AUDIT_STREAM
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.governance import Audit, AuditLog
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process
from ._audited import ADMIN_POLICY, save_audited


def _delete_the_log(db: Path) -> None:
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM sk_events WHERE agent_id = ?", (AUDIT_STREAM,))
        conn.execute("DELETE FROM sk_agents WHERE agent_id = ?", (AUDIT_STREAM,))
    conn.close()


def _store(tmp_path: Path) -> tuple[Path, Path]:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    db = tmp_path / "x.db"
    save_audited(db, keys, [f"a/t-{i}" for i in range(6)])
    return db, keys


def test_audit_verify_fails_on_a_store_whose_log_was_deleted(tmp_path: Path) -> None:
    db, keys = _store(tmp_path)
    common = ["--db", str(db), "--key-file", str(keys)]
    assert cli_in_process("audit", "verify", *common).code == 0
    _delete_the_log(db)
    verified = cli_in_process("audit", "verify", *common, "--json")
    assert verified.code == 1, str(verified)
    report = json.loads(verified.stdout)
    assert not report["ok"]
    assert any("the log is missing" in p for p in report["problems"]), report


async def test_a_new_log_in_place_of_a_deleted_one_says_so(tmp_path: Path) -> None:
    db, keys = _store(tmp_path)
    _delete_the_log(db)
    keyring = Keyring.from_file(keys)
    url = f"sqlite:///{db}"
    async with StateStore(url, keyring=keyring) as store:
        report = await AuditLog(store.backend, keyring).verify()
        assert not report.ok and "the log is missing" in report.problems[0], report.problems
    async with StateStore(
        url, keyring=keyring, principal="ops", policy=ADMIN_POLICY, audit=Audit()
    ) as ops:
        await ops.save("a/t-9", {"n": 1})
        log = AuditLog(ops.backend, keyring)
        report = await log.verify()
        entries = [(e.seq, e.operation, e.outcome) async for e in log.entries()]
    assert entries == [(1, "audit", "log-missing"), (2, "save", "ok")]
    assert any("the log before it was deleted" in p for p in report.problems), report.problems


async def test_a_store_that_never_kept_a_log_verifies(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    keyring = Keyring.from_file(keys)
    async with StateStore(f"sqlite:///{tmp_path / 'plain.db'}", keyring=keyring) as store:
        await store.save("a/t-1", {"n": 1})
        report = await AuditLog(store.backend, keyring).verify()
    assert report.ok and report.entries == 0, report.problems
