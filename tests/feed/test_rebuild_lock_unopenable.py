"""A rebuild lock file this process may not open (its permissions, a directory where
it goes, a read-only folder) is a :class:`ProjectionError` naming the file and what to
do. Before, ``rebuild`` (and ``run``, finding a projection ``seeding``) crashed with
the raw ``OSError`` of ``os.open``. (The tests run as root: a directory in the lock
file's place stands for a file it may not open.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ProjectionError
from statekeeper.feed import ProjectionRunner
from statekeeper.feed.rebuild_lock import abandoned, rebuild_held

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock: POSIX")


def _blocked(rm: Path, name: str) -> str:
    lock = f"{os.path.realpath(rm)}.rebuild-{name}.lock"
    os.mkdir(lock)
    return lock


async def test_the_lock_functions_name_the_file(tmp_path: Path) -> None:
    rm = tmp_path / "rm.db"
    rm.touch()
    lock = _blocked(rm, "agent_states")
    with pytest.raises(ProjectionError) as caught:
        abandoned(str(rm), "agent_states")
    assert repr(lock) in str(caught.value) and "agent_states" in str(caught.value)
    with pytest.raises(ProjectionError) as caught:
        async with rebuild_held(str(rm), "agent_states"):
            pass
    assert repr(lock) in str(caught.value)


async def test_a_rebuild_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    rm = tmp_path / "rm.db"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        await store.save("a", {"n": 1})
        lock = _blocked(rm, "agent_states")
        async with ProjectionRunner(store, rm) as runner:
            with pytest.raises(ProjectionError) as caught:
                await runner.rebuild("agent_states")
            assert repr(lock) in str(caught.value)
            os.rmdir(lock)  # (done as the error says: the rebuild goes)
            assert await runner.rebuild("agent_states") == 1
