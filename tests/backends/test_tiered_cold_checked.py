"""A demoted agent's cold copy is checked against the demotion's marker before anything
reads it as the agent. ``verify``, a backup and a read-only store read a demoted agent
in the cold tier, where it stays, and did so without the marker's check a rehydration
makes: a cold copy swapped for another store's (or another agent's, renamed), or
deleted, passed ``statekeeper verify`` ("OK", exit 0), went into a backup as the agent,
and ``statekeeper show`` (read-only) served the other store's data as the agent's. And a
marker of an earlier version (no digest) was rehydrated with no check at all. Now each
raises :class:`IntegrityError` naming the agent: verify reports it (exit 1), a backup
refuses (nothing written), a read-only read and a rehydration refuse."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from statekeeper import StateStore
from statekeeper.backends import Backend, MemoryBackend, SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.backends.tiered_copy import copy_stream as _copy_stream
from statekeeper.errors import IntegrityError
from statekeeper.governance.backup import BackupKey, backup
from statekeeper.records import AppendRequest, RawEvent

from ._services import moto_endpoint, namespace, s3_credentials


async def _store(
    tmp_path: Path, name: str, cold: Backend, value: str
) -> tuple[StateStore, TieredBackend]:
    """A tiered store ``name`` whose ``user-1`` (2 saves of ``value``) and ``user-2``
    are demoted to ``cold``."""
    durable = SQLiteBackend(tmp_path / f"{name}.db")
    backend = TieredBackend(durable, cold=cold, idle_after=3600)
    store = StateStore(backend)
    await store.save("user-1", {"v": value, "n": 1})
    await store.save("user-1", {"v": value, "n": 2})
    await store.save("user-2", {"v": value})
    assert await backend.demote("user-1") and await backend.demote("user-2")
    return store, backend


async def _swap(cold: Backend, agent_id: str, source: Backend, source_id: str) -> None:
    """Put ``source``'s ``source_id`` stream in ``cold`` as ``agent_id``'s copy."""
    await cold.delete_agent(agent_id)
    head = await source.head(source_id)
    events = await source.read(source_id)
    assert len(events) == head
    await cold.append(AppendRequest(agent_id, 0, tuple(events)))


async def _swapped(tmp_path: Path) -> tuple[StateStore, TieredBackend, Backend]:
    """Store A with its cold copy of ``user-1`` replaced by store B's (same id, same
    head: B's cold tier is another prefix of the same bucket, copied by hand)."""
    cold_a, cold_b = SQLiteBackend(tmp_path / "cold-a.db"), MemoryBackend()
    store_a, a = await _store(tmp_path, "a", cold_a, "alpha")
    store_b, _ = await _store(tmp_path, "b", cold_b, "beta")
    await _swap(cold_a, "user-1", cold_b, "user-1")
    await store_b.close()
    return store_a, a, cold_a


async def test_verify_reports_a_swapped_cold_copy(tmp_path: Path) -> None:
    store, backend, cold = await _swapped(tmp_path)
    async with store:
        report = await store.verify()
        assert not report.ok  # (before: OK, 2 agents, the other store's events checked)
        assert [p.agent_id for p in report.problems] == ["user-1"]
        assert "not the stream this store demoted" in report.problems[0].reason
        assert await cold.head("user-1") == 2  # left where it is, for a look
        assert (
            await backend.durable.head(COLD_MARKER + "user-1") == 2
        )  # (its claim, and the demotion done)


async def test_verify_reports_another_agents_copy_and_a_missing_one(tmp_path: Path) -> None:
    cold = MemoryBackend()
    store, backend = await _store(tmp_path, "a", cold, "alpha")
    async with store:
        extra = await backend.durable.head("user-2")
        assert extra == 0
        # user-2's cold copy: user-1's records (2 of them), the marker says 1
        await _swap(cold, "user-2", cold, "user-1")
        await cold.delete_agent("user-1")  # and user-1's copy gone
        report = await store.verify()
        found = {p.agent_id: p.reason for p in report.problems}
        assert set(found) == {"user-1", "user-2"}, report.problems
        assert "cold copy of a demoted agent is missing" in found["user-1"]
        assert "at seq 2, not 1" in found["user-2"]


async def test_a_backup_refuses_a_swapped_cold_copy(tmp_path: Path) -> None:
    store, _, _ = await _swapped(tmp_path)
    file = tmp_path / "b.skb"
    async with store:
        with pytest.raises(IntegrityError, match=r"user-1.*not the stream this store demoted"):
            await backup(store, file, BackupKey(os.urandom(32)))
    assert not file.exists()  # (before: written, the other store's user-1 in it)


