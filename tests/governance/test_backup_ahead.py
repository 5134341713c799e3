"""A whole page backup does part of its end while its pages are still shipped: the
manifest's heads packed ahead by the heads' thread and spliced into the manifest
(:func:`.framepack.ahead`), the store's own streams found there too
(:class:`.filecopy.HeadsAhead`); the backup file's blocks written by a thread of their
own while the next one is staged (:class:`.directfile.DirectFile`)."""

from __future__ import annotations

import os
import struct
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.backends.sqlite import pagepass as sqlite_pagepass
from statekeeper.governance.backup import (
    BackupKey,
    backup,
    directfile,
    filecopy,
    fileformat,
    placedframe,
    restore,
)
from statekeeper.governance.backup.fileformat import MANIFEST, FrameReader
from statekeeper.governance.backup.framepack import ahead, packb
from statekeeper.governance.backup.tagheads import internal_streams, internal_streams_sorted

from ._point_in_time import keyring
from .test_backup_page_delta import contents, fill

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
# fixmap, map 16 and map 32 headers on either side of the splice
maps = st.dictionaries(st.text(max_size=6), values, max_size=40)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(maps, maps)
def test_pairs_packed_ahead_read_as_the_whole_map(
    early: dict[str, Any], rest: dict[str, Any]
) -> None:
    whole = {**rest, **early}
    packed = ahead({key: whole[key] for key in early})
    assert msgpack.unpackb(packb(whole, packed), raw=False, strict_map_key=False) == whole


def test_a_map_of_65536_pairs_and_more_keeps_its_header() -> None:
    early = {f"e{n}": n for n in range(70_000)}
    whole = {"a": 1, **early}
    got = msgpack.unpackb(packb(whole, ahead(early)), raw=False)
    assert got == whole


def test_values_not_the_ones_packed_ahead_are_packed_now() -> None:
    heads = {"agent": ["a", "b"], "head": [1, 2]}
    packed = ahead({"heads": heads})
    changed = {"agent": ["a", "b"], "head": [1, 3]}  # equal once, another object now
    assert packb({"x": 1, "heads": changed}, packed) == packb({"x": 1, "heads": changed})
    assert packb({"x": 1}, packed) == packb({"x": 1})  # the key absent
    assert packb([1, 2], packed) == packb([1, 2])  # not a map


ids = st.lists(
    st.tuples(
        st.sampled_from(["", "\x01sk-", "\x01sk", "\x01sk.", "\x01sk,", "\x01", "\x02"]), st.text()
    ).map("".join),
    max_size=60,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(ids)
def test_the_own_streams_of_sorted_ids_are_found_by_bisection(stream_ids: list[str]) -> None:
    in_order = sorted(stream_ids)
    assert internal_streams_sorted(in_order) == internal_streams(stream_ids)


async def test_a_page_backups_manifest_is_its_heads_and_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heads' thread fills :class:`.filecopy.HeadsAhead` (and closes its own
    connection of the snapshot); the manifest read back holds the heads the store
    has, the result counts the store's own streams, the backup restores."""
    seen: list[filecopy.HeadsAhead] = []
    real = filecopy._heads_ahead

    def spy(conn: Any, tags: bool, heads_ahead: filecopy.HeadsAhead | None, *scan: Any) -> Any:
        if heads_ahead is not None:
            seen.append(heads_ahead)
        return real(conn, tags, heads_ahead, *scan)

    monkeypatch.setattr(filecopy, "_heads_ahead", spy)
    bkey = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 120)
        result = await backup(src, tmp_path / "b.skb", bkey)
        expected = await contents(src)
    assert len(seen) == 1 and seen[0].packed is not None
    reader = FrameReader(tmp_path / "b.skb", bkey)
    try:
        heads = reader.manifest["heads"]
        assert heads is not None and len(heads["agent"]) == result.agents + result.internal
        assert sorted(heads["agent"]) == heads["agent"]
        own = tuple(a for a in heads["agent"] if a.startswith("\x01sk-"))
        assert seen[0].internal == own == result.internal_streams
    finally:
        reader.close()
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], bkey)
        assert await contents(dst) == expected


