"""``witness check`` of a witness exported before a key rotation, once the old key is
retired, says that: the file was made with a key the keyring no longer holds, and how
to go on. (It said "the key does not open this store: wrong key file or keyring?",
which sent the user after the store's key, the one key that was right.)"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import Keyring, SyncStateStore
from statekeeper.cli import app
from statekeeper.security import generate_key


def test_a_witness_sealed_with_a_retired_key_says_so(runner: CliRunner, tmp_path: Path) -> None:
    k1, k2 = generate_key(), generate_key()
    files = {}
    for name, keys, active in (("k1", {"k1": k1}, "k1"), ("both", {"k1": k1, "k2": k2}, "k2")):
        files[name] = tmp_path / f"{name}.json"
        Keyring.write_file(files[name], keys, active)
    files["k2"] = tmp_path / "k2.json"
    Keyring.write_file(files["k2"], {"k2": k2}, "k2")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with SyncStateStore(url, keyring=Keyring.from_file(files["k1"])) as store:
        store.save("a", {"n": 1})
    witness = str(tmp_path / "witness.json")
    exported = runner.invoke(
        app, ["witness", "export", witness, "--db", url, "--key-file", str(files["k1"])]
    )
    assert exported.exit_code == 0, exported.output
    rekeyed = runner.invoke(app, ["rekey", "--db", url, "--key-file", str(files["both"])])
    assert rekeyed.exit_code == 0, rekeyed.output
    result = runner.invoke(
        app, ["witness", "check", witness, "--db", url, "--key-file", str(files["k2"]), "--json"]
    )
    assert result.exit_code == 1
    reason = json.loads(result.stdout)["problems"][0]["reason"]
    assert "made with key 'k1', which is not in the keyring" in reason
    assert "export a new witness after every key rotation" in reason
    assert "wrong key file" not in reason
    # with the old key back in the keyring, it checks
    again = runner.invoke(
        app, ["witness", "check", witness, "--db", url, "--key-file", str(files["both"])]
    )
    assert again.exit_code == 0, again.output
