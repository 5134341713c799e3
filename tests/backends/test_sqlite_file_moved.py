"""A store file deleted, renamed or replaced by another file while a process has it
open: SQLite in WAL mode goes on writing to the file it opened, so every save after
it was acknowledged and kept nowhere — in a deleted file's inode, or beside another
store now at the path, whose next opener found none of it. Each write now checks the
path still names the file the writer opened and raises :class:`StoreLost` (nothing
written), through every write path: the common save, a create, an idempotent save, a
group batch, a lease, the blocking store."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import StoreLost

from ._store_writes import WRITES


def _deleted(path: Path) -> None:
    path.unlink()


def _renamed(path: Path) -> None:
    path.rename(path.with_name("moved.db"))


def _replaced(path: Path) -> None:
    other = path.with_name("other.db")
    with SyncStateStore(f"sqlite:///{other}") as store:
        store.save("someone-else", {"n": 1})
    os.replace(other, path)


_CHANGES = [_deleted, _renamed, _replaced]


_WRITES = WRITES


@pytest.mark.parametrize("change", _CHANGES, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("write", _WRITES, ids=lambda f: f.__name__.strip("_"))
def test_a_write_after_the_file_left_its_path_is_refused(
    tmp_path: Path,
    change: Callable[[Path], None],
    write: Callable[[StateStore], Awaitable[object]],
) -> None:
    path = tmp_path / "agents.db"

    async def run() -> None:
        async with StateStore(f"sqlite:///{path}") as store:
            await store.save("a", {"n": 1})
            change(path)
            with pytest.raises(StoreLost) as caught:
                await write(store)
            assert str(path) in str(caught.value)
            with pytest.raises(StoreLost):  # and every later write
                await store.save("b", {"n": 1})

    asyncio.run(run())


@pytest.mark.parametrize("change", _CHANGES, ids=lambda f: f.__name__.strip("_"))
def test_a_group_batch_after_the_file_left_its_path_is_refused(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    path = tmp_path / "agents.db"

    async def run() -> None:
        async with StateStore(f"sqlite:///{path}", durability="group") as store:
            await asyncio.gather(*(store.save(f"a{i}", {"n": 1}) for i in range(4)))
            change(path)
            results = await asyncio.gather(
                *(store.save(f"a{i}", {"n": 2}) for i in range(4)), return_exceptions=True
            )
            assert all(isinstance(r, StoreLost) for r in results), results

    asyncio.run(run())


def test_the_blocking_store_refuses_too_and_the_replacing_store_is_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agents.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        store.save("a", {"n": 1})
        _replaced(path)
        with pytest.raises(StoreLost):
            store.save("a", {"n": 2})
    kept = tmp_path / "kept"
    kept.mkdir()
    shutil.copy(path, kept / "agents.db")
    with SyncStateStore(f"sqlite:///{kept / 'agents.db'}") as store:
        assert [a.agent_id for a in store.list_agents()] == ["someone-else"]
