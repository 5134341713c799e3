"""Backups of a PostgreSQL store by the server's ``COPY ... TO STDOUT (FORMAT binary)``
(format version 3): no row becomes a Python object at backup time, every section
reads one ``REPEATABLE READ`` snapshot while writers commit, the copy restores into
any engine, holds only the rows the role may read and the namespace asked for, and a
damaged, truncated or edited one is refused with nothing restored."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from statekeeper import StateStore
from statekeeper.backends.base import Backend
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.codec.keys import Keyring
from statekeeper.errors import BackupCorrupt, BackupError
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.filecopy import opened_copy
from statekeeper.governance.backup.fileformat import MAGIC, FrameReader
from statekeeper.governance.backup.sealer import ChunkSealer
from statekeeper.governance.policy_postgres import (
    enforce_in_postgres,
    stop_enforcing_in_postgres,
)

from ..backends._services import POSTGRES_DSN, drop_schema, fresh_url, namespace, require_postgres
from .test_backup_file import reseal_manifest, version_of
from .test_postgres_row_security import _as, _pg
from .test_postgres_row_security_tenants import POLICY

STORE_KEY = bytes(range(32))


def keyring() -> Keyring:
    return Keyring({"k1": STORE_KEY})


async def fill(store: StateStore, agents: int, events: int = 3) -> None:
    for i in range(agents):
        for j in range(events):
            key = f"k{j}" if j == 1 else None
            await store.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": j}, idempotency_key=key)


def sections_and_manifest(file: Path, key: BackupKey) -> tuple[bytes, bytes]:
    """A version-3 backup's decrypted ``COPY`` sections, and its manifest packed."""
    reader = FrameReader(file, key)
    try:
        assert reader.header.layout == "postgres-copy"
        with opened_copy(reader, store_file=False) as copy:
            return Path(copy).read_bytes(), msgpack.packb(reader.manifest, use_bin_type=True)
    finally:
        reader.close()


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("postgresql", tmp_path) as url:
        yield url


