"""A local backup file is written with ``O_DIRECT`` where its file system takes it
(:mod:`.directfile`): every byte as written, the padding of the last aligned write cut
off, a write refused for its alignment done the ordinary way, a full disk a typed
error that leaves no file; where ``O_DIRECT`` is refused (tmpfs) the file is written
through the page cache as before."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import BackupError
from statekeeper.governance.backup import BackupKey, backup, directfile, restore

from ._point_in_time import keyring
from .test_backup_page_delta import contents, fill


@pytest.fixture
def on_disk() -> Iterator[Path]:
    """A folder whose file system takes ``O_DIRECT`` (pytest's may be tmpfs, which
    refuses it); skipped if none."""
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="sk-test-") as folder:
        probe = Path(folder) / "probe"
        probe.touch()
        with open(probe, "r+b") as fh:
            opened = directfile.direct_file(str(probe), fh.fileno())
        if opened is None:
            pytest.skip("/var/tmp refuses O_DIRECT")
        opened.close()
        yield Path(folder)


def _written(path: Path, pieces: list[bytes], refuse: bool = False) -> bytes:
    """``pieces`` written through a :class:`~.directfile.DirectFile` of ``path`` (its
    ``O_DIRECT`` writes refused with EINVAL if ``refuse``); the file's bytes after."""
    with open(path, "wb") as fh:
        out = directfile.direct_file(str(path), fh.fileno())
        assert out is not None
        for piece in pieces:
            out.write(piece)
        out.finish()
    return path.read_bytes()


def test_every_byte_lands_and_the_padding_is_cut(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(directfile, "BLOCK", 64 << 10)  # several blocks, pieces across them
    pieces = [os.urandom(n) for n in (7, 70_000, 1, 65_536, 131_071, 3)]
    assert _written(on_disk / "f", pieces) == b"".join(pieces)
    assert _written(on_disk / "g", [b"x" * 5000]) == b"x" * 5000  # one short write


def test_a_write_refused_for_its_alignment_goes_the_ordinary_way(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(directfile, "BLOCK", 64 << 10)
    real = os.pwrite
    direct_fds: list[int] = []
    real_open = os.open

    def opening(path: Any, flags: int, *args: Any) -> int:
        fd = real_open(path, flags, *args)
        if flags & directfile._O_DIRECT:
            direct_fds.append(fd)
        return fd

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if fd in direct_fds and offset >= 64 << 10:  # the second block on: refused
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "pwrite", pwrite)
    pieces = [os.urandom(100_000), os.urandom(50_001)]
    assert _written(on_disk / "f", pieces) == b"".join(pieces)


async def test_a_backup_on_disk_restores_and_a_full_disk_leaves_nothing(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(directfile, "BLOCK", 64 << 10)
    bkey = BackupKey(os.urandom(32))
    direct: list[int] = []
    real, realv = directfile.DirectFile._pwrite, directfile.DirectFile._pwritev

    def put(self: directfile.DirectFile, view: Any, at: int, length: int, padded: int) -> None:
        direct.append(padded)
        real(self, view, at, length, padded)

    def putv(self: directfile.DirectFile, views: list[Any], at: int) -> None:
        direct.append(sum(map(len, views)))  # placed frames, a few at once
        realv(self, views, at)

    monkeypatch.setattr(directfile.DirectFile, "_pwrite", put)
    monkeypatch.setattr(directfile.DirectFile, "_pwritev", putv)
    async with StateStore(f"sqlite:///{on_disk / 's.db'}", keyring=keyring()) as src:
        await fill(src, 300)
        await backup(src, on_disk / "b.skb", bkey, chunk_bytes=64 << 10)
        expected = await contents(src)
        assert len(direct) > 3  # written through O_DIRECT, block by block

        def full(fd: int, data: Any, offset: int) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", full)
        monkeypatch.setattr(os, "pwritev", full)
        with pytest.raises(BackupError, match="cannot write the backup"):
            await backup(src, on_disk / "full.skb", bkey, chunk_bytes=64 << 10)
        monkeypatch.undo()
    assert not (on_disk / "full.skb").exists()
    assert not [name for name in os.listdir(on_disk) if name.startswith(".full.skb")]
    async with StateStore(f"sqlite:///{on_disk / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [on_disk / "b.skb"], bkey)
        assert await contents(dst) == expected


async def test_without_o_direct_a_backup_is_written_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(tmpfs, or a system without ``O_DIRECT``: the page cache and write-behind)"""
    monkeypatch.setattr(directfile, "_O_DIRECT", 0)
    bkey = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 50)
        await backup(src, tmp_path / "b.skb", bkey)
        expected = await contents(src)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], bkey)
        assert await contents(dst) == expected


def test_a_file_put_in_the_temporary_files_place_is_not_written(on_disk: Path) -> None:
    """The ``O_DIRECT`` descriptor is the file the backup created, never a file (or a
    link) that took its name since: then the backup is written through its own
    descriptor."""
    made = on_disk / "made"
    with open(made, "wb") as fh:
        os.rename(made, on_disk / "moved")
        (on_disk / "elsewhere").write_bytes(b"keep")
        os.symlink(on_disk / "elsewhere", made)
        assert directfile.direct_file(str(made), fh.fileno()) is None
        (on_disk / "made").unlink()
        (on_disk / "other").touch()
        os.rename(on_disk / "other", made)
        assert directfile.direct_file(str(made), fh.fileno()) is None
    assert (on_disk / "elsewhere").read_bytes() == b"keep"


@pytest.mark.parametrize("refuse", [False, True], ids=["o-direct", "refused"])
def test_frames_written_from_their_place_land_between_the_staged_bytes(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch, refuse: bool
) -> None:
    """A frame sealed into its place in a buffer of its own (``write_placed``, "backup5":
    never copied into the staging buffer) lands at its offset, between bytes written
    the ordinary way, whatever their alignment: the staged bytes before it copied in
    front of it, its last partial block staged after it (and a write refused for its
    alignment done the ordinary way)."""
    monkeypatch.setattr(directfile, "BLOCK", 64 << 10)
    real = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if refuse and offset >= 8192 and fd != out.fileno():
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data, offset)

    def pwritev(fd: int, views: list[Any], offset: int) -> int:
        if refuse and offset >= 8192 and fd != out.fileno():
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_v(fd, views, offset)

    real_v = os.pwritev
    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "pwritev", pwritev)
    pieces: list[tuple[bool, bytes]] = [(False, os.urandom(9000))]
    for n in (5, 100_000, 4096, 4095, 1, 70_001, 12_288, 3):
        pieces.append((True, os.urandom(n)))
        pieces.append((False, os.urandom(n % 5000 + 1)))
    freed: list[Any] = []
    path = on_disk / "f"
    with open(path, "wb") as fh:
        opened = directfile.direct_file(str(path), fh.fileno())
        assert opened is not None
        out = opened
        offset = 0
        for placed, data in pieces:
            if placed:
                buf = out.placed_buffer(len(data))
                at = out.place(offset)
                buf[at : at + len(data)] = data
                out.write_placed(buf, len(data), freed.append)
            else:
                out.write(data)
            offset += len(data)
        out.finish()
    assert path.read_bytes() == b"".join(data for _, data in pieces)
    assert len(freed) == 8  # every buffer handed back once written
