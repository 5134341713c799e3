"""Backups: a live store's point-in-time copy, restored into any engine, verified;
damaged, truncated, edited backups and wrong keys refused with nothing restored."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import MemoryKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.errors import (
    AgentForgotten,
    AgentNotFound,
    BackupCorrupt,
    BackupError,
    BackupKeyMismatch,
)
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.governance.backup.fileformat import MAGIC
from statekeeper.governance.shredding import forget

from ..backends._services import fresh_url

PAIRS = [
    ("sqlite", "postgresql"),
    ("postgresql", "sqlite"),
    ("redis", "sqlite"),
    ("memory", "redis"),
]
STORE_KEY = bytes(range(32))


def keyring(vault: MemoryKeyVault | None = None) -> Keyring:
    return Keyring({"k1": STORE_KEY}, data_keys=vault)


async def fill(store: StateStore, agents: int, events: int) -> None:
    for i in range(agents):
        for j in range(events):
            key = f"k{j}" if j == 1 else None
            await store.save(f"t{i % 3}/a{i:03d}", {"i": i, "j": j}, idempotency_key=key)


def folder(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


@pytest.mark.parametrize(("source", "target"), PAIRS)
async def test_backup_of_a_live_store_restores_into_another_engine(
    tmp_path: Path, source: str, target: str
) -> None:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "full.skb"
    with (
        fresh_url(source, folder(tmp_path, "src")) as src_url,
        fresh_url(target, folder(tmp_path, "dst")) as dst_url,
    ):
        async with StateStore(src_url, keyring=keyring(), snapshot_every=3) as src:
            await fill(src, 30, 4)
            stop = asyncio.Event()
            running = asyncio.Event()
            written = 0

            async def writer() -> None:  # keeps writing while the backup runs
                nonlocal written
                while not stop.is_set():
                    written += 1
                    if written == 5:
                        running.set()
                    n = written % 30
                    await src.save(f"t{n % 3}/a{n:03d}", {"live": written})
                    await asyncio.sleep(0)

            task = asyncio.create_task(writer())
            await running.wait()  # the writer is running before the backup starts
            try:
                result = await backup(src, file, bkey, chunk_bytes=2048)
            finally:
                stop.set()
                await task
            assert result.agents == 30 and result.copied == 30
            assert result.bytes_written == file.stat().st_size
            async with StateStore(dst_url, keyring=keyring()) as dst:
                restored = await restore(dst, [file], bkey)
                assert restored.agents == 30 and restored.events == result.events
                assert (await dst.verify()).ok
                for info in await dst.list_agents(limit=100):
                    state = await dst.load(info.agent_id)
                    at_cut = await src.load(info.agent_id, at_seq=info.head_seq)
                    assert state.data == at_cut.data
                    assert await src.head(info.agent_id) >= info.head_seq
                # idempotency keys travel with the stream
                replay = await dst.save("t1/a001", {"i": 1, "j": 1}, idempotency_key="k1")
                assert replay.duplicate


async def test_incremental_backups_restore_as_a_chain(tmp_path: Path) -> None:
    bkey = BackupKey(os.urandom(32))
    full, inc1, inc2 = (tmp_path / f"{n}.skb" for n in ("full", "inc1", "inc2"))
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 10, 3)
        await backup(src, full, bkey)
        await src.save("t0/a000", {"changed": 1})
        await src.delete("t1/a001")
        await src.save("new", {"n": 1})
        first = await backup(src, inc1, bkey, since=full)
        assert first.copied == 2 and first.deleted == 1 and first.events == 2
        await src.delete("t0/a000")
        await src.save("t0/a000", {"reborn": True})  # re-created: copied whole
        second = await backup(src, inc2, bkey, since=inc1)
        assert second.copied == 1
        async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
            await restore(dst, [full, inc1, inc2], bkey)
            assert (await dst.verify()).ok
            assert (await dst.load("t0/a000")).data == {"reborn": True}
            assert (await dst.load("new")).data == {"n": 1}
            with pytest.raises(AgentNotFound):
                await dst.load("t1/a001")
            assert await dst.count_agents() == 10
        async with StateStore(f"sqlite:///{tmp_path / 'x.db'}", keyring=keyring()) as dst:
            with pytest.raises(BackupError, match="incremental"):
                await restore(dst, [inc1], bkey)
            with pytest.raises(BackupError, match="does not follow"):
                await restore(dst, [full, inc2], bkey)
            assert await dst.count_agents() == 0


@pytest.fixture
async def made(tmp_path: Path) -> tuple[Path, BackupKey, bytes]:
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring()) as src:
        await fill(src, 40, 3)
        await backup(src, file, bkey, chunk_bytes=4096)
    return file, bkey, file.read_bytes()


async def refused(tmp_path: Path, files: list[Path], key: BackupKey) -> BaseException:
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        with pytest.raises(BackupError) as caught:
            await restore(dst, files, key)
        assert await dst.count_agents() == 0  # nothing restored
    return caught.value


async def test_a_flipped_byte_anywhere_is_refused(
    tmp_path: Path, made: tuple[Path, BackupKey, bytes]
) -> None:
    file, bkey, data = made
    for offset in (len(MAGIC) + 10, len(data) // 3, len(data) // 2, len(data) - 20):
        damaged = bytearray(data)
        damaged[offset] ^= 0x01
        file.write_bytes(bytes(damaged))
        error = await refused(tmp_path, [file], bkey)
        assert isinstance(error, BackupCorrupt), (offset, error)


async def test_truncated_missing_chunk_and_wrong_key_are_refused(
    tmp_path: Path, made: tuple[Path, BackupKey, bytes]
) -> None:
    file, bkey, data = made
    file.write_bytes(data[: len(data) - 100])
    assert "truncated" in str(await refused(tmp_path, [file], bkey))
    # drop the second chunk: frames are kind (1) + length (8) + sealed bytes
    start = len(MAGIC) + 4 + int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
    first_len = int.from_bytes(data[start + 1 : start + 9], "big")
    second = start + 9 + first_len
    second_len = int.from_bytes(data[second + 1 : second + 9], "big")
    assert data[second : second + 1] == b"C"
    file.write_bytes(data[:second] + data[second + 9 + second_len :])
    error = await refused(tmp_path, [file], bkey)
    assert isinstance(error, BackupCorrupt)
    file.write_bytes(data)
    error = await refused(tmp_path, [file], BackupKey(os.urandom(32)))
    assert isinstance(error, BackupKeyMismatch)


async def test_the_store_key_cannot_be_the_backup_key(tmp_path: Path) -> None:
    async with StateStore("memory://", keyring=keyring()) as src:
        await src.save("a", {"v": 1})
        with pytest.raises(BackupKeyMismatch, match="store's key"):
            await backup(src, tmp_path / "b.skb", BackupKey(STORE_KEY))
    assert not (tmp_path / "b.skb").exists()


async def test_restore_refuses_a_target_that_holds_the_agents(
    tmp_path: Path, made: tuple[Path, BackupKey, bytes]
) -> None:
    file, bkey, _ = made
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        await dst.save("t0/a000", {"mine": True})
        with pytest.raises(BackupError, match="already holds") as refused:
            await restore(dst, [file], bkey)
        # the way to keep them and restore the others is named
        assert "--skip-existing" in str(refused.value)
        assert "skip_existing=True" in str(refused.value)
        assert await dst.count_agents() == 1
        result = await restore(dst, [file], bkey, skip_existing=True)
        assert result.agents == 39 and result.skipped == 1
        assert (await dst.load("t0/a000")).data == {"mine": True}


async def test_a_backup_taken_before_forget_cannot_recover_the_agent(tmp_path: Path) -> None:
    vault = MemoryKeyVault()
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "before.skb"
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring(vault)) as src:
        await src.save("acme/alice", {"ssn": "078-05-1120"})
        await src.save("acme/bob", {"n": 1})
        await backup(src, file, bkey)
        await forget(src, "acme/alice", purge=True)
    assert b"078-05-1120" not in file.read_bytes()
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring(vault)) as dst:
        result = await restore(dst, [file], bkey)
        assert result.forgotten == ["acme/alice"] and result.agents == 1
        with pytest.raises(AgentNotFound):
            await dst.load("acme/alice")
        assert (await dst.load("acme/bob")).data == {"n": 1}
    # even the raw records of the backup, put back by hand, do not open
    from statekeeper.governance.backup.restore import iter_entries

    alice = next(e for e in iter_entries(file, bkey) if e[0] == "acme/alice")
    seq, kind, ts, payload, checksum = alice[4][0]
    async with StateStore("memory://", keyring=keyring(vault)) as other:
        with pytest.raises(AgentForgotten):
            other.codec.open("acme/alice", seq, kind, ts, payload, checksum)


@pytest.mark.slow
async def test_backup_to_s3_and_restore_from_it(tmp_path: Path) -> None:
    from ..backends._services import moto_endpoint

    endpoint = moto_endpoint()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    import boto3  # type: ignore[import-untyped]

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
        Bucket="backups"
    )
    url = f"s3://backups/store/full.skb?endpoint_url={endpoint}&region=us-east-1"
    bkey = BackupKey(os.urandom(32))
    async with StateStore("memory://", keyring=keyring()) as src:
        await fill(src, 5, 2)
        await backup(src, url, bkey)
    async with StateStore(f"sqlite:///{tmp_path / 'r.db'}", keyring=keyring()) as dst:
        assert (await restore(dst, [url], bkey)).agents == 5
        assert (await dst.verify()).ok


async def test_a_backup_holds_no_key_material_of_the_vault(tmp_path: Path) -> None:
    """The vault is outside the store and a backup never copies it: neither the data
    keys (wrapped or not) nor the master key are in the file, even decrypted."""
    import msgpack  # type: ignore[import-untyped]

    from statekeeper.codec.datakeys import SqliteKeyVault
    from statekeeper.governance.backup.fileformat import FrameReader
    from statekeeper.governance.backup.restore import iter_entries
    from statekeeper.governance.backup.writer import pack_entry

    vault_file = tmp_path / "keys.vault.db"
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    ring = Keyring({"k1": STORE_KEY}, data_keys=vault_file)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=ring) as src:
        for name in ("acme/alice", "acme/bob"):
            await src.save(name, {"n": 1})
        await backup(src, file, bkey)
    if ring.data_keys is not None:
        ring.data_keys.close()
    vault = SqliteKeyVault(vault_file)
    secrets: list[bytes] = [STORE_KEY]
    master = Keyring({"k1": STORE_KEY}).get("k1")
    assert master is not None
    for name in ("acme/alice", "acme/bob"):
        [entry] = vault.entries(name)  # (the store's key family's)
        assert entry.wrapped is not None
        secrets += [entry.wrapped, master.unwrap(name, entry.wrapped, entry.family)]
    vault.close()
    reader = FrameReader(file, bkey)
    try:
        manifest = msgpack.packb(reader.manifest, use_bin_type=True)
    finally:
        reader.close()
    decrypted = b"".join(pack_entry(e) for e in iter_entries(file, bkey)) + manifest
    if reader.header.version in (2, 5):  # a SQLite store's file copy: the copy itself too
        from statekeeper.governance.backup.filecopy import opened_copy

        reader = FrameReader(file, bkey)
        try:
            with opened_copy(reader) as copy:
                decrypted += Path(copy).read_bytes()  # noqa: ASYNC240
        finally:
            reader.close()
    assert len(decrypted) > 0
    for secret in secrets:
        assert secret not in file.read_bytes()
        assert secret not in decrypted
    assert str(vault_file).encode() not in decrypted  # not even its path
