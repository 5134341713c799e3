"""A key file other users may read (mode 0644, a keyring copied with ``cp``, a umask of
022) is used, with a typed warning naming the file and the fix (``chmod 600 FILE``),
never a key: it used to be used without a word."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper import SyncStateStore
from statekeeper.cli import app
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import KeyFileOpenToOthers, StatekeeperWarning
from tests.keyfiles import write_key_file

KEY = generate_key()


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A CliRunner with a wide terminal and no key or store from the environment."""
    for var in ("STATEKEEPER_URL", "STATEKEEPER_KEY_FILE", "STATEKEEPER_KEYS"):
        monkeypatch.delenv(var, raising=False)
    return CliRunner(env={"COLUMNS": "400", "NO_COLOR": "1", "TERM": "dumb"})


def _key_file(tmp_path: Path, mode: int) -> Path:
    path = write_key_file(tmp_path / "keys.json", {"active": "k1", "keys": {"k1": KEY}})
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_key_file_open_to_others_warns_and_is_used(tmp_path: Path, mode: int) -> None:
    path = _key_file(tmp_path, mode)
    with pytest.warns(KeyFileOpenToOthers) as caught:
        ring = Keyring.from_file(path)
    assert ring.active_id == "k1"  # used all the same
    (warning,) = [w.message for w in caught if isinstance(w.message, KeyFileOpenToOthers)]
    assert isinstance(warning, StatekeeperWarning)
    assert warning.path == str(path) and warning.mode & 0o777 == mode
    text = str(warning)
    assert f"chmod 600 {path}" in text and f"{mode:04o}" in text
    assert KEY not in text
    assert caught[0].filename == __file__  # points at the caller, not at the library


def test_the_environment_key_file_warns_too(tmp_path: Path) -> None:
    path = _key_file(tmp_path, 0o644)
    with pytest.warns(KeyFileOpenToOthers):
        ring = Keyring.from_environment({"STATEKEEPER_KEY_FILE": str(path)})
    assert ring is not None and ring.active_id == "k1"


def test_a_backup_key_file_open_to_others_warns_and_is_used(tmp_path: Path) -> None:
    from statekeeper.governance.backup import BackupKey

    path = tmp_path / "backup.key"
    path.write_text(generate_key() + "\n")
    path.chmod(0o644)
    with pytest.warns(KeyFileOpenToOthers, match=r"chmod 600") as caught:
        BackupKey.from_file(path)
    assert caught[0].filename == __file__
    path.chmod(0o600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BackupKey.from_file(path)


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_key_file_is_quiet(tmp_path: Path, mode: int) -> None:
    path = _key_file(tmp_path, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Keyring.from_file(path).active_id == "k1"


def test_the_cli_says_it_once_in_one_line_and_works(runner: CliRunner, tmp_path: Path) -> None:
    path = _key_file(tmp_path, 0o644)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.warns(KeyFileOpenToOthers):
        store = SyncStateStore(url, keyring=Keyring.from_file(path))
    try:
        store.save("a", {"secret": "s3cr3t"})
    finally:
        store.close()
    result = runner.invoke(app, ["show", "a", "--db", url, "--key-file", str(path)])
    assert result.exit_code == 0, result.output
    assert "s3cr3t" in result.stdout  # the key was used
    lines = result.stderr.splitlines()
    assert lines == [
        f"warning: key file {path} is open to other users (mode 0644): anyone in its "
        f"group or on this machine may read the keys; run 'chmod 600 {path}'"
    ], result.stderr
    assert KEY not in result.output + result.stderr


def test_the_cli_says_it_even_when_the_command_then_fails(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = _key_file(tmp_path, 0o644)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    SyncStateStore(url, keyring=Keyring({"k1": KEY})).close()
    result = runner.invoke(app, ["show", "ghost", "--db", url, "--key-file", str(path)])
    assert result.exit_code == 1
    warning, error = result.stderr.splitlines()
    assert warning.startswith("warning: key file ") and f"chmod 600 {path}" in warning
    assert error.startswith("error: ") and "ghost" in error


def test_the_cli_is_quiet_on_a_private_key_file(runner: CliRunner, tmp_path: Path) -> None:
    path = _key_file(tmp_path, 0o600)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    SyncStateStore(url, keyring=Keyring({"k1": KEY})).close()
    result = runner.invoke(app, ["keys", "status", "--db", url, "--key-file", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def test_keys_generate_writes_private_files_whatever_the_umask(
    runner: CliRunner, tmp_path: Path
) -> None:
    fresh = tmp_path / "fresh.json"
    shared = _key_file(tmp_path, 0o644)  # an existing file open to others
    old = os.umask(0)
    try:
        assert runner.invoke(app, ["keys", "generate", "--key-file", str(fresh)]).exit_code == 0
        extended = runner.invoke(app, ["keys", "generate", "--key-file", str(shared)])
    finally:
        os.umask(old)
    assert extended.exit_code == 0, extended.output
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    assert stat.S_IMODE(shared.stat().st_mode) == 0o600  # rewritten private
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Keyring.from_file(shared).ids == ["k1", "k2"]
