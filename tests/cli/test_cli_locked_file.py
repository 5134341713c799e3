"""A SQLite file another process is writing (it holds the file's lock) was reported as
"not a SQLite database" — a wrong diagnosis that sends the user looking for damage. It
is named as locked by another process now (exit 2), and still left untouched."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from tests.cli._proc import sk


def test_a_file_another_process_is_writing_is_said_to_be_locked(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    writer.execute("BEGIN EXCLUSIVE")  # the other application, writing
    writer.execute("INSERT INTO users VALUES (1, 'a')")
    try:
        for args in (("agents", "--db", str(path)), ("init", f"sqlite:///{path}")):
            result = sk(*args, cwd=tmp_path)
            assert result.returncode == 2, (args, result.stdout, result.stderr)
            assert "locked by another process" in result.stderr, (args, result.stderr)
            assert "not a SQLite database" not in result.stderr
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
