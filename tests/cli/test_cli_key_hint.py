"""``verify`` and ``repair`` on an encrypted store opened without its key, or with the
wrong one, say that it is the key: before, every record was listed as a problem and the
advice was that of damage (``statekeeper repair`` rebuilds the snapshots; "Not
repairable (restore from a backup)"), which neither fixes: the right key does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper.cli import app


@pytest.fixture
def encrypted(runner: CliRunner, url: str, tmp_path: Path) -> tuple[Path, Path]:
    """The ``db`` store encrypted under keys.json; wrong.json holds another 'k1'."""
    keys, wrong = tmp_path / "keys.json", tmp_path / "wrong.json"
    for path in (keys, wrong):
        made = runner.invoke(app, ["keys", "generate", "--key-file", str(path)])
        assert made.exit_code == 0, made.output
    done = runner.invoke(app, ["rekey", "--db", url, "--key-file", str(keys)])
    assert done.exit_code == 0, done.output
    return keys, wrong


def _key_args(which: str, encrypted: tuple[Path, Path]) -> list[str]:
    return [] if which == "none" else ["--key-file", str(encrypted[1])]


@pytest.mark.parametrize("which", ["none", "wrong"])
def test_verify_without_the_right_key_says_it_is_the_key(
    runner: CliRunner, url: str, db: Path, encrypted: tuple[Path, Path], which: str
) -> None:
    before = db.read_bytes()
    result = runner.invoke(app, ["verify", "--db", url, *_key_args(which, encrypted)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.stdout.split())
    if which == "none":  # no key at all: not blamed on "the keyring given"
        assert "problem(s): records encrypted, and no key was given" in text, text
        assert "keyring given" not in text, text
    else:
        assert "problem(s): records encrypted with a key the keyring given lacks" in text
    assert "--key-file FILE" in text
    assert "statekeeper repair` rebuilds them" not in text
    assert db.read_bytes() == before
    # with the right key there is nothing to say
    good = runner.invoke(app, ["verify", "--db", url, "--key-file", str(encrypted[0])])
    assert good.exit_code == 0 and "keyring" not in good.stdout, good.output


@pytest.mark.parametrize("which", ["none", "wrong"])
def test_repair_without_the_right_key_does_not_send_to_a_backup(
    runner: CliRunner, url: str, db: Path, encrypted: tuple[Path, Path], which: str
) -> None:
    before = db.read_bytes()
    result = runner.invoke(app, ["repair", "--apply", "--db", url, *_key_args(which, encrypted)])
    assert result.exit_code == 3, result.output
    text = " ".join(result.stdout.split())
    assert "restore from a backup" not in text
    assert "Not readable with the keys given" in text
    if which == "none":
        assert "records encrypted, and no key was given" in text, text
        assert "keyring given" not in text, text
    else:
        assert "records encrypted with a key the keyring given lacks" in text
    assert db.read_bytes() == before
    # the JSON report is unchanged: the problems, each with its reason
    as_json = runner.invoke(app, ["repair", "--json", "--db", url, *_key_args(which, encrypted)])
    assert json.loads(as_json.stdout)["unrepairable"], as_json.output
