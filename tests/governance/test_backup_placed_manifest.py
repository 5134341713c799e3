"""A local page backup's manifest sealed into its place (:mod:`.placedframe`, "backup6"):
its heads framed by the heads' thread, the rest packed and framed at the end, the two
encrypted piece by piece straight into the buffer ``O_DIRECT`` writes: never joined,
copied behind its frame's head or staged. The file reads as before (the same frame
kind, one zstd frame of raw and RLE blocks, the manifest's map as ``packb`` splices it)
and restores; where it does not apply, nothing is written and the frame is made as
before."""

from __future__ import annotations

import errno
import os
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.errors import BackupError
from statekeeper.governance.backup import (
    BackupKey,
    backup,
    directfile,
    fileformat,
    placedframe,
    restore,
)
from statekeeper.governance.backup.fileformat import MANIFEST, FrameReader, FrameWriter
from statekeeper.governance.backup.framepack import ahead, packb

from ._point_in_time import keyring

native = pytest.mark.skipif(
    sqlite_pagepass.zero_run_frame is None, reason="the C pass is not built: zstd frames it"
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=300), max_size=6), st.binary(max_size=40))
def test_parts_sealed_one_after_another_are_the_joined_bytes_sealed(
    parts: list[bytes], aad: bytes
) -> None:
    key = BackupKey(bytes(range(32)))
    total = sum(map(len, parts))
    out = bytearray(total + 16)
    nonce, written = placedframe.seal_parts_into(key, aad, tuple(parts), memoryview(out))
    assert written == total + 16
    aead = AESGCM(fileformat._hkdf(bytes(range(32)), b"encryption"))
    assert bytes(out) == aead.encrypt(nonce, b"".join(parts), aad)
    assert key.open(aad, nonce + bytes(out)) == b"".join(parts)


runs = st.lists(
    st.one_of(st.binary(min_size=1, max_size=200), st.integers(1, 300).map(bytes)), max_size=12
).map(b"".join)


@native
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(runs, runs)
def test_a_head_of_raw_blocks_then_zero_run_blocks_is_one_zstd_frame(
    front: bytes, pairs: bytes
) -> None:
    """Any zstd reader reads the frame as the two pieces' bytes, the front in raw blocks
    (any length: blocks of 128 KiB at most), the rest as the zero-run frame's blocks."""
    assert sqlite_pagepass.zero_run_frame is not None
    blocks = sqlite_pagepass.zero_run_frame(pairs)[placedframe.HEAD_BYTES :]
    frame = bytes(placedframe.zstd_head(len(front) + len(pairs), front)) + blocks
    assert zstandard.ZstdDecompressor().decompress(frame) == front + pairs


def test_a_long_front_is_cut_into_blocks_of_the_window() -> None:
    front = os.urandom(300_000)
    head = placedframe.zstd_head(len(front) + 1, front)
    frame = bytes(head) + bytes((1 | (1 << 3), 0, 0)) + b"z"  # a last raw block of b"z"
    assert zstandard.ZstdDecompressor().decompress(frame) == front + b"z"
    assert len(head) == placedframe.HEAD_BYTES + len(front) + 3 * 3


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


async def _fill(store: StateStore) -> None:
    for i in range(150):
        await store.save(f"t{i % 3}/a{i:03d}", {"i": i, "pad": "p" * (i % 40)})


def _blocks(frame: bytes) -> list[int]:
    """The block types of a zstd frame with an 8-byte content size and a window byte."""
    at, kinds = placedframe.HEAD_BYTES, []
    while True:
        head = int.from_bytes(frame[at : at + 3], "little")
        kind, size = (head >> 1) & 3, head >> 3
        kinds.append(kind)
        at += 3 + (1 if kind == 1 else size)
        if head & 1:
            assert at == len(frame)
            return kinds


