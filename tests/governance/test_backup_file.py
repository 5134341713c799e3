"""Backups of a whole SQLite store as a file copy (format version 2): no row becomes a
Python object at backup time; the old format (version 1, main's writer) still
restores; damaged or edited file backups are refused with nothing restored; what is
not a whole-store backup (one namespace, incremental, other engines) keeps the row
path, and a tenant's backup holds no other tenant's bytes."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.backends.sqlite import export as sqlite_export
from statekeeper.errors import BackupCorrupt, BackupError
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.fileformat import (
    MAGIC,
    MANIFEST,
    TRAILER,
    FrameReader,
    _aad,
)
from statekeeper.governance.backup.restore import iter_entries
from statekeeper.governance.policy import Policy

from ._point_in_time import check_as_it_began, keyring, write_before_heads, write_during

DATA = Path(__file__).parent / "data"


def decrypted_copy(file: Path, key: BackupKey) -> bytes:
    """The store file copy a version-2 backup holds, decrypted."""
    from statekeeper.governance.backup.filecopy import opened_copy

    reader = FrameReader(file, key)
    try:
        with opened_copy(reader) as copy:
            return Path(copy).read_bytes()
    finally:
        reader.close()


def version_of(file: Path) -> tuple[int, dict[str, Any]]:
    data = file.read_bytes()
    length = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
    return data[len(MAGIC) - 1], json.loads(data[len(MAGIC) + 4 : len(MAGIC) + 4 + length])


async def fill(store: StateStore, agents: int, events: int = 3) -> None:
    for i in range(agents):
        for j in range(events):
            key = f"k{j}" if j == 1 else None
            await store.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": j}, idempotency_key=key)


async def test_a_whole_sqlite_store_is_backed_up_without_reading_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam: every way the backup could read rows (the backend's export and read
    methods, the SQLite export functions, the codec) counts its calls; a file backup
    makes none, and restores everything."""
    calls: list[str] = []

    def counting(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        if name in ("export_whole", "export_slices"):

            def plain(*args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return original(*args, **kwargs)

            monkeypatch.setattr(owner, name, plain)
            return

        async def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return await original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(
        f"sqlite:///{tmp_path / 's.db'}", keyring=keyring(), snapshot_every=2
    ) as src:
        await fill(src, 30)
        from statekeeper.backends.sqlite import SQLiteBackend

        for name in ("export_rows", "export_streams", "read", "list_agents", "read_latest"):
            counting(SQLiteBackend, name)
            counting(Backend, name)
        counting(sqlite_export, "export_whole")
        counting(sqlite_export, "export_slices")
        opened = 0
        codec_open = src.codec.open

        def open_counted(*args: Any) -> Any:
            nonlocal opened
            opened += 1
            return codec_open(*args)

        monkeypatch.setattr(src.codec, "open", open_counted)
        result = await backup(src, file, bkey, chunk_bytes=4096)
        assert calls == [] and opened == 0
        assert result.agents == 30 and result.events == 90 and result.snapshots == 30
    monkeypatch.undo()
    assert version_of(file)[0] == 5  # the heads as the heads table's tags
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        restored = await restore(dst, [file], bkey)
        assert restored.agents == 30 and restored.events == 90
        assert (await dst.verify()).ok
        assert (await dst.load("t1/a004")).data == {"i": 4, "j": 2}
        assert (await dst.save("t1/a004", {"i": 4, "j": 1}, idempotency_key="k1")).duplicate


async def test_the_header_names_the_format_version_and_layout(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 4)
        await backup(src, tmp_path / "full.skb", bkey)
        await src.save("t0/a000", {"more": 1})
        await backup(src, tmp_path / "inc.skb", bkey, since=tmp_path / "full.skb")
    async with StateStore("memory://", keyring=keyring()) as mem:
        await fill(mem, 2)
        await backup(mem, tmp_path / "mem.skb", bkey)
    version, header = version_of(tmp_path / "full.skb")
    assert (version, header["version"], header["layout"]) == (5, 5, "sqlite-file")
    version, header = version_of(tmp_path / "inc.skb")  # the pages changed since the parent
    assert (version, header["version"], header["layout"]) == (6, 6, "sqlite-page-delta")
    version, header = version_of(tmp_path / "mem.skb")  # the row path: version 1, as main wrote it
    assert (version, header["version"], "layout" in header) == (1, 1, False)
    reader = FrameReader(tmp_path / "full.skb", bkey)
    try:
        assert reader.header.layout == "sqlite-file"
        assert reader.manifest["file_bytes"] > 0 and len(reader.manifest["heads"]["agent"]) == 4
    finally:
        reader.close()
    # an unknown version is refused by name
    data = bytearray((tmp_path / "full.skb").read_bytes())
    data[len(MAGIC) - 1] = 9
    (tmp_path / "v9.skb").write_bytes(bytes(data))
    with pytest.raises(BackupCorrupt, match="unknown backup format version 9"):
        FrameReader(tmp_path / "v9.skb", bkey)


async def test_a_backup_written_by_mains_writer_still_restores(tmp_path: Path) -> None:
    """``data/backup_v1_main.skb``: written by main's writer (commit b2b9a87, format
    version 1): 6 agents of 4 events, snapshots every 3, an idempotency key at seq 2."""
    bkey = BackupKey(bytes(range(32, 64)))
    file = tmp_path / "old.skb"
    file.write_bytes((DATA / "backup_v1_main.skb").read_bytes())
    assert version_of(file)[0] == 1
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        result = await restore(dst, [file], bkey)
        assert (result.agents, result.events, result.snapshots) == (6, 24, 6)
        assert (await dst.verify()).ok
        for i in range(6):
            assert (await dst.load(f"t{i % 2}/a{i}")).data == {"i": i, "j": 3}
        assert (await dst.save("t1/a3", {"i": 3, "j": 1}, idempotency_key="k1")).duplicate
        # and an incremental on top of it, written now (the row path reads its manifest)
    async with StateStore("memory://", keyring=keyring()) as other:
        await restore(other, [file], bkey)
        await other.save("t0/a0", {"after": True})
        await backup(other, tmp_path / "inc.skb", bkey, since=file)
    async with StateStore(f"sqlite:///{tmp_path / 'r2.db'}", keyring=keyring()) as dst:
        await restore(dst, [file, tmp_path / "inc.skb"], bkey)
        assert (await dst.load("t0/a0")).data == {"after": True}


async def test_an_older_file_backup_named_by_sha256_still_restores(tmp_path: Path) -> None:
    """``data/backup_v2_main.skb``: written by main's writer (commit 5b3c23a, format
    version 2, chunks named by the SHA-256 of their frames): 6 agents of 4 events,
    snapshots every 3, an idempotency key at seq 2."""
    bkey = BackupKey(bytes(range(32, 64)))
    file = tmp_path / "old.skb"
    file.write_bytes((DATA / "backup_v2_main.skb").read_bytes())
    assert version_of(file)[0] == 2
    reader = FrameReader(file, bkey)
    try:
        assert all("sha256" in c and "tag" not in c for c in reader.manifest["chunks"])
    finally:
        reader.close()
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        result = await restore(dst, [file], bkey)
        assert (result.agents, result.events, result.snapshots) == (6, 24, 6)
        assert (await dst.verify()).ok
        for i in range(6):
            assert (await dst.load(f"t{i % 2}/a{i}")).data == {"i": i, "j": 3}
        assert (await dst.save("t1/a3", {"i": 3, "j": 1}, idempotency_key="k1")).duplicate
    # an edited digest in it is still refused
    data = file.read_bytes()
    edited = reseal_manifest(data, bkey, lambda m: m["chunks"][0].__setitem__("sha256", "0" * 64))
    file.write_bytes(edited)
    (tmp_path / "again").mkdir()
    assert isinstance(await refused(tmp_path / "again", file, bkey), BackupCorrupt)


async def test_a_file_backup_names_its_chunks_by_their_gcm_tag(
    tmp_path: Path, made: tuple[Path, BackupKey, bytes]
) -> None:
    """No SHA-256 pass over the chunks: the manifest names each frame by its GCM tag
    (the frame's last 16 bytes, which authenticate it under the backup key)."""
    file, bkey, data = made
    reader = FrameReader(file, bkey)
    try:
        chunks = reader.manifest["chunks"]
    finally:
        reader.close()
    assert len(chunks) > 3
    for chunk in chunks:
        assert "sha256" not in chunk
        frame = data[chunk["offset"] : chunk["offset"] + chunk["length"]]
        assert chunk["tag"] == frame[-16:].hex()


@pytest.fixture
async def made(tmp_path: Path) -> tuple[Path, BackupKey, bytes]:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 40)
        await backup(src, file, bkey, chunk_bytes=4096)
    assert version_of(file)[0] == 5
    return file, bkey, file.read_bytes()


async def refused(tmp_path: Path, file: Path, key: BackupKey) -> BaseException:
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        with pytest.raises(BackupError) as caught:
            await restore(dst, [file], key)
        assert await dst.count_agents() == 0  # nothing restored
    return caught.value


def reseal_manifest(data: bytes, key: BackupKey, edit: Any) -> bytes:
    """The file with its manifest edited and sealed again WITH the backup key (what
    only a holder of the key, or a writer bug, could do)."""
    import zstandard

    from statekeeper.governance.backup.fileformat import Header

    offset = int.from_bytes(data[-8:], "big")
    length = int.from_bytes(data[offset + 1 : offset + 9], "big")
    sealed = data[offset + 9 : offset + 9 + length]
    hlen = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
    raw = data[len(MAGIC) + 4 : len(MAGIC) + 4 + hlen]
    header = Header("x", None, key.id, key.fingerprint, 0.0, raw, 2)
    plain = key.open(_aad(header, MANIFEST, 0), sealed)
    assert plain is not None
    manifest = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(plain), raw=False)
    edit(manifest)
    packed = zstandard.ZstdCompressor().compress(msgpack.packb(manifest, use_bin_type=True))
    resealed = key.seal(_aad(header, MANIFEST, 0), packed)
    frame = MANIFEST + len(resealed).to_bytes(8, "big") + resealed
    return data[:offset] + frame + TRAILER + offset.to_bytes(8, "big")


