"""``keys generate`` never hands out the id of a retired key: after a rotation has
retired k1..k22 (records, backups, witnesses and idempotency records still name them),
the next key is k24, not k2 (which made the automatic witness's mark of an agent
written under the old k2 read as a rollback, and old backups "wrong key material")."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from statekeeper.cli import app


def _ids(path: Path) -> tuple[str, list[str]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc["active"], list(doc["keys"])


def test_the_next_key_id_follows_the_highest_not_the_count(
    runner: CliRunner, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"
    for _ in range(23):
        assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    assert _ids(keys)[0] == "k23"
    doc = json.loads(keys.read_text(encoding="utf-8"))
    doc["keys"] = {"k23": doc["keys"]["k23"]}  # k1..k22 retired after the rekey
    keys.write_text(json.dumps(doc), encoding="utf-8")
    result = runner.invoke(app, ["keys", "generate", "--key-file", str(keys)])
    assert result.exit_code == 0 and "'k24'" in result.output, result.output
    assert _ids(keys) == ("k24", ["k23", "k24"])
    named = runner.invoke(app, ["keys", "generate", "--key-file", str(keys), "--id", "k99x"])
    assert named.exit_code == 0
    assert "'k25'" in runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).output