@native
async def test_a_local_page_backups_manifest_is_sealed_in_its_place(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of the manifest is staged (``DirectFile.write`` sees the trailer only),
    ``FrameWriter.finish`` is not called; the frame holds the map ``packb`` makes of
    the manifest and its heads packed ahead, in raw and RLE blocks only; it restores."""
    seen: list[tuple[dict[str, Any], Any, bool]] = []
    real = placedframe.finish_placed

    def spy(writer: FrameWriter, manifest: dict[str, Any], packed: Any) -> bool:
        ending.append(1)
        done = real(writer, manifest, packed)
        seen.append((dict(manifest), packed, done))
        return done

    ending: list[int] = []
    staged: list[int] = []
    write = directfile.DirectFile.write

    def staging(self: Any, data: Any) -> int:
        if ending:  # (the backup's end)
            staged.append(len(data))
        return write(self, data)

    finished: list[int] = []
    monkeypatch.setattr(placedframe, "finish_placed", spy)
    monkeypatch.setattr(directfile.DirectFile, "write", staging)
    monkeypatch.setattr(FrameWriter, "finish", lambda *args: finished.append(1))
    bkey = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{on_disk / 's.db'}", keyring=keyring()) as src:
        await _fill(src)
        await backup(src, on_disk / "b.skb", bkey)
    assert len(seen) == 1 and seen[0][2] is True and finished == []
    assert staged == [len(fileformat.TRAILER) + 8]
    manifest, packed, _ = seen[0]
    raw = (on_disk / "b.skb").read_bytes()
    (offset,) = struct.unpack(">Q", raw[-8:])
    assert raw[offset : offset + 1] == MANIFEST
    (length,) = struct.unpack(">Q", raw[offset + 1 : offset + 9])
    assert offset + 9 + length == len(raw) - len(fileformat.TRAILER) - 8
    reader = FrameReader(on_disk / "b.skb", bkey)
    try:
        aad = fileformat._aad(reader.header, MANIFEST, 0)
        framed = bkey.open(aad, raw[offset + 9 : offset + 9 + length])
        assert framed is not None
        assert set(_blocks(framed)) <= {0, 1}  # raw and RLE: nothing compressed
        assert zstandard.ZstdDecompressor().decompress(framed) == packb(manifest, packed)
        assert len(reader.manifest["heads"]["agent"]) >= 150
    finally:
        reader.close()
    async with StateStore(f"sqlite:///{on_disk / 'r.db'}", keyring=keyring()) as dst:
        done = await restore(dst, [on_disk / "b.skb"], bkey)
        assert done.agents == 150


@native
def test_a_manifest_not_holding_the_heads_packed_ahead_is_not_placed(on_disk: Path) -> None:
    """Its values are not the ones packed (and framed) ahead: nothing written, the
    frame made by ``finish`` as before."""
    path = on_disk / "f.skb"
    with open(path, "wb") as fh:
        out = directfile.direct_file(str(path), fh.fileno())
        assert out is not None
        try:
            key = BackupKey(os.urandom(32))
            writer = FrameWriter(out, fileformat.Header.new("id", None, key, 0.0, 5), key)
            assert sqlite_pagepass.zero_run_frames is not None
            writer.manifest_frames = sqlite_pagepass.zero_run_frames()
            heads = {"heads": {"agent": ["a"], "head": [1]}}
            packed = ahead(heads)
            assert sqlite_pagepass.zero_run_frame is not None
            blocks = memoryview(sqlite_pagepass.zero_run_frame(bytes(packed.pairs)))
            packed = packed._replace(blocks=blocks[placedframe.HEAD_BYTES :])
            before = writer.offset
            manifest = {"heads": {"agent": ["a"], "head": [1]}}  # equal, not the same object
            assert placedframe.finish_placed(writer, manifest, packed) is False
            assert writer.offset == before
            assert placedframe.finish_placed(writer, {**heads}, None) is False
        finally:
            out.close()


@native
async def test_the_manifest_failing_to_be_written_is_a_backup_error_leaving_nothing(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_placed = directfile.DirectFile.write_placed

    def full(self: Any, buf: Any, length: int, done: Any) -> None:
        if done is placedframe._written:  # the manifest's frame: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_placed(self, buf, length, done)

    out = on_disk / "out"
    out.mkdir()
    async with StateStore(f"sqlite:///{on_disk / 's.db'}", keyring=keyring()) as src:
        await _fill(src)
        monkeypatch.setattr(directfile.DirectFile, "write_placed", full)
        with pytest.raises(BackupError, match="No space left on device"):
            await backup(src, out / "b.skb", BackupKey(os.urandom(32)))
    assert list(out.iterdir()) == []
