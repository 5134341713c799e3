"""Backups of stores that follow a retention policy: streams compacted by ``keep_last``
(a base snapshot, the events after it, history before it gone) are backed up in both
layouts (a SQLite store's file copy, rows for every other engine and for
incrementals), restored into memory, SQLite, PostgreSQL, Redis, S3 and tiered as the
same compacted streams, and verified from their base (the idempotency records the
compaction kept with them, also of an append it cut in two: a retry is not stored
again); a tampered base or a missing event after it is refused with nothing restored;
an incremental backup across a compaction restores the stream as the source holds it
after the compaction."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Capability
from statekeeper.backends.memory import MemoryBackend
from statekeeper.codec.keys import Keyring
from statekeeper.errors import BackupCorrupt, BackupError, HistoryCompacted
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.filecopy import opened_copy
from statekeeper.governance.backup.fileformat import FrameReader, FrameWriter
from statekeeper.governance.backup.sealer import seal_file
from statekeeper.governance.backup.writer import pack_entry, stream_digest
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.store.body import event_body
from statekeeper.store.idempotency import stored_key

from ..backends._services import fresh_url

STORE_KEY = bytes(range(32))
#: t0 keeps its last 3 events, t1 everything (a mix of compacted and whole streams)
POLICY = RetentionPolicy.parse("t0 keep_last=3\n")


def keyring() -> Keyring:
    return Keyring({"k1": STORE_KEY})


def folder(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path


async def fill(store: StateStore, agents: int, events: int, start: int = 0) -> None:
    for i in range(agents):
        for j in range(start, start + events):
            key = f"k{j}" if j % 4 == 1 else None
            await store.save(f"t{i % 2}/a{i:02d}", {"i": i, "j": j}, idempotency_key=key)


async def keyed_pair(store: StateStore, agent_id: str, key: str) -> None:
    """Two events appended in ONE append with idempotency ``key`` (an engine-level
    append, as a restore or a tier copy writes one; the store's saves are one event
    each), sealed and chained as the store seals its own."""
    codec, backend = store.codec, store.backend
    head = await backend.head(agent_id)
    (last,) = await backend.read(agent_id, head - 1, head)
    link = codec.open(agent_id, head, last.type, last.timestamp, last.payload, last.checksum).link
    events = []
    for seq in (head + 1, head + 2):
        ops = [{"op": "replace", "path": "/j", "value": f"pair {seq}"}]
        body = codec.serialize(event_body({}, ops, key=key), "event")
        sealed = codec.seal(agent_id, seq, "patch", float(seq), body, link)
        events.append(RawEvent(seq, "patch", float(seq), sealed.payload, sealed.checksum))
        link = sealed.link
    tag = codec.head_tag(agent_id, head + 2, link)
    request = AppendRequest(
        agent_id, head, tuple(events), None, stored_key(codec, agent_id, key), head_tag=tag
    )
    await backend.append(request)


async def cut_in_two(store: StateStore) -> None:
    """t0/cut: 4 saves, one append of 2 events with key ``pair`` (seqs 5, 6), 2 saves:
    keep_last=3 puts its base at 5, inside that append."""
    for j in range(4):
        await store.save("t0/cut", {"i": -1, "j": j})
    await keyed_pair(store, "t0/cut", "pair")
    await store.save("t0/cut", {"i": -1, "j": 7})  # (a fresh read: the pair bypassed the cache)
    await store.save("t0/cut", {"i": -1, "j": 8})


async def first_stored(store: StateStore, agent_id: str) -> int:
    first = await store.backend.read(agent_id, 0, None, limit=1)
    return first[0].seq if first else 0


async def picture(store: StateStore) -> dict[str, tuple[Any, int, int]]:
    """Every agent's state, head and first stored seq (its base + 1)."""
    out = {}
    for info in await store.list_agents(limit=1000):
        record = await store.load(info.agent_id)
        out[info.agent_id] = (record.data, info.head_seq, await first_stored(store, info.agent_id))
    return out


