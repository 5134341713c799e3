"""A page backup of a SQLite store keeps its descriptor of the database file while
other connections of this process hold the file (closing it would drop their POSIX
locks: backends/sqlite/fds.py), but no longer than that: a process that backs up many
stores, each opened and closed, keeps no descriptor of any of them, and one store
backed up again and again while open keeps one, reused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="reads Linux's /proc/self/fd"
)


def _open_under(folder: Path) -> list[str]:
    """The files under ``folder`` this process holds a descriptor of (one per descriptor)."""
    held = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # (closed since the listing)
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


async def test_backing_up_many_stores_one_after_another_keeps_no_descriptor(
    tmp_path: Path,
) -> None:
    """Open, back up and close 30 stores: afterwards the process holds no descriptor
    of any of their files (each kept one a descriptor per store, forever, before) and
    its descriptor count is where it began."""
    key = BackupKey(os.urandom(32))
    stores = tmp_path / "stores"
    stores.mkdir()
    before = len(os.listdir("/proc/self/fd"))
    for i in range(30):
        async with StateStore(f"sqlite:///{stores}/s{i}.db") as store:
            await store.save("a", {"n": i})
            await backup(store, str(tmp_path / f"b{i}.skb"), key)
    assert _open_under(stores) == []
    assert len(os.listdir("/proc/self/fd")) - before < 30


async def test_a_store_backed_up_again_and_again_keeps_one_descriptor_until_it_closes(
    tmp_path: Path,
) -> None:
    """While the store is open its connections hold the file: the page backup's own
    descriptor is kept (not closed under them) and reused by the next backup; once
    the store closes it is closed too."""
    key = BackupKey(os.urandom(32))
    db = tmp_path / "one.db"
    async with StateStore(f"sqlite:///{db}") as store:
        await store.save("a", {"n": 0})
        await backup(store, str(tmp_path / "b0.skb"), key)
        held = len(_open_under(tmp_path))  # (the store's connections and the backup's)
        for i in range(1, 21):
            await store.save("a", {"n": i})
            await backup(store, str(tmp_path / f"b{i}.skb"), key)
        # (the store's reader connections may grow by a few; not one per backup)
        assert len(_open_under(tmp_path)) < held + 10
    assert _open_under(tmp_path) == []


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks")
async def test_a_closing_store_leaves_the_descriptor_kept_for_another_store_on_the_file(
    tmp_path: Path,
) -> None:
    """Two stores of this process on one file: the first's backup descriptor is not
    closed when the first closes (that would drop the second's locks, which tell
    another process's last connection not to delete the WAL), only once the second
    closes too."""
    key = BackupKey(os.urandom(32))
    db = tmp_path / "two.db"
    async with StateStore(f"sqlite:///{db}") as second:
        await second.save("a", {"n": 1})
        held = _locks(db)
        assert held, "a connection with the WAL open holds a lock on the database file"
        async with StateStore(f"sqlite:///{db}") as first:
            await backup(first, str(tmp_path / "b.skb"), key)
        assert held <= _locks(db)
        assert str(db) in _open_under(tmp_path)
        await second.save("a", {"n": 2})
    assert _open_under(tmp_path) == []


async def test_closing_stores_of_other_files_does_not_look_at_every_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One store backed up while open keeps its backup descriptor; the close of each
    store of another file then looks at no ``/proc/self/fd`` (a look is one ``fstat``
    per descriptor the process has open: before, every SQLite store's close made one
    for as long as any file's descriptor stayed kept). The kept one is still closed
    with its own store."""
    key = BackupKey(os.urandom(32))
    looks: list[str] = []
    listdir = os.listdir

    def counted(path: str = ".") -> list[str]:
        if path == "/proc/self/fd":
            looks.append(path)
        return listdir(path)

    async with StateStore(f"sqlite:///{tmp_path}/kept.db") as kept:
        await kept.save("a", {"n": 0})
        await backup(kept, str(tmp_path / "b.skb"), key)
        assert str(tmp_path / "kept.db") in _open_under(tmp_path)  # (kept: held by `kept`)
        for i in range(5):
            other = StateStore(f"sqlite:///{tmp_path}/o{i}.db")
            await other.save("a", {"n": i})
            with monkeypatch.context() as m:
                m.setattr(os, "listdir", counted)
                await other.close()
        assert looks == []
    assert _open_under(tmp_path) == []


async def test_a_kept_descriptor_of_a_file_replaced_under_its_store_is_closed_with_it(
    tmp_path: Path,
) -> None:
    """The store's file is replaced (renamed over) while its backup descriptor is kept:
    at the store's close its path names another file, and the kept descriptor of the
    replaced one is closed all the same (none left, deleted file's or not)."""
    key = BackupKey(os.urandom(32))
    db = tmp_path / "one.db"
    async with StateStore(f"sqlite:///{tmp_path}/new.db") as fresh:
        await fresh.save("b", {"n": 1})
    async with StateStore(f"sqlite:///{db}") as store:
        await store.save("a", {"n": 0})
        await backup(store, str(tmp_path / "b.skb"), key)
        os.replace(tmp_path / "new.db", db)
    assert _open_under(tmp_path) == []