async def test_a_read_only_store_does_not_serve_a_swapped_cold_copy(tmp_path: Path) -> None:
    store, _, _ = await _swapped(tmp_path)
    await store.close()
    durable = SQLiteBackend(tmp_path / "a.db", readonly=True)
    cold = SQLiteBackend(tmp_path / "cold-a.db", readonly=True)
    async with StateStore(TieredBackend(durable, cold=cold, readonly=True)) as readonly:
        assert (await readonly.load("user-2")).data == {"v": "alpha"}  # its own: fine
        with pytest.raises(IntegrityError, match="not the stream this store demoted"):
            await readonly.load("user-1")  # (before: {"v": "beta", "n": 2}, no error)


async def _old_marker(backend: TieredBackend, agent_id: str) -> None:
    """Rewrite ``agent_id``'s marker as an earlier version wrote it (no digest)."""
    marker_id = COLD_MARKER + agent_id
    event = (await backend.durable.read(marker_id))[0]  # (its claim; then: done)
    body = orjson.loads(event.payload)
    del body["last"]
    body.pop("claimed", None), body.pop("owner", None)  # (nor a claim's owner)
    await backend.durable.delete_agent(marker_id)
    old = RawEvent(1, event.type, event.timestamp, orjson.dumps(body), b"")
    await backend.durable.append(AppendRequest(marker_id, 0, (old,)))


async def test_an_earlier_versions_marker_is_checked_too(tmp_path: Path) -> None:
    store, backend, cold = await _swapped(tmp_path)
    async with store:
        await _old_marker(backend, "user-1")
        await _old_marker(backend, "user-2")
        report = await store.verify()
        assert [p.agent_id for p in report.problems] == ["user-1"]
        assert "an earlier version's, without a digest" in report.problems[0].reason
        with pytest.raises(IntegrityError, match="not the stream this store demoted"):
            await store.load("user-1")  # (before: rehydrated, the other store's data)
        assert await cold.head("user-1") == 2 and await backend.durable.head("user-1") == 0
        # its own copy under an earlier version's marker still comes back
        assert (await store.load("user-2")).data == {"v": "alpha"}
        assert await backend.durable.head("user-2") == 1


def _cold(kind: str, tmp_path: Path) -> Backend:
    if kind == "memory":
        return MemoryBackend()
    if kind == "sqlite":
        return SQLiteBackend(tmp_path / "cold.db")
    pytest.importorskip("boto3")
    from statekeeper.backends.s3 import S3Backend

    return S3Backend(
        namespace(tmp_path, "sk-t-"),
        "cold",
        endpoint_url=moto_endpoint(),
        create_bucket=True,
        **s3_credentials(),
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite", "s3"])
async def test_an_earlier_versions_marker_of_a_compacted_stream(tmp_path: Path, kind: str) -> None:
    """The times an earlier marker kept are those of the first and last *stored*
    records: a stream retention compacted still rehydrates under such a marker, and is
    verified in the cold tier, whatever the cold tier (S3 keeps the base in its own
    record)."""
    backend = TieredBackend(
        SQLiteBackend(tmp_path / "a.db"), cold=_cold(kind, tmp_path), idle_after=3600
    )
    try:
        async with StateStore(backend) as store:
            for n in range(3):
                await store.save("user-1", {"n": n})
            assert await store.snapshot("user-1") == 3
            await store.save("user-1", {"n": 3})
            await store.save("user-2", {"n": 0})
            await backend.prune("user-1", 3)
            first = await backend.read("user-1", 0, None, limit=1)
            assert first[0].seq == 4
            assert await backend.demote("user-1") and await backend.demote("user-2")
            await _old_marker(backend, "user-1")
            await _old_marker(backend, "user-2")
            with backend.in_place():
                assert await backend.head("user-1") == 4  # checked, not refused
                assert [e.seq for e in await backend.read("user-1")] == [4]
            assert (await store.load("user-1")).data == {"n": 3}
            assert await backend.durable.head("user-1") == 4
            assert (await store.load("user-2")).data == {"n": 0}
    finally:
        if kind == "s3":
            from .test_s3 import _drop_bucket

            _drop_bucket(namespace(tmp_path, "sk-t-"))


async def test_a_copy_interrupted_rehydration_left_is_checked_the_same(tmp_path: Path) -> None:
    """A durable stream below the marker's head (a killed rehydration's part) is read in
    the cold tier in place: the same check."""
    store, backend, cold = await _swapped(tmp_path)
    async with store:
        theirs = MemoryBackend()
        await _copy_stream(cold, theirs, "user-1", 2, all_snapshots=True)
        part = await theirs.read("user-1", 0, 1)
        await backend.durable.append(AppendRequest("user-1", 0, tuple(part)))
        report = await store.verify(["user-1"])
        assert [p.agent_id for p in report.problems] == ["user-1"]