async def compacted_source(url: str, tmp_path: Path) -> StateStore:
    store = StateStore(url, keyring=keyring(), snapshot_every=3)
    await store.__aenter__()
    await fill(store, 6, 8)
    await cut_in_two(store)
    report = await apply_retention(store, POLICY)
    assert {a.agent_id for a in report.actions if a.outcome == "done"} == {
        "t0/a00",
        "t0/a02",
        "t0/a04",
        "t0/cut",
    }
    assert await first_stored(store, "t0/a00") == 6  # base 5: events 1..5 are gone
    assert await first_stored(store, "t0/cut") == 6  # base 5: half of the pair gone
    return store


async def retried(store: StateStore) -> tuple[int, int, int, int]:
    """Retry t0/a00's save with key k1 (seq 2, below its base 5) and t0/cut's append
    with key pair (seqs 5..6, across its base 5): their original seqs, nothing written."""
    heads = [await store.backend.head_tag(a) for a in ("t0/a00", "t0/cut")]
    again = await store.save("t0/a00", {"i": 0, "j": 1}, idempotency_key="k1")
    pair = await store.save("t0/cut", {"i": -1, "j": 5}, idempotency_key="pair")
    assert again.duplicate and pair.duplicate
    assert [await store.backend.head_tag(a) for a in ("t0/a00", "t0/cut")] == heads
    return again.first_seq, again.last_seq, pair.first_seq, pair.last_seq


