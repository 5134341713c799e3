"""Verifying and backing up a tiered store leave demoted agents in the cold tier, and
a tiered store counts each agent once, whatever markers a crash left behind."""

from __future__ import annotations

import os
from pathlib import Path

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend, SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.governance.backup import BackupKey, backup, restore
from statekeeper.records import AppendRequest, RawEvent


def _tiered(tmp_path: Path) -> tuple[TieredBackend, SQLiteBackend, MemoryBackend]:
    durable, cold = SQLiteBackend(tmp_path / "durable.db"), MemoryBackend()
    return TieredBackend(durable, MemoryBackend(), cold, idle_after=3600), durable, cold


async def _demoted_store(tmp_path: Path) -> tuple[StateStore, SQLiteBackend, MemoryBackend]:
    backend, durable, cold = _tiered(tmp_path)
    store = StateStore(backend)
    for agent_id in ("a", "b", "c"):
        for i in range(3):
            await store.save(agent_id, {"i": i})
    assert await backend.demote("a") and await backend.demote("b")
    return store, durable, cold


async def _still_demoted(durable: SQLiteBackend, cold: MemoryBackend) -> None:
    for agent_id in ("a", "b"):
        assert await durable.head(agent_id) == 0, f"{agent_id} was moved back"
        assert await cold.head(agent_id) == 3
        assert await durable.head(COLD_MARKER + agent_id) == 2  # (its claim, and the demotion done)


async def test_verify_reads_demoted_agents_in_the_cold_tier(tmp_path: Path) -> None:
    store, durable, cold = await _demoted_store(tmp_path)
    async with store:
        report = await store.verify()
        assert report.ok and report.agents == 3
        await _still_demoted(durable, cold)
        assert (await store.verify(["a"])).ok
        await _still_demoted(durable, cold)
        assert (await store.load("a")).data == {"i": 2}  # a real use still brings it back
        assert await durable.head("a") == 3 and await cold.head("a") == 0


async def test_a_backup_reads_demoted_agents_in_the_cold_tier(tmp_path: Path) -> None:
    store, durable, cold = await _demoted_store(tmp_path)
    bkey = BackupKey(os.urandom(32))
    file = tmp_path / "b.skb"
    async with store:
        await backup(store, file, bkey)
        await _still_demoted(durable, cold)
    async with StateStore(f"sqlite:///{tmp_path / 'restored.db'}") as restored:
        result = await restore(restored, [file], bkey)
        assert result.agents == 3
        for agent_id in ("a", "b", "c"):
            assert (await restored.load(agent_id)).data == {"i": 2}


async def test_left_over_markers_are_not_counted_twice(tmp_path: Path) -> None:
    """A demotion that crashed after writing its marker (the stream still in the
    durable tier), and the part of a killed rehydration (marker + part of the stream):
    each agent is counted once."""
    backend, durable, cold = _tiered(tmp_path)
    for agent_id in ("a", "ns/b", "ns/c", "d"):
        for seq in range(3):
            await backend.append(
                AppendRequest(agent_id, seq, (RawEvent(seq + 1, "e", 1.0, b"{}", b""),))
            )
    # "a": a demotion that died after its marker, before deleting the stream
    body = b'{"head": 3, "created": 1.0, "updated": 1.0}'
    await durable.append(
        AppendRequest(COLD_MARKER + "a", 0, (RawEvent(1, "cold", 1.0, body, b""),))
    )
    # "ns/b": demoted, then a rehydration killed after copying one event back
    assert await backend.demote("ns/b")
    events = await cold.read("ns/b", 0, 1)
    await durable.append(AppendRequest("ns/b", 0, tuple(events)))
    # "ns/c": cleanly demoted
    assert await backend.demote("ns/c")
    fresh = TieredBackend(durable, None, cold, idle_after=3600)  # another process
    assert await fresh.count_agents() == 4
    assert await fresh.count_prefix("ns/") == 2
    assert await fresh.count_prefix("") == 4
    assert len(await fresh.list_agents(limit=100)) == 4
