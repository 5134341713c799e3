"""A store's ``-wal`` file deleted or replaced while a process has the store open:
SQLite goes on committing into the WAL it opened, so every save after it was
acknowledged into an inode no opener reads, and a crash lost them all (after a
SIGKILL the agent was not found). Each write now checks the path's WAL is still the
one the writer opened and raises :class:`StoreLost` (nothing written). The WAL keeps
its inode through everything a healthy store does to it — checkpoints (TRUNCATE
included), ``journal_size_limit``, other connections and processes opening, writing,
checkpointing and closing — so none of that is refused."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import StoreLost

from ._store_writes import WRITES


def _deleted(wal: Path) -> None:
    wal.unlink()


def _replaced(wal: Path) -> None:
    other = wal.with_name("other-wal")
    other.write_bytes(b"")
    os.replace(other, wal)


_WRITES = WRITES


@pytest.mark.parametrize("change", [_deleted, _replaced], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("write", _WRITES, ids=lambda f: f.__name__.strip("_"))
def test_a_write_after_the_wal_left_its_path_is_refused(
    tmp_path: Path,
    change: Callable[[Path], None],
    write: Callable[[StateStore], Awaitable[object]],
) -> None:
    path = tmp_path / "agents.db"

    async def run() -> None:
        async with StateStore(f"sqlite:///{path}") as store:
            await store.save("a", {"n": 1})
            change(Path(f"{path}-wal"))
            with pytest.raises(StoreLost) as caught:
                await write(store)
            assert f"{path}-wal" in str(caught.value)
            with pytest.raises(StoreLost):  # and every later write
                await store.save("b", {"n": 1})

    asyncio.run(run())
    # the save made before the WAL was deleted: checkpointed by the clean close
    with SyncStateStore(f"sqlite:///{path}") as store:
        assert store.load("a").seq == 1
        assert [a.agent_id for a in store.list_agents()] == ["a"]


def test_a_group_batch_after_the_wal_was_deleted_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"

    async def run() -> None:
        async with StateStore(f"sqlite:///{path}", durability="group") as store:
            await asyncio.gather(*(store.save(f"a{i}", {"n": 1}) for i in range(4)))
            os.unlink(f"{path}-wal")
            results = await asyncio.gather(
                *(store.save(f"a{i}", {"n": 2}) for i in range(4)), return_exceptions=True
            )
            assert all(isinstance(r, StoreLost) for r in results), results

    asyncio.run(run())


_CHILD = """
import os, sqlite3, sys
from statekeeper import SyncStateStore
from statekeeper.errors import StoreLost
path = sys.argv[1]
store = SyncStateStore("sqlite:///" + path)
store.save("a", {"i": 1})
sqlite3.connect(path).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
os.unlink(path + "-wal")
acked = 0
for i in range(2, 6):
    try:
        store.save("a", {"i": i})
        acked = i
    except StoreLost:
        pass
print(acked, flush=True)
sys.stdin.read()
"""


def test_no_save_is_acknowledged_that_a_crash_loses(tmp_path: Path) -> None:
    """The trial's case: after the WAL was deleted, saves succeeded, and a SIGKILL
    lost each of them (the agent's last acknowledged seq was 5, its state after the
    restart seq 1 here, the first save checkpointed; none without that)."""
    path = tmp_path / "agents.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    acked = int(child.stdout.readline())
    child.kill()
    child.wait()
    with SyncStateStore(f"sqlite:///{path}") as store:
        assert store.load("a").seq == max(acked, 1)
    assert acked == 0


def test_a_healthy_wal_is_never_refused(tmp_path: Path) -> None:
    """Everything that resets, truncates or shares the WAL keeps its inode: writes
    across the store's own checkpoints, wal_checkpoint(TRUNCATE) with
    journal_size_limit 0 (the WAL truncated to nothing), another connection and
    another process writing, checkpointing and closing."""
    path = tmp_path / "agents.db"
    other_process = (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA journal_size_limit = 0')\n"
        "c.execute(\"UPDATE sk_meta SET value = value WHERE key = 'schema_version'\")\n"
        "c.execute('PRAGMA wal_checkpoint(TRUNCATE)')\n"
        "c.close()\n"
    )
    with SyncStateStore(f"sqlite:///{path}") as store:
        for i in range(300):  # past the store's own checkpoints
            store.save(f"a{i % 7}", {"n": i, "pad": "x" * 2000})
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("PRAGMA journal_size_limit = 0")
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert os.path.getsize(f"{path}-wal") == 0
        other.close()
        store.save("a0", {"n": -1})
        subprocess.run([sys.executable, "-c", other_process, str(path)], check=True)
        store.save("a0", {"n": -2})
        assert store.load("a0").data == {"n": -2}


def _crash_copy(path: Path, into: Path) -> Path:
    """The store file and its WAL as a crash leaves them (no ``-shm``: the next
    opener rebuilds its index from the WAL)."""
    into.mkdir()
    for suffix in ("", "-wal"):
        if os.path.exists(f"{path}{suffix}"):
            shutil.copy(f"{path}{suffix}", into / f"agents.db{suffix}")
    return into / "agents.db"


def test_the_wal_left_beside_a_replaced_file_is_not_taken_in_by_it(tmp_path: Path) -> None:
    """Another store moved over the path: this process's WAL was left at
    ``path-wal``, and the next opener after a crash applied it to the other store's
    file (a mix of two stores). The write that finds its file moved checkpoints the
    WAL into its own file first and empties it."""
    path = tmp_path / "agents.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        for i in range(20):
            store.save(f"a{i}", {"n": i, "pad": "x" * 3000})
        other = tmp_path / "other.db"
        with SyncStateStore(f"sqlite:///{other}") as replacing:
            replacing.save("someone-else", {"n": 1})
        os.replace(other, path)
        with pytest.raises(StoreLost):
            store.save("a0", {"n": -1})
        crashed = _crash_copy(path, tmp_path / "crashed")
        check = sqlite3.connect(crashed)
        assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        check.close()
        with SyncStateStore(f"sqlite:///{crashed}") as opened:
            assert [a.agent_id for a in opened.list_agents()] == ["someone-else"]


def test_a_renamed_store_keeps_its_saves_in_its_file(tmp_path: Path) -> None:
    """Renamed away: the saves the WAL held are checkpointed into the file under its
    new name (none left behind at the old path for a new store made there)."""
    path = tmp_path / "agents.db"
    moved = tmp_path / "moved.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        store.save("a", {"n": 1})
        path.rename(moved)
        with pytest.raises(StoreLost):
            store.save("a", {"n": 2})
        assert os.path.getsize(f"{path}-wal") == 0
        crashed = _crash_copy(moved, tmp_path / "crashed")
        with SyncStateStore(f"sqlite:///{crashed}") as opened:
            assert opened.load("a").data == {"n": 1}


def test_a_new_store_made_where_one_was_deleted_takes_none_of_its_wal(tmp_path: Path) -> None:
    """Deleted: the WAL left at the path was applied, after a crash, to the new store
    made there (the deleted store's pages in a new file)."""
    path = tmp_path / "agents.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        for i in range(20):
            store.save(f"a{i}", {"n": i, "pad": "x" * 3000})
        path.unlink()
        with pytest.raises(StoreLost):
            store.save("a0", {"n": -1})
        crashed = _crash_copy(path, tmp_path / "crashed")
        with SyncStateStore(f"sqlite:///{crashed}") as opened:
            opened.save("fresh", {"n": 1})
            assert [a.agent_id for a in opened.list_agents()] == ["fresh"]
