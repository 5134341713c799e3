"""The seed's ``StatePersistenceManager``, made real: same names, real storage."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from statekeeper import (
    BackendUnavailable,
    SerializationError,
    StatekeeperError,
    StatePersistenceManager,
    StateSnapshot,
    StorageBackend,
)

from .conftest import wait_until


def sha256_of(state: dict[str, object]) -> str:
    return hashlib.sha256(orjson.dumps(state, option=orjson.OPT_SORT_KEYS)).hexdigest()


@pytest.mark.parametrize(
    ("backend", "engine"),
    [(StorageBackend.REDIS, "redis"), (StorageBackend.POSTGRESQL, "postgresql")],
)
async def test_server_backends_are_real_engines(
    backend: StorageBackend, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # built from their default URL without connecting (the server is needed on first use;
    # tests/backends/test_persistence_backends.py runs them against real servers)
    monkeypatch.delenv("STATEKEEPER_REDIS_URL", raising=False)
    monkeypatch.delenv("STATEKEEPER_POSTGRES_URL", raising=False)
    try:
        manager = StatePersistenceManager(backend)
    except BackendUnavailable as exc:  # the extra is not installed
        assert "pip install 'statekeeper[" in str(exc)
        return
    assert manager.store.backend.name == engine
    assert manager.get_stats()["backend"] == backend.value
    await manager.store.backend.close()


def test_s3_needs_a_location(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEKEEPER_S3_URL", raising=False)
    with pytest.raises(StatekeeperError) as info:
        StatePersistenceManager(StorageBackend.S3)
    assert "STATEKEEPER_S3_URL" in str(info.value)


async def test_local_save_load_and_snapshot_checksum(tmp_path: Path) -> None:
    path = tmp_path / "seed.db"
    state = {"messages": [{"role": "user", "content": "hi"}], "step": 3, "done": False}
    async with StatePersistenceManager(StorageBackend.LOCAL, path=str(path)) as manager:
        assert await manager.save_state("agent-1", state, version=2) is True
        assert await manager.load_state("agent-1") == state
        snap = await manager.load_snapshot("agent-1")
        assert isinstance(snap, StateSnapshot)
        assert (snap.agent_id, snap.state, snap.version) == ("agent-1", state, 2)
        assert snap.checksum == sha256_of(state)
        assert len(snap.checksum) == 64  # SHA-256, not the seed's md5
        assert snap.timestamp > 0
        assert await manager.load_state("nobody") is None
        assert await manager.load_snapshot("nobody") is None
    assert path.exists()
    async with StatePersistenceManager(path=str(path)) as again:  # LOCAL is the default
        assert await again.load_state("agent-1") == state


async def test_checksum_ignores_key_order_and_follows_content(tmp_path: Path) -> None:
    async with StatePersistenceManager(url="memory://") as manager:
        await manager.save_state("a", {"x": 1, "y": [1, 2]})
        await manager.save_state("b", {"y": [1, 2], "x": 1})
        await manager.save_state("c", {"x": True, "y": [1, 2]})
        sums = []
        for name in "abc":
            snap = await manager.load_snapshot(name)
            assert snap is not None
            sums.append(snap.checksum)
        assert sums[0] == sums[1]
        assert sums[0] != sums[2]


async def test_loaded_state_is_a_copy(tmp_path: Path) -> None:
    async with StatePersistenceManager(url="memory://") as manager:
        await manager.save_state("a", {"items": [1]})
        loaded = await manager.load_state("a")
        assert loaded is not None
        loaded["items"].append(2)
        assert await manager.load_state("a") == {"items": [1]}


async def test_buffered_saves_reach_storage_on_flush(tmp_path: Path) -> None:
    path = str(tmp_path / "buffered.db")
    writer = StatePersistenceManager(path=path, flush_interval=3600, buffer_size=100)
    reader = StatePersistenceManager(path=path, durability="sync")
    try:
        for i in range(5):
            await writer.save_state(f"agent-{i}", {"i": i})
        stats = writer.get_stats()
        assert stats["buffer_size"] == 5
        assert await reader.load_state("agent-0") is None  # not written yet
        assert await writer.load_state("agent-0") == {"i": 0}  # but served to the writer
        await writer.flush()
        assert writer.get_stats()["buffer_size"] == 0
        assert [await reader.load_state(f"agent-{i}") for i in range(5)] == [
            {"i": i} for i in range(5)
        ]
    finally:
        await writer.close()
        await reader.close()


async def test_buffer_flushes_on_its_interval(tmp_path: Path) -> None:
    # The seed's buffer never flushed on its interval; this one does.
    path = str(tmp_path / "interval.db")
    async with StatePersistenceManager(path=path, flush_interval=0.02) as writer:
        await writer.save_state("a", {"n": 1})
        reader = StatePersistenceManager(path=path, durability="sync")
        try:

            async def written() -> bool:
                return await reader.load_state("a") == {"n": 1}

            await wait_until(written, what="the interval flush")
        finally:
            await reader.close()


async def test_close_flushes(tmp_path: Path) -> None:
    path = str(tmp_path / "close.db")
    manager = StatePersistenceManager(path=path, flush_interval=3600)
    await manager.save_state("a", {"n": 1})
    await manager.close()
    async with StatePersistenceManager(path=path) as again:
        assert await again.load_state("a") == {"n": 1}


async def test_stats_count_cache_hits_and_misses() -> None:
    async with StatePersistenceManager(
        url="memory://", durability="sync", max_cache_size=2
    ) as manager:
        for name in "abc":
            await manager.save_state(name, {"name": name})
        await manager.load_state("c")
        stats = manager.get_stats()
        assert stats["backend"] == "local"
        assert stats["durability"] == "sync"
        assert stats["cache_size"] == 2
        assert stats["cache_evictions"] == 1
        assert stats["appends"] == 3
        assert stats["cache_hits"] >= 1
        assert 0 < stats["cache_hit_rate"] <= 1


async def test_bad_state_raises_instead_of_returning_false() -> None:
    async with StatePersistenceManager(url="memory://", durability="sync") as manager:
        await manager.save_state("a", {"ok": 1})
        with pytest.raises(SerializationError) as info:
            await manager.save_state("a", {"ok": 1, "when": object()})
        assert info.value.path == "data.when"
        assert await manager.load_state("a") == {"ok": 1}


async def test_delete_state() -> None:
    async with StatePersistenceManager(url="memory://") as manager:
        await manager.save_state("a", {"n": 1})
        assert await manager.delete_state("a") is True
        assert await manager.load_state("a") is None
        assert await manager.delete_state("a") is False