async def test_damaged_or_edited_file_backups_are_refused_restoring_nothing(
    tmp_path: Path, made: tuple[Path, BackupKey, bytes]
) -> None:
    file, bkey, data = made
    for offset in (len(MAGIC) + 10, len(data) // 3, len(data) // 2, len(data) - 20):
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        file.write_bytes(bytes(damaged))
        assert isinstance(await refused(tmp_path, file, bkey), BackupCorrupt), offset
    file.write_bytes(data[: len(data) - 100])
    assert "truncated" in str(await refused(tmp_path, file, bkey))
    # a chunk dropped (the second one)
    start = len(MAGIC) + 4 + int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
    second = start + 9 + int.from_bytes(data[start + 1 : start + 9], "big")
    second_len = int.from_bytes(data[second + 1 : second + 9], "big")
    file.write_bytes(data[:second] + data[second + 9 + second_len :])
    assert isinstance(await refused(tmp_path, file, bkey), BackupCorrupt)
    # edited manifests, sealed again with the right key: each still refused
    edits = {
        "a head tag": lambda m: m["heads"]["tag"].__setitem__(3, b"\x00" * 36),
        "two head tags swapped": lambda m: m["heads"]["tag"].reverse(),
        "a head tag dropped": lambda m: m["heads"]["tag"].__setitem__(3, None),
        "a head seq": lambda m: m["heads"]["head"].__setitem__(5, 2),
        "a stream dropped": lambda m: [m["heads"][c].pop(7) for c in m["heads"]],
        "the last chunk dropped": lambda m: m["chunks"].pop(),
        "the size": lambda m: m.__setitem__("file_bytes", m["file_bytes"] + 1),
        "a chunk's tag": lambda m: m["chunks"][1].__setitem__("tag", "00" * 16),
        "a chunk's tag as a number": lambda m: m["chunks"][1].__setitem__("tag", 7),
        "a chunk named by neither": lambda m: m["chunks"][1].pop("tag"),
    }
    for what, edit in edits.items():
        file.write_bytes(reseal_manifest(data, bkey, edit))
        error = await refused(tmp_path, file, bkey)
        assert isinstance(error, BackupCorrupt), (what, error)
    file.write_bytes(data)
    from statekeeper.errors import BackupKeyMismatch

    assert isinstance(await refused(tmp_path, file, BackupKey(os.urandom(32))), BackupKeyMismatch)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        assert (await restore(dst, [file], bkey)).agents == 40  # the intact file restores


async def test_a_deleted_agent_leaves_no_bytes_in_a_file_backup(tmp_path: Path) -> None:
    """The copy holds live rows only (no free pages, no change feed): a deleted
    agent's id (stored in clear) and records are not in the decrypted copy, though its
    pages may still be in the store file's free list and its id in the feed."""
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 20)
        for j in range(40):
            await src.save("acme/erased-customer-4711", {"j": j, "pad": "x" * 500})
        await src.delete("acme/erased-customer-4711")
        await src.save("acme/kept", {"note": "plaintext-marker-9f3a"})
        await backup(src, file, bkey)
    plain = decrypted_copy(file, bkey)
    assert b"t1/a001" in plain  # a live agent's id is there, in clear inside the copy
    # its records stay encrypted by the store's key inside the copy
    assert b"acme/kept" in plain and b"plaintext-marker-9f3a" not in plain
    assert b"erased-customer-4711" not in plain


