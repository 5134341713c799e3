"""``statekeeper audit`` and ``audit verify`` on a store whose audit log is empty check
the key on a stored agent first (a wrong key is an error, not "no entries"). A
forgotten (crypto-shredded) agent cannot be read by any key: it says nothing about
the key given. (Before: when the first agent listed was forgotten, both commands
failed with "agent ... was forgotten" and the log could not be listed or verified.)"""

from __future__ import annotations

from pathlib import Path

from statekeeper import SyncStateStore
from statekeeper.codec.keys import Keyring, generate_key
from tests.keyfiles import write_key_file

from ..cli._subprocess import cli_in_process


def test_audit_and_audit_verify_pass_over_a_forgotten_agent(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    write_key_file(keys, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    db = tmp_path / "live.db"
    with SyncStateStore(f"sqlite:///{db}", keyring=Keyring.from_file(keys)) as store:
        store.save("acme/alice", {"email": "alice@example.com"})
        store.save("acme/bob", {"email": "bob@example.com"})
    common = ["--db", str(db), "--key-file", str(keys)]
    gone = cli_in_process("forget", "acme/alice", "--yes", *common)
    assert gone.code == 0, str(gone)
    listed = cli_in_process("audit", *common)
    assert listed.code == 0, str(listed)
    verified = cli_in_process("audit", "verify", *common)
    assert verified.code == 0, str(verified)
    # a wrong key is still found out on the agent that can be read
    wrong = tmp_path / "wrong.json"
    write_key_file(wrong, {"active": "k1", "keys": {"k1": generate_key()}, "data_keys": "vault.db"})
    refused = cli_in_process("audit", "--db", str(db), "--key-file", str(wrong))
    assert refused.code != 0, str(refused)
