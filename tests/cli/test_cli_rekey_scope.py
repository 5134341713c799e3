"""``rekey`` and ``keys status`` run as a principal that administers part of the store
(``--as`` without admin on ``**``) cover that part only: they say so, in words and in
``--json`` (``whole_store``), so that nobody retires a key that other namespaces still
need on the word of a narrow run."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import Keyring, SyncStateStore
from statekeeper.cli import app

POLICY = '[principals.tenant]\nadmin = ["acme/**"]\n[principals.ops]\nadmin = ["**"]\n'


def _store(tmp_path: Path, runner: CliRunner) -> tuple[str, list[str], str]:
    keys = tmp_path / "keys.json"
    assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    url = f"sqlite:///{tmp_path / 'tenants.db'}"
    with SyncStateStore(url, keyring=Keyring.from_file(keys)) as store:
        for agent_id in ("acme/a", "acme/b", "globex/c"):
            store.save(agent_id, {"n": 1})
    result = runner.invoke(app, ["keys", "generate", "--key-file", str(keys)])  # k2 active
    assert result.exit_code == 0, result.output
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    return url, ["--policy", str(policy)], str(keys)


def test_a_narrow_rekey_says_it_covered_part_of_the_store(
    runner: CliRunner, tmp_path: Path
) -> None:
    url, policy, keys = _store(tmp_path, runner)
    common = ["--db", url, "--key-file", keys]
    narrow = runner.invoke(app, ["--as", "tenant", *policy, "rekey", *common])
    assert narrow.exit_code == 0, narrow.output
    assert "only the agents principal 'tenant' may see" in narrow.output
    assert "before retiring a key" in narrow.output
    as_json = runner.invoke(app, ["--as", "tenant", *policy, "rekey", *common, "--json"])
    assert json.loads(as_json.stdout)["whole_store"] is False
    # its count of keys is partial too, and says so: globex/c is still under k1
    status = runner.invoke(app, ["--as", "tenant", *policy, "keys", "status", *common])
    assert status.exit_code == 0, status.output
    assert "k1" not in status.output.split("counted only")[0]
    assert "counted only the agents principal 'tenant' may read" in status.output
    status_json = runner.invoke(
        app, ["--as", "tenant", *policy, "keys", "status", *common, "--json"]
    )
    assert json.loads(status_json.stdout)["whole_store"] is False
    whole = json.loads(runner.invoke(app, ["keys", "status", *common, "--json"]).stdout)
    assert whole["whole_store"] is True and whole["usage"].get("k1", 0) > 0
    # a store admin's run covers the store and says nothing of the kind
    full = runner.invoke(app, ["--as", "ops", *policy, "rekey", *common])
    assert full.exit_code == 0 and "only the agents" not in full.output
    after = json.loads(runner.invoke(app, ["keys", "status", *common, "--json"]).stdout)
    assert after["whole_store"] is True and set(after["usage"]) == {"k2"}
