"""Creating a store file on a nearly full disk: the schema is written to a temporary
file's WAL, and closing its connection checkpoints it into the file — silently not,
when that fails (the disk full; another connection on the file). The file was linked
into place all the same and its WAL deleted: ``statekeeper init`` then left an 8 or
16 KiB file at the path that every later open called "database disk image is
malformed" (trial: a 4 MiB tmpfs with 72-80 KiB free). The schema is now
checkpointed explicitly and checked, and a failure names the store's path (was: the
temporary file's), nothing left at the path."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper import SyncStateStore
from statekeeper.errors import BackendError

_connect = sqlite3.connect


class _Watched:
    """The creating connection; after its COMMIT another connection reads the file,
    so that closing this one does not checkpoint (it is not the last)."""

    def __init__(self, conn: sqlite3.Connection, path: str, others: list[Any]) -> None:
        self._conn, self._path, self._others = conn, path, others

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        cursor = self._conn.execute(sql, *args)
        if sql == "COMMIT":
            other = _connect(self._path, check_same_thread=False)
            other.execute("SELECT count(*) FROM sqlite_master").fetchone()
            self._others.append(other)
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_a_new_file_whose_close_did_not_checkpoint_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    others: list[Any] = []

    def connect(database: Any, *args: Any, **kwargs: Any) -> Any:
        conn = _connect(database, *args, **kwargs)
        return _Watched(conn, database, others) if ".sk-new-" in str(database) else conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    path = tmp_path / "agents.db"
    try:
        with SyncStateStore(f"sqlite:///{path}") as store:
            store.save("a", {"n": 1})
    finally:
        for other in others:
            other.close()
    monkeypatch.undo()
    assert others, "the creation was not watched"
    with SyncStateStore(f"sqlite:///{path}") as store:
        assert store.load("a").data == {"n": 1}


def test_a_creation_that_fails_names_the_store_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def connect(database: Any, *args: Any, **kwargs: Any) -> Any:
        if ".sk-new-" in str(database):
            raise sqlite3.OperationalError("database or disk is full")
        return _connect(database, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    path = tmp_path / "agents.db"
    with pytest.raises(BackendError) as caught:
        SyncStateStore(f"sqlite:///{path}")
    message = str(caught.value)
    assert message.startswith(f"{path}:") and ".sk-new-" not in message, message
    assert "disk is full" in message and "nothing was created" in message
    assert list(tmp_path.iterdir()) == []
