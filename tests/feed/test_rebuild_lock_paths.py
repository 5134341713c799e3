"""The rebuild lock (:mod:`statekeeper.feed.rebuild_lock`) is the read model's, whatever
path names it. Was: the lock file was the path as given plus a suffix, so a runner that
opened the read model through a symlink (``/srv/current/rm.db`` -> a release directory)
looked at another lock file than the rebuild holding the real one: it found the lock
free while the rebuild was alive, took the rebuild for dead and "finished" it at the
same time as the rebuild (two rebuilders of one read model)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper.feed.rebuild_lock import abandoned, rebuild_held

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock and symlinks: POSIX")


@pytest.mark.parametrize("link", ["file", "directory"])
async def test_a_rebuild_alive_is_seen_through_a_symlink(tmp_path: Path, link: str) -> None:
    real = tmp_path / "release"
    real.mkdir()
    (real / "rm.db").touch()
    if link == "file":
        other = tmp_path / "rm.db"
        other.symlink_to(real / "rm.db")
    else:
        (tmp_path / "current").symlink_to(real, target_is_directory=True)
        other = tmp_path / "current" / "rm.db"
    async with rebuild_held(str(real / "rm.db"), "agent_states"):
        assert not abandoned(str(other), "agent_states")  # alive: the runner waits
    async with rebuild_held(str(other), "agent_states"):
        assert not abandoned(str(real / "rm.db"), "agent_states")
    assert abandoned(str(other), "agent_states")  # (released: a killed one is finished)


async def test_a_relative_path_is_the_same_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rm.db").touch()
    monkeypatch.chdir(tmp_path)
    async with rebuild_held("rm.db", "agent_states"):
        assert not abandoned(str(tmp_path / "rm.db"), "agent_states")


async def test_a_private_temporary_read_model_has_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``""`` is SQLite's temporary database, private to its connection: no lock file is
    made for it (was: ``.rebuild-<name>.lock`` in the working directory)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    async with rebuild_held("", "agent_states"):
        assert not abandoned("", "agent_states")  # (no lock to tell by: the runner waits)
    assert sorted(os.listdir(tmp_path)) == ["work"]
    assert os.listdir(work) == []
