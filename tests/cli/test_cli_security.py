"""``keys generate|status``, ``rekey`` and ``witness export|check`` from the command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app
from statekeeper.security import Keyring


@pytest.fixture
def keys(tmp_path: Path, runner: CliRunner) -> Path:
    path = tmp_path / "keys.json"
    result = runner.invoke(app, ["keys", "generate", "--key-file", str(path)])
    assert result.exit_code == 0, result.output
    assert "added key 'k1'" in result.output
    return path


def test_help(runner: CliRunner) -> None:
    for command in (["keys"], ["rekey"], ["witness"], ["keys", "status"], ["witness", "check"]):
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output


def test_keys_generate_prints_or_extends_a_key_file(runner: CliRunner, keys: Path) -> None:
    printed = runner.invoke(app, ["keys", "generate", "--id", "kx"])
    assert printed.exit_code == 0 and printed.output.startswith("kx=")
    result = runner.invoke(app, ["keys", "generate", "--key-file", str(keys), "--no-activate"])
    assert result.exit_code == 0 and "'k2'" in result.output and "active" not in result.output
    ring = Keyring.from_file(keys)
    assert ring.ids == ["k1", "k2"] and ring.active_id == "k1"
    result = runner.invoke(app, ["keys", "generate", "--key-file", str(keys), "--id", "k2"])
    assert result.exit_code == 2 and "already" in result.output


def test_encrypt_a_store_rotate_and_witness(
    runner: CliRunner, url: str, db: Path, keys: Path, tmp_path: Path
) -> None:
    status = runner.invoke(app, ["keys", "status", "--db", url, "--key-file", str(keys), "--json"])
    assert status.exit_code == 0, status.output
    before = json.loads(status.stdout)
    assert before["active"] == "k1" and set(before["usage"]) == {"(none)"}
    # the key is set but the store is still plaintext: reads are refused…
    env = {"STATEKEEPER_KEY_FILE": str(keys)}
    refused = runner.invoke(app, ["show", "alpha", "--db", url], env=env)
    assert refused.exit_code == 2 and "not encrypted" in refused.output
    # …until rekey encrypts it
    result = runner.invoke(app, ["rekey", "--db", url, "--key-file", str(keys), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["agents"] == 3 and summary["events_reencrypted"] == 9
    assert b"research" not in db.read_bytes()
    shown = runner.invoke(app, ["show", "alpha", "--db", url, "--json"], env=env)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["data"]["task"] == "research"
    without = runner.invoke(app, ["show", "alpha", "--db", url])
    assert (
        without.exit_code == 2
        and "'k1'" in without.output
        and "not in the keyring" in without.output
    )
    # witness, rotate, the witness still holds
    witness = tmp_path / "witness.json"
    exported = runner.invoke(app, ["witness", "export", str(witness), "--db", url], env=env)
    assert exported.exit_code == 0 and "3 stream(s)" in exported.output
    assert runner.invoke(app, ["keys", "generate", "--key-file", str(keys)]).exit_code == 0
    rotated = runner.invoke(app, ["rekey", "--db", url], env=env)
    assert rotated.exit_code == 0 and "under 'k2'" in rotated.output
    status = runner.invoke(app, ["keys", "status", "--db", url, "--json"], env=env)
    assert set(json.loads(status.stdout)["usage"]) == {"k2"}
    checked = runner.invoke(app, ["witness", "check", str(witness), "--db", url], env=env)
    assert checked.exit_code == 0 and "OK" in checked.output
    verified = runner.invoke(app, ["verify", "--db", url], env=env)
    assert verified.exit_code == 0, verified.output
    # a rollback of the whole file is caught by the witness
    backup = tmp_path / "backup.db"
    shutil.copy(db, backup)
    assert runner.invoke(app, ["delete", "beta", "--db", url, "--yes"], env=env).exit_code == 0
    store = SyncStateStore(url, keyring=Keyring.from_file(keys))
    try:
        store.save("alpha", {"task": "research", "more": 1})
    finally:
        store.close()
    witness2 = tmp_path / "witness2.json"
    exported = runner.invoke(app, ["witness", "export", str(witness2), "--db", url], env=env)
    assert exported.exit_code == 0
    shutil.copy(backup, db)  # the rollback (the store was closed: no WAL left behind)
    rolled = runner.invoke(app, ["witness", "check", str(witness2), "--db", url, "--json"], env=env)
    assert rolled.exit_code == 1
    problems = json.loads(rolled.stdout)["problems"]
    assert [p["agent_id"] for p in problems] == ["alpha"] and "rolled back" in problems[0]["reason"]


def test_rekey_without_keys_is_a_usage_error(runner: CliRunner, url: str) -> None:
    result = runner.invoke(app, ["rekey", "--db", url])
    assert result.exit_code == 2 and "needs keys" in result.output


def test_witness_check_reports_problems(
    runner: CliRunner, url: str, db: Path, keys: Path, tmp_path: Path
) -> None:
    witness = tmp_path / "w.json"
    assert runner.invoke(app, ["witness", "export", str(witness), "--db", url]).exit_code == 0
    assert runner.invoke(app, ["delete", "gamma", "--db", url, "--yes"]).exit_code == 0
    result = runner.invoke(app, ["witness", "check", str(witness), "--db", url, "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert not report["ok"] and report["problems"][0]["agent_id"] == "gamma"
    text = runner.invoke(app, ["witness", "check", str(witness), "--db", url])
    assert text.exit_code == 1 and "gamma" in text.output and "problem" in text.output
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = runner.invoke(app, ["witness", "check", str(bad), "--db", url])
    assert result.exit_code == 2 and "not a statekeeper witness" in result.output


def test_rekey_progress_file_defaults_next_to_the_database(
    runner: CliRunner, url: str, db: Path, keys: Path
) -> None:
    result = runner.invoke(app, ["rekey", "--db", url, "--key-file", str(keys)])
    assert result.exit_code == 0, result.output
    progress = db.with_name(db.name + ".rekey.json")
    assert json.loads(progress.read_text())["done"] is True


def test_control_characters_in_an_agent_id_reach_no_terminal(
    runner: CliRunner, tmp_path: Path
) -> None:
    """An agent id is often user input: its escape sequences must not erase or fake the
    CLI's output (``\\x1b[2K\\r`` then a line of one's own); they are shown escaped."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    evil = "evil\x1b[2K\r\x9b2K✓ OK"
    store = SyncStateStore(url)
    store.save(evil, {"n": 1})
    store.close()
    for args in (["agents"], ["show", evil], ["history", evil], ["tail"], ["stats"]):
        result = runner.invoke(app, [*args, "--db", url])
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\x9b" not in result.output, args
    for args in (["show", evil], ["history", evil]):
        shown = runner.invoke(app, [*args, "--db", url]).output
        assert "evil\\x1b[2K\\x0d\\x9b2K✓ OK" in shown, args
    missing = runner.invoke(app, ["show", "gone\x1b]0;title\x07", "--db", url])
    assert missing.exit_code != 0
    assert "\x1b" not in missing.output and "\x07" not in missing.output


def test_import_without_the_key_into_an_encrypted_store_is_refused(
    runner: CliRunner, url: str, keys: Path, tmp_path: Path
) -> None:
    export = tmp_path / "export.jsonl"
    exported = runner.invoke(app, ["export", "--db", url, "-o", str(export)])
    assert exported.exit_code == 0, exported.output
    secret = tmp_path / "secret.db"
    with SyncStateStore(f"sqlite:///{secret}", keyring=Keyring.from_file(keys)) as store:
        store.save("card-holder", {"card": "4111"})
    before = secret.read_bytes()

    refused = runner.invoke(app, ["import", str(export), "--db", f"sqlite:///{secret}"])
    assert refused.exit_code != 0
    assert "opened without a key" in refused.output
    assert "--key-file" in refused.output
    assert secret.read_bytes() == before  # nothing was written

    env = {"STATEKEEPER_KEY_FILE": str(keys)}
    imported = runner.invoke(app, ["import", str(export), "--db", f"sqlite:///{secret}"], env=env)
    assert imported.exit_code == 0, imported.output


def test_a_newline_in_an_agent_id_forges_no_row(runner: CliRunner, tmp_path: Path) -> None:
    """An agent id is one line: a newline or tab in it is shown escaped, as the other
    control characters are. Raw, 'x\\n victim   9' split the id over two rows of
    `agents`, its second line reading as another agent of the table ('x' listed, then
    ' victim'), and a tab printed as blanks showed 'x\\ty' as 'x       y'."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    forged, tabbed = "x\n victim   9", "x\ty"
    store = SyncStateStore(url)
    for agent_id in (forged, tabbed):
        store.save(agent_id, {"n": 1})
    store.close()
    for args in (["agents"], ["show", forged], ["tail"]):
        result = runner.invoke(app, [*args, "--db", url], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "x\\x0a victim   9" in result.output, (args, result.output)
        assert not any(line.lstrip().startswith("victim") for line in result.output.splitlines())
    listed = runner.invoke(app, ["agents", "--db", url], env={"COLUMNS": "200"}).output
    assert "x\\x09y" in listed, listed


def test_an_id_holding_the_text_of_an_escape_prints_unlike_the_escaped_id(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``a\\nb`` is shown ``a\\x0ab``; the id holding that text itself (backslash, x, 0,
    a) printed the same, so two agents looked like one. A backslash is shown doubled."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    newline, literal = "a\nb", "a\\x0ab"
    store = SyncStateStore(url)
    for agent_id in (newline, literal, "plain-id"):
        store.save(agent_id, {"n": 1})
    store.close()
    env = {"COLUMNS": "200"}
    for args in (["agents"], ["tail"], ["stats"]):
        result = runner.invoke(app, [*args, "--db", url], env=env)
        assert result.exit_code == 0, result.output
        assert "a\\x0ab" in result.output and "a\\\\x0ab" in result.output, (args, result.output)
        assert "plain-id" in result.output
    for command in ("show", "history"):
        shown = {}
        for agent_id in (newline, literal):
            result = runner.invoke(app, [command, agent_id, "--db", url], env=env)
            assert result.exit_code == 0, result.output
            shown[agent_id] = result.output
        assert "a\\\\x0ab" not in shown[newline], shown[newline]
        assert "a\\x0ab" in shown[newline], shown[newline]
        assert "a\\\\x0ab" in shown[literal], shown[literal]


def test_markup_in_an_id_quoted_by_delete_is_printed_as_text(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``{escape(id)!r}`` doubled the backslash rich's escape put before ``[``, which
    made the markup live again: deleting ``x[/]y`` deleted it, then failed with an
    internal MarkupError (exit 70) instead of saying so."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    store = SyncStateStore(url)
    store.save("x[/]y", {"n": 1})
    store.close()
    result = runner.invoke(app, ["delete", "x[/]y", "--yes", "--db", url])
    assert result.exit_code == 0, result.output
    assert "deleted agent 'x[/]y' (1 event(s))" in result.output
