"""Where this process's descriptors cannot be listed (no ``/proc/self/fd``: macOS, the
BSDs; forced here on Linux), reading a SQLite store's files beside its connections
must not drop their POSIX locks either (``backends/sqlite/fds.py``). Before, every
page backup opened a descriptor of the store file and closed it at its end, and read
the ``-shm`` file's head through a descriptor opened and closed; opening another
store on the file read its header the same way: each close dropped every lock of the
process on the file (another process's last connection could then delete the WAL
this one writes, or truncate ``-shm`` under its map). Now a file a store of this
process has open counts as held: the descriptor is kept until the last such store
closes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks and /proc/self/fd"
)

_listdir = os.listdir


def _open_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds a descriptor of."""
    held = []
    for name in _listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(f"{folder}/"):
            held.append(target)
    return held


def _locks(file: Path) -> set[tuple[str, str]]:
    """This process's POSIX locks on ``file``: (mode, first byte)."""
    inode = os.stat(file).st_ino
    held = set()
    with open("/proc/locks", encoding="ascii") as fh:
        for line in fh:
            parts = line.split()
            if parts[1] == "->":
                parts.pop(1)
            if parts[4] == str(os.getpid()) and parts[5].endswith(f":{inode}"):
                held.add((parts[3], parts[6]))
    return held


@pytest.fixture
def unlisted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``/proc/self/fd`` for the code under test (as on macOS)."""

    def refusing(path: str | os.PathLike[str] = ".") -> list[str]:
        if os.fspath(path) in ("/proc/self/fd", "/dev/fd"):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return _listdir(path)

    monkeypatch.setattr(os, "listdir", refusing)
    yield


async def test_page_backups_and_a_second_store_keep_the_locks(
    tmp_path: Path, unlisted: None
) -> None:
    key = BackupKey(os.urandom(32))
    db = tmp_path / "s.db"
    shm = tmp_path / "s.db-shm"
    async with StateStore(f"sqlite:///{db}") as store:
        await store.save("a", {"n": 0})
        held, held_shm = _locks(db), _locks(shm)
        assert held, "a connection with the WAL open holds a lock on the database file"
        assert held_shm, "the lock SQLite holds on -shm while it maps it was dropped"
        for i in range(3):
            await store.save("a", {"n": i + 1})
            await backup(store, str(tmp_path / f"b{i}.skb"), key)
            assert held <= _locks(db), f"backup {i}: the store's locks were dropped"
            assert held_shm <= _locks(shm)
        async with StateStore(f"sqlite:///{db}") as second:  # (its header read first)
            await second.save("b", {"n": 1})
        assert held <= _locks(db), "the second store's opening dropped the locks"
        assert held_shm <= _locks(shm)
        await store.save("a", {"n": 9})
    # the descriptors kept for the store's life are closed with it
    assert _open_under(tmp_path) == []


async def test_stores_opened_and_closed_keep_no_descriptor(tmp_path: Path, unlisted: None) -> None:
    """Kept only while a store of this process has the file open: 20 stores backed up
    and closed one after another leave none."""
    key = BackupKey(os.urandom(32))
    for i in range(20):
        async with StateStore(f"sqlite:///{tmp_path}/s{i}.db") as store:
            await store.save("a", {"n": i})
            await backup(store, str(tmp_path / f"b{i}.skb"), key)
    assert _open_under(tmp_path) == []


async def test_a_store_opened_by_a_relative_path_detaches_after_a_chdir(
    tmp_path: Path, unlisted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store counted by the path it was opened with: a ``chdir`` before its close
    (was: the count looked up under another absolute path, never dropped: the
    descriptors kept for the file stayed open for the process's life)."""
    key = BackupKey(os.urandom(32))
    monkeypatch.chdir(tmp_path)
    async with StateStore("sqlite:///s.db") as store:
        await store.save("a", {"n": 1})
        await backup(store, str(tmp_path / "b.skb"), key)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
    assert _open_under(tmp_path) == []
