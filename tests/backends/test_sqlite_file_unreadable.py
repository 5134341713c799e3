"""A statekeeper store SQLite cannot read right now (a full disk, a file-size limit, a
read-only folder: its ``-shm`` cannot be made) is not "not a SQLite database": every
command said so, and told the user to ``statekeeper init`` one, of a store that was
whole. It is refused as unreadable, naming SQLite's error, and left as it was."""

from __future__ import annotations

import asyncio
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import files as sqlite_files
from statekeeper.errors import BackendUnavailable, NotAStore


def _store(path: Path) -> None:
    async def make() -> None:
        async with StateStore(f"sqlite:///{path}") as store:
            await store.save("a", {"n": 1})

    asyncio.run(make())
    for suffix in ("-wal", "-shm"):  # (no connection open: SQLite makes them again)
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class _Failing:
    """A connection whose every statement fails as SQLite fails on a full disk."""

    def execute(self, *args: object) -> None:
        exc = sqlite3.OperationalError("disk I/O error")
        exc.sqlite_errorcode = 4874  # type: ignore[attr-defined]  # SQLITE_IOERR_SHMSIZE
        exc.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"  # type: ignore[attr-defined]
        raise exc

    def close(self) -> None:
        pass


def test_a_store_sqlite_cannot_read_now_is_unreadable_not_a_non_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agents.db"
    _store(path)
    before = path.read_bytes()
    monkeypatch.setattr(sqlite_files, "connect_read_only", lambda *a, **k: _Failing())
    with pytest.raises(BackendUnavailable) as caught:
        sqlite_files.require_store_file(path)
    message = str(caught.value)
    assert "not a SQLite database" not in message and "init" not in message, message
    assert "disk I/O error" in message and str(path) in message
    assert path.read_bytes() == before


def test_a_damaged_sqlite_file_is_still_not_a_store(tmp_path: Path) -> None:
    """What SQLite itself calls no database (a header, then garbage) stays refused as
    not a store (its error is the file's, not the disk's)."""
    path = tmp_path / "agents.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(NotAStore):
        sqlite_files.require_store_file(path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE as on Linux")
def test_the_cli_under_a_file_size_limit_says_the_store_cannot_be_read(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    _store(path)
    before = path.read_bytes()

    def limit() -> None:  # smaller than the -shm SQLite needs for a WAL store
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "--db", str(path), "agents"],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=limit,
        timeout=120,
    )
    assert done.returncode != 0
    assert "not a SQLite database" not in done.stderr, done.stderr
    assert "cannot be read" in done.stderr and "disk I/O error" in done.stderr, done.stderr
    assert path.read_bytes() == before
