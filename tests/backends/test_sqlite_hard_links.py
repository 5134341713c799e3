"""A store file with a second hard link: SQLite names the WAL and ``-shm`` after the
path it opened, so two processes writing the same file through two names each kept
its own WAL — both acknowledged every save, the file ended corrupt (``row missing
from index``) and one name's commits were not in the other's. A writable open of a
file with more than one link is refused, before SQLite touches it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import ConfigurationError


def test_a_store_file_with_two_names_is_refused_by_either_name(tmp_path: Path) -> None:
    first = tmp_path / "agents.db"
    with SyncStateStore(f"sqlite:///{first}") as store:
        store.save("a", {"n": 1})
    second = tmp_path / "other-name.db"
    os.link(first, second)
    before = first.read_bytes()
    names = sorted(p.name for p in tmp_path.iterdir())
    for path in (first, second):
        with pytest.raises(ConfigurationError) as caught:
            StateStore(f"sqlite:///{path}")
        assert str(path) in str(caught.value) and "hard links" in str(caught.value)
    assert first.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # no WAL made
    second.unlink()  # one name again: it opens
    with SyncStateStore(f"sqlite:///{first}") as store:
        assert store.load("a").data == {"n": 1}


def test_a_file_being_created_is_not_a_file_with_two_names(tmp_path: Path) -> None:
    """Another process's creation links ``<path>.sk-new-*`` into place and removes
    it just after: a process opening the file in between opens it."""
    path = tmp_path / "agents.db"
    with SyncStateStore(f"sqlite:///{path}") as store:
        store.save("a", {"n": 1})
    os.link(path, tmp_path / "agents.db.sk-new-123-abcd")
    with SyncStateStore(f"sqlite:///{path}") as store:
        assert store.load("a").data == {"n": 1}
