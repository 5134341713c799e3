"""A key file (or backup key file) that cannot be used is named by its error, and no
byte of it is shown.

Before: a file that is not UTF-8 (raw key bytes written with ``head -c 32
/dev/urandom``) raised Python's ``UnicodeDecodeError`` itself — the CLI said "cannot
decode input: 'utf-8' codec can't decode byte 0xd3 in position 0", showing a byte of
the key and naming no file; a key of the wrong length or not base64 said "key 'k1'
must be 32 bytes, not 30" (or "the backup key is not valid base64") without saying
which of the files given (``--key-file``, ``$STATEKEEPER_KEY_FILE``, ``--backup-key``)
holds it.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekeeper.cli import app
from statekeeper.codec.keys import Keyring, generate_key
from statekeeper.errors import ConfigurationError
from statekeeper.governance.backup import BackupKey

RAW = b"\xd3" + os.urandom(31)  # never UTF-8: the first byte starts a 2-byte sequence
SHORT = base64.b64encode(os.urandom(30)).decode()


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (RAW, "is not text"),
        (json.dumps({"active": "k1", "keys": {"k1": SHORT}}).encode(), "must be 32 bytes"),
        (json.dumps({"active": "k1", "keys": {"k1": "not base64 !"}}).encode(), "base64"),
        (json.dumps({"active": "k9", "keys": {"k1": generate_key()}}).encode(), "not in"),
    ],
    ids=["raw-bytes", "short-key", "not-base64", "active-missing"],
)
def test_a_key_files_error_names_it(tmp_path: Path, content: bytes, said: str) -> None:
    path = _write(tmp_path / "keys.json", content)
    with pytest.raises(ConfigurationError) as info:
        Keyring.from_file(path)
    assert str(path) in str(info.value) and said in str(info.value)
    assert "0xd3" not in str(info.value)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (RAW, "is not text"),
        (SHORT.encode(), "must be 32 bytes"),
        (b"not base64 !", "base64"),
        (json.dumps({"active": "k1", "keys": {"k1": SHORT}}).encode(), "must be 32 bytes"),
    ],
    ids=["raw-bytes", "short-key", "not-base64", "short-key-in-a-key-file"],
)
def test_a_backup_key_files_error_names_it(tmp_path: Path, content: bytes, said: str) -> None:
    path = _write(tmp_path / "backup.key", content)
    with pytest.raises(ConfigurationError) as info:
        BackupKey.from_file(path)
    assert str(path) in str(info.value) and said in str(info.value)


def test_the_cli_names_a_raw_key_file_and_shows_none_of_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "raw.key", RAW)
    db = tmp_path / "s.db"
    result = CliRunner().invoke(app, ["show", "a", "--db", str(db), "--key-file", str(path)])
    assert result.exit_code == 2, result.output
    assert f"key file {path} is not text" in result.output
    assert "0xd3" not in result.output and "decode" not in result.output
