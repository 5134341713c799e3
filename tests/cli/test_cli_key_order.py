"""``keys status`` lists key ids in natural order (k1, k2, ..., k10, k11), not as text
(k1, k10, k11, k2): after ten rotations the active and the oldest keys were scattered."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app
from statekeeper.codec.keys import Keyring

ORDER = ["k1", "k2", "k3", "k9", "k10", "k11"]


def _store(runner: CliRunner, tmp_path: Path) -> tuple[str, Path]:
    keys = tmp_path / "keys.json"
    for _ in range(11):
        assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    url = f"sqlite:///{tmp_path / 'store.db'}"
    for key_id in reversed(ORDER):  # written in an order that is neither text nor natural
        store = SyncStateStore(url, keyring=Keyring.from_file(keys, active=key_id))
        try:
            store.save(f"agent-{key_id}", {"n": 1})
        finally:
            store.close()
    return url, keys


def test_keys_status_json_in_natural_order(runner: CliRunner, tmp_path: Path) -> None:
    url, keys = _store(runner, tmp_path)
    result = runner.invoke(app, ["keys", "status", "--db", url, "--key-file", str(keys), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert [k for k in info["usage"] if not k.startswith("(")] == ORDER
    assert info["keyring"] == [f"k{n}" for n in range(1, 12)]


def test_keys_status_table_in_natural_order(runner: CliRunner, tmp_path: Path) -> None:
    url, keys = _store(runner, tmp_path)
    result = runner.invoke(app, ["keys", "status", "--db", url, "--key-file", str(keys)])
    assert result.exit_code == 0, result.output
    rows = [line.split()[1] for line in result.output.splitlines() if line.split()[1:2]]
    assert [r for r in rows if r in ORDER] == ORDER, result.output
