"""Where the suite's temporary files go (tests/conftest.py: memory_temp_root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import MEMORY_TEMP_ROOM, memory_temp_root


class _Room:
    def __init__(self, free: int) -> None:
        self.f_bavail = free // 4096
        self.f_frsize = 4096


def test_files_go_to_a_memory_file_system_with_room(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("STATEKEEPER_TESTS_ON_DISK", raising=False)
    monkeypatch.delenv("PYTEST_DEBUG_TEMPROOT", raising=False)
    monkeypatch.setattr(os, "statvfs", lambda _: _Room(MEMORY_TEMP_ROOM))
    assert memory_temp_root(tmp_path) == tmp_path
    # a container's small /dev/shm would fill up: the disk then
    monkeypatch.setattr(os, "statvfs", lambda _: _Room(64 << 20))
    assert memory_temp_root(tmp_path) is None
    assert memory_temp_root(tmp_path / "missing") is None


def test_the_user_can_keep_the_files_on_disk_or_choose_the_place(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(os, "statvfs", lambda _: _Room(MEMORY_TEMP_ROOM))
    monkeypatch.delenv("PYTEST_DEBUG_TEMPROOT", raising=False)
    monkeypatch.setenv("STATEKEEPER_TESTS_ON_DISK", "1")
    assert memory_temp_root(tmp_path) is None
    monkeypatch.delenv("STATEKEEPER_TESTS_ON_DISK")
    monkeypatch.setenv("PYTEST_DEBUG_TEMPROOT", str(tmp_path / "mine"))
    assert memory_temp_root(tmp_path) is None
