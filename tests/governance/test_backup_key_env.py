"""``$STATEKEEPER_BACKUP_KEY`` holds the backup key itself (one base64 line). A file
path in it — an easy mistake, ``--backup-key`` takes a file — is named as such by the
CLI, with what to do; any other bad value keeps its message, which never shows the
value. Was: "the backup key is not valid base64" for both."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from statekeeper import SyncStateStore
from statekeeper.errors import ConfigurationError
from statekeeper.governance.backup import BackupKey
from tests.keyfiles import write_key_file

from ..cli._proc import sk_in_process


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "s.db"
    with SyncStateStore(f"sqlite:///{db}") as store:
        store.save("a-1", {"n": 1})
    return db


def _backup(tmp_path: Path, value: str) -> tuple[int, str]:
    db, to = _store(tmp_path), tmp_path / "b.skb"
    done = sk_in_process("backup", "--db", str(db), "--to", str(to), STATEKEEPER_BACKUP_KEY=value)
    return done.returncode, done.stdout + done.stderr


def test_a_path_in_the_variable_is_named_as_a_path(tmp_path: Path) -> None:
    key_file = tmp_path / "backup.key"
    write_key_file(key_file, base64.b64encode(b"k" * 32).decode())
    code, said = _backup(tmp_path, str(key_file))
    assert code != 0 and "names a file" in said and "--backup-key FILE" in said, said
    assert not (tmp_path / "b.skb").exists()


def test_a_bad_value_is_refused_without_showing_it(tmp_path: Path) -> None:
    secret = "not-a-key-but-maybe-secret!"
    code, said = _backup(tmp_path, secret)
    assert code != 0 and "not valid base64" in said and secret not in said, said
    with pytest.raises(ConfigurationError):
        BackupKey.from_env({"STATEKEEPER_BACKUP_KEY": secret})