async def test_a_tenant_admins_backup_holds_only_its_namespace(tmp_path: Path) -> None:
    """A namespaced backup of a SQLite store copies that namespace's rows only (the
    copy is filled by ``INSERT ... SELECT`` over the namespace's id range): no other
    tenant's id or record is in the file, nor in the decrypted copy or manifest."""
    policy = Policy({"acme-admin": {"admin": ["acme/**"]}})
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "acme.skb"
    url = f"sqlite:///{tmp_path / 's.db'}"
    records: dict[str, list[bytes]] = {}
    async with StateStore(url, keyring=keyring()) as src:
        for tenant in ("acme", "acme-corp", "globex"):  # acme-corp: just past the range
            for i in range(5):
                await src.save(f"{tenant}/agent-{i}", {"tenant": tenant, "i": i})
            await src.save(f"{tenant}/sub/deep", {"deep": tenant})
        for tenant in ("acme", "acme-corp", "globex"):
            records[tenant] = []
            for name in [f"{tenant}/agent-{i}" for i in range(5)] + [f"{tenant}/sub/deep"]:
                (rows,) = await src.backend.export_rows([(name, 0, 1)])
                records[tenant] += [e[3] for e in rows.events] + [e[4] for e in rows.events]
    async with StateStore(
        url, keyring=keyring(), namespace="acme", principal="acme-admin", policy=policy
    ) as acme:
        result = await backup(acme, file, bkey)
        assert result.agents == 6
    assert version_of(file)[0] == 2
    reader = FrameReader(file, bkey)
    try:
        assert reader.manifest["namespace"] == "acme"
        manifest = msgpack.packb(reader.manifest, use_bin_type=True)
    finally:
        reader.close()
    decrypted = decrypted_copy(file, bkey) + manifest
    assert sorted(e[0] for e in iter_entries(file, bkey)) == sorted(
        [f"acme/agent-{i}" for i in range(5)] + ["acme/sub/deep"]
    )
    for record in records["acme"]:
        assert record in decrypted
    for other in ("acme-corp", "globex"):
        for record in records[other]:
            assert record not in decrypted
        assert other.encode() not in decrypted and other.encode() not in file.read_bytes()
    # it restores into the tenant's namespace of another store
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        restored = await restore(dst, [file], bkey)
        assert restored.agents == 6
        assert (await dst.load("acme/sub/deep")).data == {"deep": "acme"}


