"""A page backup's bounded pipeline (:class:`~statekeeper.governance.backup.sealer.ChunkSealer`):
the page reader never writes (a thread of its own writes the sealed chunks, in
order), and a failure of any stage (the reader, the sealing, the writing) leaves no
backup file, no temporary file and no thread of the pipeline running; a write that
fails (the disk full) is a typed :class:`~statekeeper.errors.BackupError`."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import pages as sqlite_pages
from statekeeper.errors import BackendError, BackupError
from statekeeper.governance.backup import BackupKey, backup, directfile, location, restore
from statekeeper.governance.backup.fileformat import BackupKey as FormatKey
from statekeeper.governance.backup.fileformat import FrameWriter
from statekeeper.governance.backup.sealer import ChunkSealer

from ._point_in_time import keyring

#: small chunks: the bench-sized pipeline on a small store (many chunks in flight)
CHUNK = 16 << 10


async def _filled(path: Path) -> StateStore:
    store = StateStore(f"sqlite:///{path}", keyring=keyring())
    await store.__aenter__()
    for i in range(60):
        for j in range(3):
            await store.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": j, "pad": "x" * 400})
    return store


def _threads() -> set[threading.Thread]:
    # asyncio's own executor (``to_thread``) outlives a backup by design
    return {t for t in threading.enumerate() if not t.name.startswith("asyncio")}


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def _refused(
    store: StateStore, folder: Path, error: type[BaseException]
) -> pytest.ExceptionInfo[BaseException]:
    """A backup into ``folder`` (empty) that fails with ``error``: nothing left in the
    folder, and no thread left that was not running before."""
    before = _threads()
    with pytest.raises(error) as raised:
        await backup(store, folder / "b.skb", BackupKey(os.urandom(32)), chunk_bytes=CHUNK)
    assert _left(folder) == []  # neither the backup nor its temporary file
    assert _threads() - before == set()  # every thread of the pipeline joined
    return raised


async def test_the_page_reader_never_writes_a_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread that reads the pages hands each sealed chunk to the writing thread:
    it reads chunk n+1 while chunk n is sealed and chunk n-1 written (before, it wrote
    each chunk itself and stood still meanwhile). The backup restores as before."""
    readers: set[int] = set()
    writers: set[int] = set()
    chunks = sqlite_pages.PageSnapshot.chunks

    def reading(self: Any, *args: Any) -> Iterator[bytearray]:
        for piece in chunks(self, *args):
            readers.add(threading.get_ident())
            yield piece

    write = FrameWriter._write

    def writing(self: FrameWriter, data: Any) -> None:
        if isinstance(data, memoryview) or data[:1] == b"C":  # a chunk's frame
            writers.add(threading.get_ident())
        write(self, data)

    placed = ChunkSealer._put_placed

    def placing(self: ChunkSealer, *args: Any) -> None:  # a frame sealed in place (O_DIRECT)
        writers.add(threading.get_ident())
        placed(self, *args)

    monkeypatch.setattr(sqlite_pages.PageSnapshot, "chunks", reading)
    monkeypatch.setattr(FrameWriter, "_write", writing)
    monkeypatch.setattr(ChunkSealer, "_put_placed", placing)
    key = BackupKey(os.urandom(32))
    store = await _filled(tmp_path / "s.db")
    try:
        await backup(store, tmp_path / "b.skb", key, chunk_bytes=CHUNK)
    finally:
        await store.close()
    assert len(readers) == 1
    assert writers and not readers & writers
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as target:
        done = await restore(target, [tmp_path / "b.skb"], key)
        assert done.agents == 60


async def test_a_write_failing_midway_is_a_backup_error_leaving_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills up after a few chunks: a :class:`BackupError` (it was the bare
    ``OSError``), no file left (not the backup, not its temporary file), no thread
    of the pipeline left running."""
    store = await _filled(tmp_path / "s.db")
    folder = tmp_path / "out"
    folder.mkdir()

    class DiskFull:
        def __init__(self, fh: Any) -> None:
            self.fh, self.written = fh, 0

        def write(self, data: Any) -> int:
            if self.written > 3 * CHUNK:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
            return int(self.fh.write(data))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fh, name)

        def __enter__(self) -> DiskFull:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()

    fake_os = types.ModuleType("os")
    fake_os.__dict__.update(os.__dict__)
    fake_os.fdopen = lambda fd, mode: DiskFull(os.fdopen(fd, mode))  # type: ignore[attr-defined]
    try:
        await backup(store, tmp_path / "warm.skb", BackupKey(os.urandom(32)), chunk_bytes=CHUNK)
        monkeypatch.setattr(location, "os", fake_os)
        # the file written through the page cache, by ``fh`` (O_DIRECT's writes do not
        # go through it: their full disk in tests/governance/test_backup_direct_file.py)
        monkeypatch.setattr(directfile, "_O_DIRECT", 0)
        raised = await _refused(store, folder, BackupError)
        assert "No space left on device" in str(raised.value)
    finally:
        await store.close()


@pytest.mark.parametrize("direct", [True, False], ids=["sealed-in-place", "page-cache"])
async def test_a_sealing_failure_midway_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    """A chunk that cannot be sealed (the third): the failure itself is raised, and
    nothing is left behind, no thread either (its frame sealed into its place in the
    ``O_DIRECT`` file's buffer, or into a buffer of its own)."""
    if not direct:
        monkeypatch.setattr(directfile, "_O_DIRECT", 0)
    store = await _filled(tmp_path / "s.db")
    folder = tmp_path / "out"
    folder.mkdir()
    calls: list[int] = []
    sealing = FormatKey.seal_into

    def failing(self: FormatKey, aad: bytes, plain: Any, out: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("sealing failed")
        return sealing(self, aad, plain, out)

    try:
        await backup(store, tmp_path / "warm.skb", BackupKey(os.urandom(32)), chunk_bytes=CHUNK)
        monkeypatch.setattr(FormatKey, "seal_into", failing)
        await _refused(store, folder, MemoryError)
        assert len(calls) >= 3
    finally:
        await store.close()


async def test_the_page_reader_failing_midway_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store cannot be read any more after two chunks (an I/O error): the error is
    raised, the chunks in flight are dropped and every thread of the pipeline joined
    (before, the sealing threads were left running), no file is left."""
    store = await _filled(tmp_path / "s.db")
    folder = tmp_path / "out"
    folder.mkdir()
    chunks = sqlite_pages.PageSnapshot.chunks

    def failing(self: Any, *args: Any) -> Iterator[bytearray]:
        for number, piece in enumerate(chunks(self, *args)):
            if number == 2:
                raise sqlite3.OperationalError("disk I/O error")
            yield piece

    try:
        await backup(store, tmp_path / "warm.skb", BackupKey(os.urandom(32)), chunk_bytes=CHUNK)
        monkeypatch.setattr(sqlite_pages.PageSnapshot, "chunks", failing)
        raised = await _refused(store, folder, BackendError)  # (typed, naming the file)
        assert "s.db" in str(raised.value) and "disk I/O error" in str(raised.value)
        assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
    finally:
        await store.close()