CASES = [  # (source engine, target engine, the full backup's layout)
    ("sqlite", "postgresql", "sqlite-file"),
    ("sqlite", "memory", "sqlite-file"),
    ("sqlite", "sqlite", "sqlite-file"),
    ("postgresql", "sqlite", "postgres-copy"),
    ("postgresql", "postgresql", "postgres-copy"),
    ("memory", "postgresql", "streams"),
    ("redis", "sqlite", "streams"),
    ("sqlite", "redis", "sqlite-file"),
    ("memory", "redis", "streams"),
    # S3 (no transaction over objects) and tiered (memory -> SQLite -> S3) hold them too,
    # compacted by retention there or restored into them
    pytest.param("s3", "sqlite", "streams", marks=pytest.mark.slow),
    pytest.param("sqlite", "s3", "sqlite-file", marks=pytest.mark.slow),
    pytest.param("tiered", "memory", "streams", marks=pytest.mark.slow),
    pytest.param("memory", "tiered", "streams", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("source", "target", "layout"), CASES)
async def test_a_retained_store_backs_up_and_restores_as_the_same_compacted_streams(
    tmp_path: Path, source: str, target: str, layout: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "full.skb"
    with (
        fresh_url(source, folder(tmp_path, "src")) as src_url,
        fresh_url(target, folder(tmp_path, "dst")) as dst_url,
    ):
        src = await compacted_source(src_url, tmp_path)
        try:
            made = await backup(src, file, bkey)
            expected = await picture(src)
            kept = await retried(src)
        finally:
            await src.__aexit__(None, None, None)
        assert made.agents == 7
        reader = FrameReader(file, bkey)
        try:
            assert reader.header.layout == layout
            streams = reader.streams
        finally:
            reader.close()
        assert {a: s.get("compacted", 0) for a, s in streams.items()} == {
            "t0/a00": 5, "t0/a02": 5, "t0/a04": 5, "t1/a01": 0, "t1/a03": 0, "t1/a05": 0,
            "t0/cut": 5,
        }  # fmt: skip
        assert all(len(s["base_digest"]) == 64 for s in streams.values() if s.get("compacted"))
        async with StateStore(dst_url, keyring=keyring()) as dst:
            result = await restore(dst, [file], bkey)
            assert result.agents == 7
            assert await picture(dst) == expected  # same states, heads and bases
            assert (await dst.verify()).ok
            # the records of a keyed save the compaction removed, and of a keyed append
            # it cut in two, are restored with it
            assert await retried(dst) == kept == (2, 2, 5, 6)
            assert await picture(dst) == expected
            with pytest.raises(HistoryCompacted):
                await dst.load("t0/a00", at_seq=3)
            assert (await dst.load("t0/a00", at_seq=6)).data == {"i": 0, "j": 5}
            assert (await dst.load("t1/a01", at_seq=1)).data == {"i": 1, "j": 0}
            # the restored stream takes writes and verifies after them
            await dst.save("t0/a00", {"after": "restore"})
            assert (await dst.verify()).ok


async def rewrite_rows(file: Path, out: Path, key: BackupKey, edit: Callable[..., None]) -> None:
    """A row-layout backup written again WITH the backup key (what only a holder of the
    key could do) after ``edit(entry, stream)`` changed one agent's entry and manifest
    record; every digest re-made, so only the edit itself can be caught."""
    reader = FrameReader(file, key)
    try:
        manifest = dict(reader.manifest)
        chunks = [list(chunk) for chunk in reader.chunks()]
        header = reader.header
    finally:
        reader.close()
    manifest.pop("chunks")
    with out.open("wb") as fh:
        writer = FrameWriter(fh, header, key)
        for chunk in chunks:
            packed = []
            for entry in chunk:
                stream = manifest["streams"][entry[0]]
                edit(entry, stream)
                stream["events"] = len(entry[4])
                stream["digest"] = stream_digest(pack_entry(entry))
                packed.append(pack_entry(entry))
            writer.chunk_packed(packed)
        writer.finish(manifest)


def only(agent_id: str, change: Callable[[list[Any], dict[str, Any]], None]) -> Any:
    def edit(entry: list[Any], stream: dict[str, Any]) -> None:
        if entry[0] == agent_id:
            change(entry, stream)

    return edit


def _tamper_base(entry: list[Any], stream: dict[str, Any]) -> None:
    import hashlib

    seq, ts, payload, checksum = entry[7]
    entry[7] = [seq, ts, payload[:-1] + bytes([payload[-1] ^ 1]), checksum]
    stream["base_digest"] = hashlib.sha256(checksum).hexdigest()


def _drop_event(entry: list[Any], stream: dict[str, Any]) -> None:
    del entry[4][1]  # the second event after the base


def _other_base_digest(entry: list[Any], stream: dict[str, Any]) -> None:
    stream["base_digest"] = "0" * 64


def _drop_base(entry: list[Any], stream: dict[str, Any]) -> None:
    del entry[7]


def _key_past_head(entry: list[Any], stream: dict[str, Any]) -> None:
    entry[6].append(["late", 9, 9])  # (its head is 8)


TAMPERS = {
    "idempotency record past the head": (_key_past_head, "idempotency record from seq 9 to 9"),
    "base snapshot edited": (_tamper_base, "base snapshot does not verify"),
    "event after the base missing": (_drop_event, "gap"),
    "manifest's base digest": (_other_base_digest, "differs from the manifest"),
    "base snapshot left out": (_drop_base, "base snapshot .compacted stream. is missing"),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
async def test_a_tampered_row_backup_of_a_compacted_stream_restores_nothing(
    tmp_path: Path, tamper: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    file, bad = tmp_path / "b.skb", tmp_path / "bad.skb"
    src = await compacted_source("memory://", tmp_path)
    try:
        await backup(src, file, bkey)
    finally:
        await src.__aexit__(None, None, None)
    change, reason = TAMPERS[tamper]
    await rewrite_rows(file, bad, bkey, only("t0/a02", change))
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [file], bkey)  # the untouched backup restores
    async with StateStore(f"sqlite:///{tmp_path / 'r2.db'}", keyring=keyring()) as dst:
        with pytest.raises(BackupCorrupt, match=reason) as caught:
            await restore(dst, [bad], bkey)
        assert "t0/a02" in str(caught.value)
        assert await dst.count_agents() == 0  # nothing restored


async def rewrite_file_copy(
    file: Path, out: Path, key: BackupKey, sql: str, args: tuple[Any, ...]
) -> None:
    """A file-copy backup whose store copy was changed by ``sql`` and sealed again WITH
    the backup key (chunk digests and size re-made, the heads kept)."""
    reader = FrameReader(file, key)
    try:
        manifest = dict(reader.manifest)
        header = reader.header
        with opened_copy(reader) as copy:
            with contextlib.closing(sqlite3.connect(copy)) as conn:
                conn.execute(sql, args)
                conn.commit()
            manifest.pop("chunks")
            with out.open("wb") as fh:
                writer = FrameWriter(fh, header, key)
                manifest["file_bytes"] = seal_file(writer, copy, 1 << 16, threads=1)
                writer.finish(manifest)
    finally:
        reader.close()


FILE_TAMPERS = {
    "base snapshot edited": (
        "UPDATE sk_snapshots SET payload = CAST(payload AS BLOB) || x'00'"
        " WHERE agent_id = ? AND seq = 5",
        "base snapshot does not verify",
    ),
    "event after the base missing": (
        "DELETE FROM sk_events WHERE agent_id = ? AND seq = 7",
        "differs from the manifest",
    ),
    "base snapshot removed": (
        "DELETE FROM sk_snapshots WHERE agent_id = ? AND seq = 5",
        "base snapshot .compacted. is missing",
    ),
    "base snapshot from another seq": (
        "UPDATE sk_snapshots SET checksum = (SELECT checksum FROM sk_snapshots s"
        " WHERE s.agent_id = sk_snapshots.agent_id AND s.seq = 6) WHERE agent_id = ? AND seq = 5",
        "differs from the manifest",
    ),
}


@pytest.mark.parametrize("tamper", sorted(FILE_TAMPERS))
async def test_a_tampered_file_backup_of_a_compacted_stream_restores_nothing(
    tmp_path: Path, tamper: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    file, bad = tmp_path / "b.skb", tmp_path / "bad.skb"
    src = await compacted_source(f"sqlite:///{tmp_path / 's.db'}", tmp_path)
    try:
        await backup(src, file, bkey)
    finally:
        await src.__aexit__(None, None, None)
    sql, reason = FILE_TAMPERS[tamper]
    await rewrite_file_copy(file, bad, bkey, sql, ("t0/a02",))
    async with StateStore(f"sqlite:///{tmp_path / 'r2.db'}", keyring=keyring()) as dst:
        with pytest.raises(BackupCorrupt, match=reason) as caught:
            await restore(dst, [bad], bkey)
        assert "t0/a02" in str(caught.value)
        assert await dst.count_agents() == 0  # nothing restored


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("sqlite", "postgresql"),
        ("memory", "sqlite"),
        ("sqlite", "memory"),
        ("redis", "memory"),
        ("sqlite", "redis"),
    ],
)
@pytest.mark.parametrize("moved", ["past the parent's head", "below the parent's head"])
async def test_an_incremental_across_a_compaction_restores_the_compacted_stream(
    tmp_path: Path, source: str, target: str, moved: str
) -> None:
    """Full backup, then writes and a compaction (its base past the full backup's
    head, or below it), then an incremental: the chain restores every stream as the
    source holds it after the compaction — history before the new base gone."""
    bkey = BackupKey(os.urandom(32))
    full, inc, inc2 = tmp_path / "full.skb", tmp_path / "inc.skb", tmp_path / "inc2.skb"
    with (
        fresh_url(source, folder(tmp_path, "src")) as src_url,
        fresh_url(target, folder(tmp_path, "dst")) as dst_url,
    ):
        async with StateStore(src_url, keyring=keyring(), snapshot_every=3) as src:
            await fill(src, 4, 4)  # heads 4
            await backup(src, full, bkey)
            await fill(src, 4, 8 if moved == "past the parent's head" else 2, start=4)
            await apply_retention(src, POLICY)  # t0: keep 3 of 12 (base 9) or of 6 (base 3)
            base = 9 if moved == "past the parent's head" else 3
            assert await first_stored(src, "t0/a00") == base + 1
            made = await backup(src, inc, bkey, since=full)
            await fill(src, 4, 1, start=20)  # and one more incremental on top
            await backup(src, inc2, bkey, since=inc)
            expected = await picture(src)
        async with StateStore(dst_url, keyring=keyring()) as dst:
            result = await restore(dst, [full, inc, inc2], bkey)
            assert result.agents == 4
            assert await picture(dst) == expected  # the bases too: history gone, as there
            assert (await dst.verify()).ok
            with pytest.raises(HistoryCompacted):
                await dst.load("t0/a00", at_seq=base - 1)
        assert made.copied == 4
        reader = FrameReader(inc, bkey)
        try:
            assert reader.streams["t0/a00"]["compacted"] == base
            assert reader.streams["t0/a00"]["base"] == 0  # copied whole from its base
            if source == "sqlite":  # the pages changed since (format 4): every head listed
                assert reader.header.layout == "sqlite-page-delta"
            else:
                assert reader.streams["t1/a01"]["base"] == 4  # the events after the parent's
        finally:
            reader.close()


@pytest.mark.parametrize(
    ("source", "layout"),
    [("sqlite", "sqlite-file"), ("postgresql", "postgres-copy"), ("memory", "streams")],
)
async def test_an_incremental_after_a_compacted_full_backup_goes_on_from_its_head(
    tmp_path: Path, source: str, layout: str
) -> None:
    """The full backup holds compacted streams; writes since, no new compaction: the
    incremental copies only the new events of each (the base carried over in its
    manifest) and the chain restores the compacted streams with them."""
    bkey = BackupKey(os.urandom(32))
    full, inc = tmp_path / "full.skb", tmp_path / "inc.skb"
    with fresh_url(source, folder(tmp_path, "src")) as url:
        src = await compacted_source(url, tmp_path)
        try:
            await backup(src, full, bkey)
            await fill(src, 6, 1, start=30)
            made = await backup(src, inc, bkey, since=full)
            expected = await picture(src)
        finally:
            await src.__aexit__(None, None, None)
    assert (made.copied, made.events) == (6, 6)  # one new event each
    reader = FrameReader(full, bkey)
    try:
        assert reader.header.layout == layout
    finally:
        reader.close()
    reader = FrameReader(inc, bkey)
    try:
        stream = reader.streams["t0/a00"]
        # the row path lists the part it copied; an incremental by pages (format 4,
        # after a page backup) lists every stream whole, its compaction base kept
        base = 0 if reader.header.layout == "sqlite-page-delta" else 8
        assert (stream["base"], stream["compacted"]) == (base, 5)
    finally:
        reader.close()
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await restore(dst, [full, inc], bkey)
        assert await picture(dst) == expected
        assert (await dst.verify()).ok


class _NoBase(MemoryBackend):
    """An engine that cannot hold a compacted stream (every engine of this library
    can now: the check stays for a third party's)."""

    capabilities = MemoryBackend.capabilities - {Capability.BASE_IMPORT}


async def test_a_target_engine_that_cannot_hold_a_compacted_stream_refuses_first(
    tmp_path: Path,
) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    src = await compacted_source("memory://", tmp_path)
    try:
        await backup(src, file, bkey)
    finally:
        await src.__aexit__(None, None, None)
    async with StateStore(_NoBase(), keyring=keyring()) as dst:
        with pytest.raises(BackupError, match=r"'t0/a00' \(and 3 more\).*compacted") as e:
            await restore(dst, [file], bkey)
        assert "nothing was restored" in str(e.value)
        assert await dst.count_agents() == 0