async def test_a_local_page_backups_manifest_is_framed_not_compressed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the C pass, a local page backup's manifest is a zero-run frame (its bytes
    as they are: zstd -20 cost 60 M instructions at the backup's serial end for 100,000
    heads), sealed and authenticated as before; it reads back and restores."""
    if sqlite_pagepass.zero_run_frame is None:
        pytest.skip("the C pass is not built (or STATEKEEPER_PURE=1): zstd frames it")
    bkey = BackupKey(os.urandom(32))
    ended: list[bool] = []
    real = placedframe.finish_placed

    def spy(*args: Any) -> bool:
        ended.append(real(*args))
        return ended[-1]

    monkeypatch.setattr(placedframe, "finish_placed", spy)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 120)
        await backup(src, tmp_path / "b.skb", bkey)
        expected = await contents(src)
    placed = ended == [True]
    reader = FrameReader(tmp_path / "b.skb", bkey)
    try:
        raw = (tmp_path / "b.skb").read_bytes()
        (offset,) = struct.unpack(">Q", raw[-8:])
        assert raw[offset : offset + 1] == MANIFEST
        (length,) = struct.unpack(">Q", raw[offset + 1 : offset + 9])
        aad = fileformat._aad(reader.header, MANIFEST, 0)
        framed = bkey.open(aad, raw[offset + 9 : offset + 9 + length])
        assert framed is not None
        plain = zstandard.ZstdDecompressor().decompress(framed)
        assert len(framed) > len(plain)  # (not compressed: a few block headers more)
        # raw and RLE blocks only (sealed in its place where the file takes O_DIRECT, its
        # heads framed ahead and the rest in raw blocks: "backup6"; else framed whole)
        assert set(_blocks(framed)) <= {0, 1}
        if not placed:
            assert framed == sqlite_pagepass.zero_run_frame(plain)
        assert len(reader.manifest["heads"]["agent"]) >= 120
    finally:
        reader.close()
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [tmp_path / "b.skb"], bkey)
        assert await contents(dst) == expected


def _blocks(frame: bytes) -> list[int]:
    """The block types of a zstd frame with an 8-byte content size and a window byte."""
    at, kinds = placedframe.HEAD_BYTES, []
    while True:
        head = int.from_bytes(frame[at : at + 3], "little")
        kinds.append((head >> 1) & 3)
        at += 3 + (1 if (head >> 1) & 3 == 1 else head >> 3)
        if head & 1:
            assert at == len(frame)
            return kinds


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


def test_a_block_is_staged_while_the_one_before_is_written(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller fills the next block while the disk writes the one before (was: each
    block written by the caller, the disk idle while the next one was staged)."""
    block = 64 << 10
    monkeypatch.setattr(directfile, "BLOCK", block)
    real = os.pwrite
    writing, release = threading.Event(), threading.Event()

    def slow(fd: int, data: Any, offset: int) -> int:
        if offset == 0:
            writing.set()
            release.wait(60)  # the first block's write holds on until the test says
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", slow)
    first, second = os.urandom(block), os.urandom(block - 1)
    staged = threading.Event()
    with open(on_disk / "f", "wb") as fh:
        out = directfile.direct_file(str(on_disk / "f"), fh.fileno())
        assert out is not None

        def feed() -> None:
            out.write(first)  # a full block: handed to the disk's thread
            out.write(second)  # staged in the other buffer meanwhile
            staged.set()

        feeder = threading.Thread(target=feed)
        feeder.start()
        try:
            assert writing.wait(60)
            assert staged.wait(60), "the second block waited for the first one's write"
        finally:
            release.set()
            feeder.join()
        out.finish()
    assert (on_disk / "f").read_bytes() == first + second


def test_a_failed_write_is_raised_by_the_next_write_or_the_finish(
    on_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = 64 << 10
    monkeypatch.setattr(directfile, "BLOCK", block)
    real = os.pwrite

    def failing(fd: int, data: Any, offset: int) -> int:
        if offset >= block:
            raise OSError(28, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", failing)
    with open(on_disk / "f", "wb") as fh:
        out = directfile.direct_file(str(on_disk / "f"), fh.fileno())
        assert out is not None
        out.write(os.urandom(2 * block))  # the second block's write fails in the thread
        with pytest.raises(OSError, match="No space left"):
            out.write(os.urandom(block))
        out.close()
    with open(on_disk / "g", "wb") as fh:
        out = directfile.direct_file(str(on_disk / "g"), fh.fileno())
        assert out is not None
        out.write(os.urandom(block + 10))
        with pytest.raises(OSError, match="No space left"):
            out.finish()
