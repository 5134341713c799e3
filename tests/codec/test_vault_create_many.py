"""``SqliteKeyVault.create_many_in`` (a restore's key adoption: one commit a page).

Its COMMIT refused (``database is locked``: another process of the shared vault holds a
read open past the busy timeout) left the transaction open on the vault's connection:
the RESERVED lock stayed held — every other process's vault write (a new agent's key,
a forget) waited and failed — and every later write of this process failed ("cannot
start a transaction within a transaction") until it exited."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from statekeeper.codec.datakeys import SqliteKeyVault
from statekeeper.errors import BackendError


def test_a_refused_commit_leaves_no_transaction_open(tmp_path: Path) -> None:
    vault = SqliteKeyVault(tmp_path / "vault.db")
    vault._db.execute("PRAGMA busy_timeout=0")  # (refused at once, not after 5 s)
    reader = sqlite3.connect(tmp_path / "vault.db", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM family_data_keys").fetchall()  # a SHARED lock
    with pytest.raises(BackendError, match="locked"):
        vault.create_many_in("f1", [("u1", "k1", b"w" * 40)])
    reader.execute("COMMIT")
    other = SqliteKeyVault(tmp_path / "vault.db")
    other._db.execute("PRAGMA busy_timeout=0")
    other.create_in("f2", "u2", "k1", b"v" * 40)  # was: database is locked
    vault.create_many_in("f1", [("u1", "k1", b"w" * 40)])  # was: within a transaction
    assert [e.family for e in other.entries("u1")] == ["f1"]
