"""Crypto-shredding: per-agent data keys, forget, AgentForgotten on every engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.codec.datakeys import MemoryKeyVault, SqliteKeyVault
from statekeeper.codec.keys import Keyring
from statekeeper.codec.pipeline import Codec
from statekeeper.errors import AgentForgotten, AgentNotFound, ConfigurationError, IntegrityError
from statekeeper.governance.shredding import forget

from ..backends._services import fresh_url

ENGINES = ["memory", "sqlite", "postgresql", "redis"]


def ring(vault: object = None, key: bytes | None = None) -> Keyring:
    return Keyring({"k1": key or bytes(range(32))}, data_keys=vault or MemoryKeyVault())


@pytest.mark.parametrize("engine", ENGINES)
async def test_forget_makes_the_agent_unreadable_and_leaves_others(
    tmp_path: Path, engine: str
) -> None:
    keys = ring(SqliteKeyVault(tmp_path / "vault.db"))
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url, keyring=keys, snapshot_every=2) as store:
            for i in range(5):
                await store.save("acme/alice", {"email": "alice@example.com", "n": i})
                await store.save("acme/bob", {"n": i})
            result = await forget(store, "acme/alice")
            assert result.destroyed and result.head == 5
            with pytest.raises(AgentForgotten) as caught:
                await store.load("acme/alice")
            assert caught.value.agent_id == "acme/alice"
            with pytest.raises(AgentForgotten):
                [e async for e in store.history("acme/alice")]
            with pytest.raises(AgentForgotten):  # the id can never get a new key
                await store.save("acme/alice", {"n": 9})
            assert (await store.load("acme/bob")).data == {"n": 4}
            report = await store.verify()
            assert report.ok and report.forgotten == ["acme/alice"]
        if engine == "memory":  # a memory store ends with its object
            return
        # another process, another store object: the key is gone for it too
        again = Keyring({"k1": bytes(range(32))}, data_keys=tmp_path / "vault.db")
        async with StateStore(url, keyring=again) as store:
            with pytest.raises(AgentForgotten):
                await store.load("acme/alice")
            assert (await store.load("acme/bob")).data == {"n": 4}


async def test_verify_does_not_count_a_forgotten_agents_records_as_checked() -> None:
    # its first event was counted before it could not be opened: `verify --json` said
    # 5 events checked of a store whose readable agents hold 4
    async with StateStore("memory://", keyring=ring()) as store:
        for agent_id in ("acme/alice", "acme/bob", "acme/carol"):
            await store.save(agent_id, {"n": 1})
            await store.save(agent_id, {"n": 2})
        await forget(store, "acme/bob")
        report = await store.verify()
        readable = await store.verify(["acme/alice", "acme/carol"])
        assert report.forgotten == ["acme/bob"] and report.agents == 3
        assert (report.events, report.snapshots, report.keys) == (
            readable.events,
            readable.snapshots,
            readable.keys,
        )
        assert report.events == 4


async def test_no_stored_byte_holds_the_plaintext_or_opens_without_the_data_key(
    tmp_path: Path,
) -> None:
    keys = ring()
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keys) as store:
        await store.save("a", {"secret": "hunter2-hunter2"})
        raw = (await store.backend.read("a"))[0]
    assert b"hunter2" not in raw.payload
    # the master key alone does not open a data-key record
    master_only = Codec(keyring=Keyring({"k1": bytes(range(32))}))
    with pytest.raises(IntegrityError):
        master_only.open("a", raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum)
    assert Codec.header(raw.payload).data_key  # type: ignore[union-attr]


async def test_stores_written_with_the_master_key_keep_opening_with_a_vault(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, keyring=Keyring({"k1": bytes(range(32))})) as store:
        await store.save("old", {"v": 1})
    vault = MemoryKeyVault()
    async with StateStore(url, keyring=ring(vault)) as store:
        assert (await store.load("old")).data == {"v": 1}
        await store.save("old", {"v": 2})  # new records: data key; old ones still open
        assert (await store.load("old")).data == {"v": 2}
        assert (await store.verify()).ok
    async with StateStore(url, keyring=ring(vault)) as store:
        assert (await store.load("old", at_seq=1)).data == {"v": 1}
        assert (await store.load("old")).data == {"v": 2}


async def test_forget_refuses_a_mistyped_agent_and_a_store_without_a_vault() -> None:
    async with StateStore("memory://", keyring=ring()) as store:
        with pytest.raises(AgentNotFound):
            await forget(store, "nobody")
    async with StateStore("memory://", keyring=Keyring({"k1": bytes(32)})) as store:
        await store.save("a", {"v": 1})
        with pytest.raises(ConfigurationError, match="key vault"):
            await forget(store, "a")
        assert (await store.load("a")).data == {"v": 1}


async def test_a_wrong_master_key_is_a_decryption_error_not_forgotten(tmp_path: Path) -> None:
    vault = SqliteKeyVault(tmp_path / "vault.db")
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=ring(vault)) as store:
        await store.save("a", {"v": 1})
    wrong = Keyring({"k1": os.urandom(32)}, data_keys=vault)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=wrong) as store:
        with pytest.raises(IntegrityError) as caught:
            await store.load("a")
        assert not isinstance(caught.value, AgentForgotten)


def test_the_vault_overwrites_a_destroyed_key(tmp_path: Path) -> None:
    vault = SqliteKeyVault(tmp_path / "vault.db")
    marker = b"\xa5" * 28 + b"WRAP"
    vault.create("a", "k1", marker)
    vault.close()
    assert marker in (tmp_path / "vault.db").read_bytes()
    vault = SqliteKeyVault(tmp_path / "vault.db")
    assert vault.destroy("a", 1.0)
    vault.close()
    assert marker not in (tmp_path / "vault.db").read_bytes()  # secure_delete
    entry = SqliteKeyVault(tmp_path / "vault.db").load("a")
    assert entry is not None and entry.wrapped is None and entry.forgotten_at == 1.0


async def test_rekey_rewraps_data_keys_so_the_old_master_key_can_retire(tmp_path: Path) -> None:
    from statekeeper.security.rekey import key_usage, rekey

    vault = SqliteKeyVault(tmp_path / "vault.db")
    url = f"sqlite:///{tmp_path / 's.db'}"
    old = bytes(range(32))
    async with StateStore(url, keyring=Keyring({"k1": old}, data_keys=vault)) as store:
        for i in range(4):
            await store.save("a", {"i": i})
    both = Keyring({"k2": os.urandom(32), "k1": old}, active="k2", data_keys=vault)
    async with StateStore(url, keyring=both) as store:
        await rekey(store)
        assert set(await key_usage(store)) == {"k2"}
    [entry] = vault.entries("a")  # (the store's key family's)
    assert entry.master_id == "k2"
    retired = both.without("k1")
    async with StateStore(url, keyring=retired) as store:
        assert (await store.load("a")).data == {"i": 3}
        assert (await store.verify()).ok


async def test_rekey_walks_a_compacted_stream_from_its_base(tmp_path: Path) -> None:
    from statekeeper.governance.retention import RetentionPolicy, apply_retention
    from statekeeper.security.rekey import rekey

    url = f"sqlite:///{tmp_path / 's.db'}"
    k1 = bytes(range(32))
    async with StateStore(url, keyring=Keyring({"k1": k1}), snapshot_every=3) as store:
        for i in range(10):
            await store.save("a", {"i": i})
        await apply_retention(store, RetentionPolicy.parse("* keep_last=2"))
    rotated = Keyring({"k2": os.urandom(32), "k1": k1}, active="k2")
    async with StateStore(url, keyring=rotated) as store:
        stats = await rekey(store)
        assert stats.events == 2
    async with StateStore(url, keyring=rotated.without("k1")) as store:
        assert (await store.load("a")).data == {"i": 9}
        assert (await store.verify()).ok


async def test_a_copy_of_the_store_file_taken_before_forget_is_unreadable_after(
    tmp_path: Path,
) -> None:
    """A replica (here: a copy of the SQLite file and its WAL) holds the agent's records
    but never its data key: forgetting in the live store forgets in every copy."""
    keys = ring(SqliteKeyVault(tmp_path / "vault.db"))
    live = tmp_path / "live.db"
    async with StateStore(f"sqlite:///{live}", keyring=keys) as store:
        await store.save("acme/alice", {"ssn": "078-05-1120"})
        await store.save("acme/bob", {"n": 1})
        replica = tmp_path / "replica"
        copy_files(tmp_path, replica)
        await forget(store, "acme/alice")
    async with StateStore(f"sqlite:///{replica / 'live.db'}", keyring=keys) as copy:
        with pytest.raises(AgentForgotten):
            await copy.load("acme/alice")
        assert (await copy.load("acme/bob")).data == {"n": 1}


def copy_files(source: Path, target: Path) -> None:
    """Copy the store's files (the database, its WAL and shared memory), as a replica."""
    import shutil

    target.mkdir()
    for path in source.glob("live.db*"):
        shutil.copy(path, target / path.name)