@pytest.mark.parametrize("damage", ["an event missing", "no snapshot at the base"])
async def test_a_damaged_stream_is_refused_before_anything_is_written(
    tmp_path: Path, damage: str
) -> None:
    """A stream compacted by retention is backed up (tests/governance/
    test_backup_compacted.py); one that lacks events otherwise (a gap), or whose base
    has no snapshot, is damaged: refused, naming it, no file written."""
    bkey = BackupKey(os.urandom(32))
    db = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{db}", keyring=keyring(), snapshot_every=2) as src:
        await fill(src, 3, 4)
        await src.backend.prune("t0/a000", 2)
    with sqlite3.connect(db) as conn:
        if damage == "an event missing":
            conn.execute("DELETE FROM sk_events WHERE agent_id = 't1/a001' AND seq = 2")
        else:
            conn.execute("DELETE FROM sk_snapshots WHERE agent_id = 't0/a000' AND seq = 2")
    async with StateStore(f"sqlite:///{db}", keyring=keyring()) as src:
        with pytest.raises(BackupError, match=r"'t[01]/a00[01]'.*damaged"):
            await backup(src, tmp_path / "b.skb", bkey)
    assert sorted(p.name for p in tmp_path.iterdir() if "skb" in p.name) == []  # noqa: ASYNC240


