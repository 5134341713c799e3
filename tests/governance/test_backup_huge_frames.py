"""A local page backup's chunk frames are sealed into buffers the disk writes from
(``O_DIRECT``, :mod:`.directfile`): private mappings advised to be huge pages
(:func:`.directfile.frame_buffer`), so a write reaches the disk in a few large
requests instead of one per ~1 MiB of 4 KiB pages (docs/benchmarks.md, "h/bkwarm").
Shared anonymous memory (``mmap.mmap(-1, n)``) is shmem: no transparent huge pages. The
backup's bytes are the same: restored byte for byte, a cancel mid-way leaves nothing."""

from __future__ import annotations

import asyncio
import ctypes
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, directfile, restore

from ._point_in_time import keyring
from .test_backup_page_delta import contents

_WAIT = 60  # (a bound on a hang if the code breaks, never a timing of the behaviour)
_THP = Path("/sys/kernel/mm/transparent_hugepage")


@pytest.fixture
def on_disk() -> Iterator[Path]:
    """A folder whose file system takes ``O_DIRECT`` (pytest's may be tmpfs); skipped
    if none."""
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="sk-test-") as folder:
        probe = Path(folder) / "probe"
        probe.touch()
        with open(probe, "r+b") as fh:
            opened = directfile.direct_file(str(probe), fh.fileno())
        if opened is None:
            pytest.skip("/var/tmp refuses O_DIRECT")
        opened.close()
        yield Path(folder)


def _huge_pages_on_advice() -> bool:
    """This system gives 2 MiB transparent huge pages to a mapping advised so."""
    try:
        top = (_THP / "enabled").read_text()
    except OSError:
        return False
    size = _THP / "hugepages-2048kB" / "enabled"
    own = size.read_text() if size.exists() else "[inherit]"
    if "[never]" in own or ("[inherit]" in own and "[never]" in top):
        return False
    return "THPeligible" in Path("/proc/self/smaps").read_text()


def _eligible(buf: Any) -> bool:
    """The mapping holding ``buf`` may take transparent huge pages (``THPeligible``)."""
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        span = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if span:
            inside = int(span[1], 16) <= address < int(span[2], 16)
        elif inside and line.startswith("THPeligible:"):
            return line.split()[1] == "1"
    return False


def test_a_chunk_frames_buffer_may_take_huge_pages(on_disk: Path) -> None:
    if not _huge_pages_on_advice():
        pytest.skip("no transparent huge pages on advice here")
    chunk = 2 << 20  # (a page backup's chunk: its frame a little over 2 MiB)
    with open(on_disk / "f", "wb") as fh:
        out = directfile.direct_file(str(on_disk / "f"), fh.fileno())
        assert out is not None
        try:
            buf = out.placed_buffer(chunk + (chunk >> 6), keep=False)
            assert len(buf) >= chunk + (chunk >> 6) + directfile.ALIGN
            assert _eligible(buf)  # (a shared mapping, as before: not eligible)
            buf[:] = bytes(len(buf))  # every byte writable
            small = out.placed_buffer(64 << 10, keep=False)  # (small: as before)
            assert len(small) == (64 << 10) + directfile.ALIGN
        finally:
            out.close()


async def _fill(store: StateStore, agents: int) -> None:
    """Agents whose states do not compress: the image's chunks stay ~2 MiB frames."""
    for i in range(agents):
        for j in range(2):
            await store.save(f"a{i:03d}", {"i": i, "j": j, "pad": os.urandom(4096).hex()})


async def test_whole_chunk_frames_restore_byte_for_byte(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    real = directfile.frame_buffer

    def frame_buffer(size: int) -> Any:
        made.append(size)
        return real(size)

    monkeypatch.setattr(directfile, "frame_buffer", frame_buffer)
    monkeypatch.setattr(directfile, "_SPARE", [])  # (none kept from other tests)
    bkey = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{on_disk / 's.db'}", keyring=keyring()) as src:
        await _fill(src, 400)
        expected = await contents(src)
        await backup(src, on_disk / "b1.skb", bkey)  # (new buffers)
        await backup(src, on_disk / "b2.skb", bkey)  # (the first one's, kept)
    assert [size for size in made if size >= directfile.HUGE]  # whole 2 MiB chunks' frames
    for name in ("b1.skb", "b2.skb"):
        async with StateStore(f"sqlite:///{on_disk / ('r' + name)}", keyring=keyring()) as dst:
            await restore(dst, [on_disk / name], bkey)
            assert await contents(dst) == expected


async def test_a_backup_cancelled_while_its_frames_are_written_leaves_nothing(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writing, release = threading.Event(), threading.Event()
    real = directfile.DirectFile._pwritev

    def held(self: directfile.DirectFile, views: list[Any], at: int) -> None:
        writing.set()
        release.wait(_WAIT)  # (the first frames' write held until the cancel is in)
        real(self, views, at)

    monkeypatch.setattr(directfile.DirectFile, "_pwritev", held)
    bkey = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{on_disk / 's.db'}", keyring=keyring()) as src:
        await _fill(src, 400)
        expected = await contents(src)
        task = asyncio.ensure_future(backup(src, on_disk / "gone.skb", bkey))
        assert await asyncio.to_thread(writing.wait, _WAIT)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not [name for name in os.listdir(on_disk) if "skb" in name]
        monkeypatch.undo()
        await backup(src, on_disk / "b.skb", bkey)  # (the buffers given back: whole again)
    async with StateStore(f"sqlite:///{on_disk / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [on_disk / "b.skb"], bkey)
        assert await contents(dst) == expected


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.parametrize("size", [64 << 10, 2 << 20], ids=["small", "huge"])
def test_frame_buffers_kept_after_a_backup_are_not_shared_with_a_forked_child(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    """The buffers a backup leaves for the next (``_SPARE``) are the process's own: a
    child forked after it (a worker, ``multiprocessing``) that runs a backup of its own
    seals its frames into its copy, never into the parent's (was: a frame smaller than
    :data:`.directfile.HUGE` went on in a shared mapping, each process's frames written
    into the other's buffer while it was being written to the disk)."""
    monkeypatch.setattr(directfile, "_SPARE", [])
    with open(on_disk / "f", "wb") as fh:
        out = directfile.direct_file(str(on_disk / "f"), fh.fileno())
        assert out is not None
        buf = out.placed_buffer(size)
        buf[:8] = b"parent!!"
        out.finish()
    assert len(directfile._SPARE) == 1 and directfile._SPARE[0] is buf
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a backup of its own takes the spare buffer and fills it
        code = 1
        try:
            directfile._SPARE.pop()[:8] = b"child!!!"
            code = 0
        finally:
            os.write(write, b"x")
            os._exit(code)
    os.close(write)
    try:
        assert os.read(read, 1) == b"x"  # (the child wrote: waited on, not timed)
    finally:
        os.close(read)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert buf[:8] == b"parent!!"


def test_frame_buffers_without_private_mappings_or_huge_page_advice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where ``mmap`` has no ``MAP_PRIVATE`` (Windows) or no ``MADV_HUGEPAGE`` (macOS,
    BSDs): a buffer of the size asked, in small pages, every byte writable."""
    for private, advice in ((0, None), (directfile._PRIVATE, None), (0, 14)):
        monkeypatch.setattr(directfile, "_PRIVATE", private)
        monkeypatch.setattr(directfile, "_HUGEPAGE", advice)
        for size in (4096, 2 << 20, (2 << 20) + 4096):
            buf = directfile.frame_buffer(size)
            assert len(buf) >= size
            buf[size - 1 : size] = b"x"
            buf.close()