async def test_a_whole_postgres_store_is_backed_up_without_reading_a_row(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seam: every way the backup could read rows (the backend's export and read
    methods, the codec) counts its calls; a copy backup makes none, and restores
    everything into SQLite and memory."""
    calls: list[str] = []

    def counting(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return await original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(pg_url, keyring=keyring(), snapshot_every=2) as src:
        await fill(src, 30)
        for name in (
            "export_rows",
            "export_streams",
            "read",
            "list_agents",
            "latest_snapshot",
            "head",
            "head_tag",
            "idempotency_keys",
        ):
            counting(PostgresBackend, name)
            counting(Backend, name)
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
    assert version_of(file) == (3, version_of(file)[1])
    assert version_of(file)[1]["layout"] == "postgres-copy"
    for target in (f"sqlite:///{tmp_path / 'r.db'}", "memory://"):
        async with StateStore(target, keyring=keyring()) as dst:
            restored = await restore(dst, [file], bkey)
            assert (restored.agents, restored.events, restored.snapshots) == (30, 90, 30)
            assert (await dst.verify()).ok
            assert (await dst.load("t1/a004")).data == {"i": 4, "j": 2}
            assert (await dst.load("t1/a004", at_seq=2)).data == {"i": 4, "j": 1}
            replay = await dst.save("t1/a004", {"i": 4, "j": 1}, idempotency_key="k1")
            assert replay.duplicate


async def test_writes_committed_during_the_copy_are_not_in_the_backup(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the server streams the first section, another process's store commits
    a new event to one agent and creates another: the backup is the point in time
    before (every section, the heads and the totals read the same snapshot)."""
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    committed = 0

    async def write_elsewhere() -> None:
        async with StateStore(pg_url, keyring=keyring()) as other:
            await other.save("t0/a000", {"after": "cut"})
            await other.save("t9/new", {"after": "cut"})

    feed = ChunkSealer.feed

    def feed_and_write(self: ChunkSealer, data: bytes) -> None:
        nonlocal committed
        if not committed:
            committed = 1  # a store on its own loop, in its own thread: it commits
            thread = threading.Thread(target=lambda: asyncio.run(write_elsewhere()))
            thread.start()
            thread.join()
        feed(self, data)

    async with StateStore(pg_url, keyring=keyring()) as src:
        await fill(src, 12)
        monkeypatch.setattr(ChunkSealer, "feed", feed_and_write)
        result = await backup(src, file, bkey, chunk_bytes=1024)
        monkeypatch.undo()
        assert committed == 1
        assert await src.head("t0/a000") == 4 and await src.head("t9/new") == 1
    assert (result.agents, result.events) == (12, 36)
    async with StateStore("memory://", keyring=keyring()) as dst:
        await restore(dst, [file], bkey)
        assert await dst.head("t0/a000") == 3
        assert (await dst.load("t0/a000")).data == {"i": 0, "j": 2}
        assert await dst.head("t9/new") == 0
        assert (await dst.verify()).ok


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    require_postgres()
    schema = namespace(tmp_path, "sk_pgc_")
    suffix = uuid.uuid4().hex[:8]
    a_role, b_role = f"sk_pgc_a_{suffix}", f"sk_pgc_b_{suffix}"
    _pg(f'CREATE ROLE "{a_role}" LOGIN', f'CREATE ROLE "{b_role}" LOGIN')
    try:
        yield schema, a_role, b_role
    finally:
        drop_schema(schema)
        _pg(
            f'DROP OWNED BY "{a_role}", "{b_role}"',
            f'DROP ROLE "{a_role}"',
            f'DROP ROLE "{b_role}"',
        )


async def test_a_copy_holds_only_the_rows_of_its_role_and_namespace(
    tmp_path: Path, secured: tuple[str, str, str]
) -> None:
    """Under row-level security a role's copy of the WHOLE store (a process with no
    policy of its own: the database alone enforces) holds no byte of the other
    tenant's ids; the owner's copy of one namespace holds only that namespace."""
    schema, a_role, b_role = secured
    owner_url = f"{POSTGRES_DSN}?schema={schema}"
    async with StateStore(owner_url, keyring=keyring()) as owner:
        for agent_id in ["tenant-a/t1", "tenant-a/eu/t2", "tenant-b/u1", "tenant-bz/x"]:
            for n in range(3):
                await owner.save(agent_id, {"n": n}, idempotency_key=f"{agent_id}#{n}")
        key = BackupKey(os.urandom(32))
        async with StateStore(owner_url, keyring=keyring(), namespace="tenant-b") as ns:
            assert (await backup(ns, tmp_path / "ns.skb", key)).agents == 1
    sections, manifest = sections_and_manifest(tmp_path / "ns.skb", key)
    assert b"tenant-b/u1" in sections and b"tenant-b/u1" in manifest
    for other in (b"tenant-a", b"tenant-bz"):
        assert other not in sections and other not in manifest
    await enforce_in_postgres(
        POSTGRES_DSN, schema, POLICY, roles={"a-admin": a_role, "b-admin": b_role}
    )
    try:
        async with StateStore(f"{_as(b_role)}?schema={schema}", keyring=keyring()) as b:
            assert (await backup(b, tmp_path / "b.skb", key)).agents == 1
        sections, manifest = sections_and_manifest(tmp_path / "b.skb", key)
        assert b"tenant-a" not in sections and b"tenant-a" not in manifest
        async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
            assert (await restore(dst, [tmp_path / "b.skb"], key)).agents == 1
            assert (await dst.load("tenant-b/u1")).data == {"n": 2}
            assert (await dst.verify()).ok
    finally:
        await stop_enforcing_in_postgres(POSTGRES_DSN, schema, [a_role, b_role])


async def refused(tmp_path: Path, file: Path, key: BackupKey) -> BaseException:
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        with pytest.raises(BackupError) as caught:
            await restore(dst, [file], key)
        assert await dst.count_agents() == 0  # nothing restored
    return caught.value


async def test_damaged_or_edited_copy_backups_are_refused_restoring_nothing(
    tmp_path: Path, pg_url: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(pg_url, keyring=keyring(), snapshot_every=2) as src:
        await fill(src, 40)
        await backup(src, file, bkey, chunk_bytes=2048)
    data = file.read_bytes()
    assert version_of(file)[0] == 3
    for offset in (len(MAGIC) + 10, len(data) // 3, len(data) // 2, len(data) - 20):
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        file.write_bytes(bytes(damaged))
        assert isinstance(await refused(tmp_path, file, bkey), BackupCorrupt), offset
    file.write_bytes(data[: len(data) - 100])
    assert "truncated" in str(await refused(tmp_path, file, bkey))
    start = len(MAGIC) + 4 + int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
    second = start + 9 + int.from_bytes(data[start + 1 : start + 9], "big")
    second_len = int.from_bytes(data[second + 1 : second + 9], "big")
    file.write_bytes(data[:second] + data[second + 9 + second_len :])  # a chunk dropped
    assert isinstance(await refused(tmp_path, file, bkey), BackupCorrupt)
    # edited manifests, sealed again with the right key: each still refused
    edits = {
        "a head checksum": lambda m: m["heads"]["checksum"].__setitem__(3, b"\x00" * 32),
        "a head seq": lambda m: m["heads"]["head"].__setitem__(5, 2),
        "a stream dropped": lambda m: [m["heads"][c].pop(7) for c in m["heads"]],
        "the last chunk dropped": lambda m: m["chunks"].pop(),
        "a chunk's tag": lambda m: m["chunks"][1].__setitem__("tag", "00" * 16),
        "the size": lambda m: m.__setitem__("file_bytes", m["file_bytes"] + 1),
        "a section's size": lambda m: (
            m["sections"][1].__setitem__(1, m["sections"][1][1] - 2),
            m["sections"][2].__setitem__(1, m["sections"][2][1] + 2),
        ),
        "sections swapped": lambda m: m["sections"].reverse(),
        "no sections": lambda m: m.pop("sections"),
    }
    for what, edit in edits.items():
        file.write_bytes(reseal_manifest(data, bkey, edit))
        error = await refused(tmp_path, file, bkey)
        assert isinstance(error, BackupCorrupt), (what, error)
    file.write_bytes(data)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        assert (await restore(dst, [file], bkey)).agents == 40  # the intact file restores


async def test_a_hash_partitioned_store_is_copied_in_id_order(tmp_path: Path) -> None:
    """Partitioned by agent id (``partitions=4``): each section still comes in id
    order across the partitions (the restore merges the sections by id)."""
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    with fresh_url("postgresql", tmp_path) as url:
        async with StateStore(f"{url}&partitions=4", keyring=keyring(), snapshot_every=2) as src:
            await fill(src, 24)
            assert (await src.backend.health()).detail["partitions"] == 4
            result = await backup(src, file, bkey, chunk_bytes=1024)
    assert version_of(file)[1]["layout"] == "postgres-copy"
    assert (result.agents, result.events) == (24, 72)
    async with StateStore("memory://", keyring=keyring()) as dst:
        assert (await restore(dst, [file], bkey)).agents == 24
        assert (await dst.verify()).ok
        for i in range(24):
            assert (await dst.load(f"t{i % 3}/a{i:03d}")).data == {"i": i, "j": 2}


async def test_a_copy_cut_off_by_the_server_is_a_typed_error_leaving_no_file(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends the backup's connection while the events stream out: a
    :class:`~statekeeper.errors.BackendError` naming the copy, and no file (nor a
    partial one) left behind."""
    import psycopg

    from statekeeper.errors import BackendError

    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    cut = 0
    async with StateStore(pg_url, keyring=keyring()) as src:
        await fill(src, 30)
        schema = src.backend.schema  # type: ignore[attr-defined]
        feed = ChunkSealer.feed

        def feed_and_cut(self: ChunkSealer, data: bytes) -> None:
            nonlocal cut
            if not cut:
                with psycopg.connect(POSTGRES_DSN, autocommit=True) as admin:
                    cut = admin.execute(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE query LIKE %s AND pid <> pg_backend_pid()",
                        (f"COPY (SELECT %{schema}%",),
                    ).fetchone()[0]  # type: ignore[index]
            feed(self, data)

        monkeypatch.setattr(ChunkSealer, "feed", feed_and_cut)
        with pytest.raises(BackendError, match="backup copy"):
            await backup(src, file, bkey, chunk_bytes=1024)
        monkeypatch.undo()
        assert cut == 1
        assert [n for n in os.listdir(tmp_path) if "skb" in n] == []
        assert (await backup(src, file, bkey)).agents == 30  # the store is unharmed


async def test_an_instrumented_postgres_store_takes_the_copy(tmp_path: Path, pg_url: str) -> None:
    """The observability wrapper says its engine has a bulk copy (``copies_out``):
    an instrumented PostgreSQL store's full backup is still its ``COPY`` (version 3),
    not the row path."""
    from prometheus_client import CollectorRegistry

    from statekeeper.observability import instrument

    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(pg_url, keyring=keyring()) as src:
        instrument(src, registry=CollectorRegistry(), tracing=False)
        assert src.backend is not None and src.backend.copies_out
        await fill(src, 5)
        assert (await backup(src, file, bkey)).agents == 5
    assert version_of(file)[0] == 3