def test_the_heads_are_read_from_the_copy_in_id_order(tmp_path: Path) -> None:
    """:func:`stream_heads` on a file: seq, head checksum, counts, per stream."""
    import asyncio

    async def make() -> None:
        async with StateStore(
            f"sqlite:///{tmp_path / 's.db'}", keyring=keyring(), snapshot_every=2
        ) as src:
            await fill(src, 3, 3)

    asyncio.run(make())
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        heads = sqlite_export.stream_heads(conn)
        expected = conn.execute(
            "SELECT agent_id, seq, checksum FROM sk_events e WHERE seq ="
            " (SELECT head_seq FROM sk_agents a WHERE a.agent_id = e.agent_id) ORDER BY agent_id"
        ).fetchall()
    finally:
        conn.close()
    assert heads == expected
    assert sqlite_export.stream_totals(conn_totals(tmp_path)) == (9, 3, False)
    # a stream without an event at its head (damaged) is still listed, checksum empty
    # (the restore then refuses it): the per-agent statement answers then
    conn = sqlite3.connect(tmp_path / "s.db")
    try:
        conn.execute("DELETE FROM sk_events WHERE agent_id = 't1/a001' AND seq = 3")
        conn.commit()
        damaged = sqlite_export.stream_heads(conn)
        assert damaged == conn.execute(sqlite_export.STREAM_HEADS).fetchall()
    finally:
        conn.close()
    assert damaged == [expected[0], ("t1/a001", 3, b""), expected[2]]


def conn_totals(tmp_path: Path) -> sqlite3.Connection:
    return sqlite3.connect(tmp_path / "s.db")


async def test_writes_committed_during_the_copy_are_not_in_the_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point in time on the table-copy path (a namespace's backup; here the page
    image is declined): while the copy's transaction is open (after the heads are
    copied, before the events), another writer appends, creates and deletes agents and
    commits, and again between the copy and the reading of its heads for the
    manifest; the backup holds the store as it was at the start, and its manifest the
    same heads (a restore checks every stream against them)."""
    import asyncio

    from statekeeper.backends import sqlite as sqlite_module
    from statekeeper.backends.sqlite import copyjoin as sqlite_copyjoin
    from statekeeper.governance.backup import filecopy

    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 12)
        before = {a.agent_id: a.head_seq async for a in src.iter_agents()}
        loop = asyncio.get_running_loop()
        committed: list[str] = []

        def during(table: str) -> None:  # in the copy's thread, inside its transaction
            if table == "sk_agents":
                asyncio.run_coroutine_threadsafe(write_during(src), loop).result()
                committed.append(table)

        original = sqlite_export.copy_file

        def copy_file(source: str, dest: str, prefix: str, timeout: float, **kw: Any) -> None:
            original(source, dest, prefix, timeout, copied=during, **kw)

        heads_of = filecopy._heads_of

        def between(conn: sqlite3.Connection, *args: Any) -> Any:  # the copy committed
            asyncio.run_coroutine_threadsafe(write_before_heads(src), loop).result()
            committed.append("heads")
            return heads_of(conn, *args)

        async def no_image(self: Any, prefix: str = "") -> None:
            return None

        monkeypatch.setattr(sqlite_module.SQLiteBackend, "page_snapshot", no_image)
        # (SQLiteBackend.copy_to_file, through copyjoin.copied)
        monkeypatch.setattr(sqlite_copyjoin, "copy_file", copy_file)
        monkeypatch.setattr(filecopy, "_heads_of", between)
        result = await backup(src, file, bkey)
        assert committed == ["sk_agents", "heads"]
        await check_as_it_began(src, result, file, bkey, before, tmp_path)


async def test_an_instrumented_sqlite_store_takes_the_file_path(tmp_path: Path) -> None:
    """The observability wrapper hands the file copy to its engine (without it, the
    wrapper's default would send an instrumented store down the row path)."""
    from prometheus_client import CollectorRegistry

    from statekeeper.observability import instrument

    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        instrument(src, registry=CollectorRegistry(), tracing=False)
        await fill(src, 5)
        assert (await backup(src, file, bkey)).agents == 5
    assert version_of(file)[0] == 5


async def test_an_engine_without_a_bulk_copy_opens_its_target_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full backup of an engine with neither a file copy nor ``copy_out`` (memory
    here; Redis, S3, tiered alike) goes straight to the row path: its target file is
    opened once, never a ``.partial`` opened and removed first; PostgreSQL (which has
    ``copy_out``) says so."""
    from statekeeper.backends.postgres.backend import PostgresBackend
    from statekeeper.governance.backup.location import Location

    opened: list[str] = []
    original = Location.writing

    def writing(self: Any) -> Any:
        opened.append(self.display)
        return original(self)

    monkeypatch.setattr(Location, "writing", writing)
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore("memory://", keyring=keyring()) as src:
        await fill(src, 4)
        assert not src.backend.copies_out
        assert (await backup(src, file, bkey)).agents == 4
    assert opened == [str(file)]
    assert version_of(file)[0] == 1
    assert PostgresBackend.copies_out
