"""A hold a restore carries over from a backup (into a store that has holds of its own)
keeps how it was placed: its reason, who placed it and when. Before, ``hold list`` showed
the restore's time as "since", no one as "placed by" and a reason with "(restored from
backup ...)" appended; the backup is now named apart (``restored_from``)."""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper import SyncStateStore
from statekeeper.codec.keys import Keyring, generate_key
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process

POLICY = '[principals.ops]\nadmin = ["**"]\n'


def _holds(db: Path, keys: Path) -> dict[str, dict[str, object]]:
    run = cli_in_process("hold", "list", "--json", "--db", str(db), "--key-file", str(keys))
    assert run.code == 0, str(run)
    return {h["pattern"]: h for h in json.loads(run.stdout)}


def test_a_restored_hold_keeps_its_placing(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}})
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    src, dst = tmp_path / "s.db", tmp_path / "t.db"
    for db, agent in ((src, "acme/alice"), (dst, "acme/carol")):
        with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
            store.save(agent, {"n": 1})
        held = cli_in_process(
            "--as", "ops", "--policy", str(policy), "hold", "add", agent,
            "--reason", f"matter of {agent}", "--db", str(db), "--key-file", str(keys),
        )  # fmt: skip
        assert held.code == 0, str(held)
    placed = _holds(src, keys)["acme/alice"]
    assert placed["principal"] == "ops"
    bk = ["--backup-key", str(tmp_path / "backup.key")]
    made = cli_in_process(
        "backup", "--db", str(src), "--to", str(tmp_path / "b.skb"), *bk,
        "--create-backup-key", "--key-file", str(keys), "--json",
    )  # fmt: skip
    assert made.code == 0, str(made)
    backup_id = json.loads(made.stdout)["backup_id"]
    common = ["--db", str(dst), "--key-file", str(keys)]
    done = cli_in_process("restore", str(tmp_path / "b.skb"), *bk, *common)
    assert done.code == 0, str(done)
    restored = _holds(dst, keys)["acme/alice"]
    assert restored["reason"] == "matter of acme/alice"  # main: "... (restored from backup ID)"
    assert restored["principal"] == "ops"  # main: None (the restore's)
    assert restored["at"] == placed["at"]  # main: the restore's time
    assert restored["restored_from"] == backup_id
    table = cli_in_process("hold", "list", *common)
    assert table.code == 0 and backup_id in table.stdout, str(table)
    # the target's own hold is as it was placed there
    assert "restored_from" not in _holds(dst, keys)["acme/carol"]
