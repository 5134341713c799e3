"""``$STATEKEEPER_BACKUP_KEY`` holds the backup key itself (one base64 line). A file
path in it — an easy mistake, ``--backup-key`` takes a file — is named as such, with
what to do; any other bad value says what the variable must hold, never its value.
Was: "the backup key is not valid base64" for both."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from statekeeper.errors import ConfigurationError
from statekeeper.governance.backup import BackupKey


def test_a_path_in_the_variable_is_named_as_a_path(tmp_path: Path) -> None:
    key_file = tmp_path / "backup.key"
    key_file.write_text(base64.b64encode(b"k" * 32).decode())
    with pytest.raises(ConfigurationError) as err:
        BackupKey.from_env({"STATEKEEPER_BACKUP_KEY": str(key_file)})
    assert "names a file" in str(err.value) and "--backup-key FILE" in str(err.value)


def test_a_bad_value_says_what_it_must_hold_and_not_the_value() -> None:
    secret = "not-a-key-but-maybe-secret!"
    with pytest.raises(ConfigurationError) as err:
        BackupKey.from_env({"STATEKEEPER_BACKUP_KEY": secret})
    assert "one base64 line" in str(err.value) and secret not in str(err.value)


def test_the_key_itself_and_no_key() -> None:
    text = base64.b64encode(b"k" * 32).decode()
    key = BackupKey.from_env({"STATEKEEPER_BACKUP_KEY": text})
    assert key is not None and key.fingerprint == BackupKey.from_text(text).fingerprint
    assert BackupKey.from_env({}) is None
