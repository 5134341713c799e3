"""A small file written "durably" (a key file, the audit head, a backup) is renamed
over its target: the rename is an entry of the directory, and until the directory is
flushed a power loss can undo it — the old key file back, without the key just added
and already used to encrypt; a backup reported written, gone. The directory is now
flushed after the rename."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from statekeeper._files import write_atomically
from statekeeper.codec import Keyring
from statekeeper.governance.backup.location import Location


def synced_directories(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every directory ``os.fsync`` is called on from now on (its path)."""
    found: list[Path] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            found.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_durable_small_file_flushes_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = synced_directories(monkeypatch)
    write_atomically(tmp_path / "head.json", "{}\n")
    assert synced == [tmp_path.resolve()]
    write_atomically(tmp_path / "progress.json", "{}\n", durable=False)
    assert synced == [tmp_path.resolve()]  # (not durable: no flush at all)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_key_file_written_flushes_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = synced_directories(monkeypatch)
    Keyring.write_file(tmp_path / "keys.json", {"k1": "A" * 43 + "="}, "k1")
    assert synced == [tmp_path.resolve()]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_backup_file_written_flushes_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = synced_directories(monkeypatch)
    with Location(tmp_path / "store.skbak").writing() as fh:
        fh.write(b"backup")
    assert (tmp_path / "store.skbak").read_bytes() == b"backup"
    assert synced == [tmp_path.resolve()]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_picture_is_flushed_before_its_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from statekeeper.observability.analysis.markov import estimate
    from statekeeper.observability.pictures import write_heat_map

    kinds: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kinds.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        kinds.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_heat_map(estimate([("idle", "busy"), ("busy", "idle")]), tmp_path / "p.svg")
    assert kinds == ["fsync file", "replace", "fsync dir"]
    assert (tmp_path / "p.svg").stat().st_size > 0
