"""What a whole SQLite store's page backup spends besides its pages (docs/benchmarks.md,
"backupsix"): the manifest packed by ``ormsgpack`` (the same bytes as ``msgpack``, half
its CPU) and not SHA-256'd (nothing reads that digest), the page chunks compressed by
zstd's fast strategy with a hash table that stays in the L1 cache, and the store's own
streams found among 100,000 heads without a dict of them. Each backup restores as
before."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
import zstandard

from statekeeper import StateStore
from statekeeper.governance.backup import BackupKey, backup, filecopy, fileformat, restore, writer
from statekeeper.governance.backup.fileformat import MANIFEST, FrameReader
from statekeeper.governance.backup.framepack import packb

from ._point_in_time import keyring


async def _filled(path: Path, agents: int) -> None:
    async with StateStore(f"sqlite:///{path}", keyring=keyring()) as store:
        for i in range(agents):
            await store.save(f"t{i % 3}/a{i:04d}", {"i": i, "pad": "x" * 300})


async def _restored(made: Path, key: BackupKey, target: Path) -> list[str]:
    async with StateStore(f"sqlite:///{target}", keyring=keyring()) as dst:
        await restore(dst, [made], key)
        assert (await dst.load("t1/a0007")).data["i"] == 7
        return [info.agent_id for info in await dst.list_agents(limit=1000)]


def test_a_manifest_packs_to_the_bytes_msgpack_makes() -> None:
    """The manifest's shapes (columns of ids, seqs and tags, chunk entries, floats, None,
    a page digests blob) pack by the fast packer to ``msgpack``'s bytes; what it
    refuses (a tuple, an integer beyond 64 bits) is packed by ``msgpack`` and reads
    back."""
    manifest: dict[str, Any] = {
        "heads": {"agent": ["t0/a", "t1/b"], "head": [3, 2**40], "tag": [b"\x01" * 36, None]},
        "chunks": [{"index": 0, "offset": 9, "length": 2 << 20, "tag": "ab" * 16}],
        "created_at": 1.5,
        "parent": None,
        "page_digests": os.urandom(64),
        "events": -1,
    }
    assert packb(manifest) == msgpack.packb(manifest, use_bin_type=True)
    assert msgpack.unpackb(packb({"a": (1, 2)}), raw=False) == {"a": [1, 2]}
    assert msgpack.unpackb(packb({"a": 2**64 - 1}), raw=False) == {"a": 2**64 - 1}
    with pytest.raises(OverflowError):  # as msgpack alone refuses it
        packb({"a": 2**70})


async def test_the_manifest_frame_is_not_sha256d(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page backup's manifest frame (megabytes for a large store) is sealed without a
    SHA-256 of it: chunks are named by their GCM tags and the manifest by its place
    before the trailer, so nothing reads that digest (before: 0.007 CPU-s of a
    100,000-agent backup). The backup restores."""
    await _filled(tmp_path / "s.db", 30)
    hashed: list[bytes] = []

    def sha256(data: bytes = b"") -> Any:
        hashed.append(bytes(data[:1]))
        return hashlib.sha256(data)

    monkeypatch.setattr(fileformat, "hashlib", SimpleNamespace(sha256=sha256))
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        made = await backup(src, tmp_path / "b.skb", key)
    monkeypatch.undo()
    assert made.agents == 30
    assert MANIFEST not in hashed, hashed
    assert len(await _restored(tmp_path / "b.skb", key, tmp_path / "d.db")) == 30


async def test_page_chunks_take_the_fast_strategy_with_small_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sealing threads compress a page image with zstd's fast strategy and a hash
    table of 2**11 entries, matches of 7 bytes (:data:`.filecopy.LEVEL`), not level
    -20's larger table: the bench image in 13 % less CPU and fewer bytes. Any zstd
    reader takes the frames: the backup restores. (Where zstd compresses a page
    image: a backup to S3, or without the C page pass; a local one with it makes its
    frames of the zero runs and the rest raw, test_sqlite_pagepass.py.)"""
    made_with: list[dict[str, Any]] = []
    real = zstandard.ZstdCompressor

    def compressor(**kwargs: Any) -> Any:
        made_with.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(zstandard, "ZstdCompressor", compressor)
    monkeypatch.setattr(filecopy, "zero_run_frames", None)
    await _filled(tmp_path / "s.db", 30)
    key = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await backup(src, tmp_path / "b.skb", key)
    monkeypatch.undo()
    params = [kw["compression_params"] for kw in made_with if "compression_params" in kw]
    assert params, made_with  # main: level=-20 only
    assert {(p.hash_log, p.min_match, p.strategy) for p in params} == {
        (11, 7, zstandard.STRATEGY_FAST)
    }
    assert filecopy.LEVEL["hash_log"] == 11
    assert len(await _restored(tmp_path / "b.skb", key, tmp_path / "d.db")) == 30


async def test_the_stores_own_streams_are_counted_apart_without_a_dict_of_heads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The result's agents leave out the store's own streams (here its legal holds
    stream), whose events are found by looking up those streams' heads alone (before:
    a dict of every stream's head, 0.023 CPU-s for 100,000 agents)."""
    from statekeeper.governance.holds import add_hold

    await _filled(tmp_path / "s.db", 12)
    key = BackupKey(os.urandom(32))
    zipped: list[int] = []

    def counting_zip(*columns: Any, strict: bool = False) -> Any:
        zipped.append(max((len(c) for c in columns if isinstance(c, list)), default=0))
        return zip(*columns, strict=strict)

    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await add_hold(src, "t1/a0007", "a matter")
        # the writer's ``zip(...)`` calls (a module global shadows the builtin): main
        # zipped every stream's id with its head into a dict
        monkeypatch.setattr(writer, "zip", counting_zip, raising=False)
        made = await backup(src, tmp_path / "b.skb", key)
        monkeypatch.undo()
    assert (made.agents, made.copied, made.events) == (12, 12, 12), made
    assert len(made.internal_streams) == 1
    assert not [n for n in zipped if n >= 12], zipped
    reader = FrameReader(tmp_path / "b.skb", key)
    try:
        assert len(reader.manifest["heads"]["agent"]) == 13
    finally:
        reader.close()
    assert len(await _restored(tmp_path / "b.skb", key, tmp_path / "d.db")) == 12


async def test_the_heads_split_in_c_lists_what_the_rows_say(tmp_path: Path) -> None:
    """The heads as one statement, split without a Python step per stream (the seqs as
    one JSON array, the tags by ``struct``), are the heads table's rows, in id order;
    an empty tag width (no statekeeper writes one) takes the row-by-row path instead
    of a ``range`` of step 0 (a bare ``ValueError`` before)."""
    import sqlite3

    from statekeeper.governance.backup import tagheads

    await _filled(tmp_path / "s.db", 40)
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        rows = conn.execute(tagheads._ROWS).fetchall()
        heads = tagheads.tag_heads(conn)
        assert list(zip(heads.agents, heads.heads, heads.tags, strict=True)) == rows
        assert heads.accounted == sum(r[1] for r in rows) and heads.untagged["agent"] == []
        conn.execute("UPDATE sk_agents SET head_tag = x''")
        emptied = tagheads.tag_heads(conn)
        assert emptied.agents == heads.agents and emptied.tags == [b""] * len(rows)
    finally:
        conn.close()
