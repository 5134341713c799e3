"""A Redis store's TTL expires agents by itself, with no deletion mark in the witness
file (:mod:`statekeeper.security.expiry`).

Before: the witness held the mark of an agent that expired, and a store given
``witness=PATH`` raised ``RollbackDetected`` ("the agent is gone") at every opening
and read — an expired agent "is gone as the TTL says, never reported lost"
(docs/backends.md); and an agent saved again after it expired, in another process
whose mark of it was not yet written (its ``witness_interval``: held open here, no
timing), was a rollback ("the store's head is seq 2") for every process reading the
file meanwhile. A stream that went back in time is still one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AgentNotFound, RollbackDetected
from statekeeper.records import AppendRequest

from ..backends._services import REDIS_URL, delete_prefix, fresh_url, namespace, require_redis


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    require_redis()
    prefix = namespace(tmp_path, "sk_wttl_")
    yield f"{REDIS_URL}?prefix={prefix}&ttl=3600"
    delete_prefix(prefix)


async def _expire(store: StateStore, agent_id: str) -> None:
    """``agent_id``'s keys expire (the server deletes them): waited for, not slept."""
    await store.backend.set_ttl(agent_id, 0.001)  # type: ignore[attr-defined]
    for _ in range(10_000):
        if await store.backend.head(agent_id) == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{agent_id} never expired")


async def test_an_expired_agent_is_no_rollback(url: str, tmp_path: Path) -> None:
    witness = tmp_path / "app.sk-witness"
    async with StateStore(url, witness=witness) as app:
        for n in range(5):
            await app.save("a", {"n": n})
        await app.save("b", {"n": 1})
        await _expire(app, "a")
    async with StateStore(url, witness=witness) as app:  # was: RollbackDetected
        with pytest.raises(AgentNotFound):
            await app.load("a")
        assert (await app.load("b")).data == {"n": 1}
        assert not (await app.verify()).problems
        await app.save("a", {"n": 0})  # started afresh, as the TTL says
        assert await app.backend.head("a") == 1


async def test_an_agent_made_again_after_it_expired_in_another_process_is_no_rollback(
    url: str, tmp_path: Path
) -> None:
    witness = tmp_path / "app.sk-witness"
    async with StateStore(url, witness=witness) as first:
        for n in range(5):
            await first.save("a", {"n": n})
    # another process: its marks not written before its close (the window held open)
    async with StateStore(url, witness=witness, witness_interval=3600) as other:
        await other.save("other", {"n": 1})
        await _expire(other, "a")
        await other.save("a", {"n": 10})
        await other.save("a", {"n": 11})  # made again, shorter than the file's mark
        async with StateStore(url, witness=witness) as reader:  # was: RollbackDetected
            assert (await reader.load("a")).data == {"n": 11}
            assert not (await reader.verify()).problems


async def test_a_stream_gone_back_in_time_on_a_ttl_store_is_still_a_rollback(
    url: str, tmp_path: Path
) -> None:
    witness = tmp_path / "app.sk-witness"
    async with StateStore(url, witness=witness) as app:
        await app.save("a", {"n": 1})
        await app.save("a", {"n": 2})
    async with StateStore(url, witness=False) as behind:
        raw = await behind.backend.read("a")
        await behind.backend.delete_agent("a")
        # its first record only, as an older copy of the server holds it
        await behind.backend.append(AppendRequest("a", 0, raw[:1]))
    async with StateStore(url, witness=witness) as app:
        with pytest.raises(RollbackDetected, match="head is seq 1"):
            await app.load("a")


async def test_a_writer_clock_ahead_does_not_hide_a_stream_gone_back_in_time(
    url: str, tmp_path: Path
) -> None:
    # its records stamped an hour ahead of the clock the marks are made by (a writer's
    # clock ahead, or clock= of its own): its first record is not "made after the mark"
    witness = tmp_path / "app.sk-witness"
    async with StateStore(url, witness=witness, clock=lambda: time.time() + 3600) as app:
        await app.save("a", {"n": 1})
        await app.save("a", {"n": 2})
    async with StateStore(url, witness=False) as behind:
        raw = await behind.backend.read("a")
        await behind.backend.delete_agent("a")
        await behind.backend.append(AppendRequest("a", 0, raw[:1]))
    async with StateStore(url, witness=witness) as app:  # was: {"n": 1} served, no error
        with pytest.raises(RollbackDetected, match="head is seq 1"):
            await app.load("a")


async def test_an_agent_expired_by_its_own_ttl_is_no_rollback(tmp_path: Path) -> None:
    # a store without ttl=: one agent given its own TTL (set_ttl, as typed states with
    # an expiry are); gone, it expired — the backend itself answers AgentNotFound
    witness = tmp_path / "app.sk-witness"
    with fresh_url("redis", tmp_path) as url:
        async with StateStore(url, witness=witness) as app:
            for n in range(3):
                await app.save("a", {"n": n})
            await app.save("b", {"n": 1})
            await _expire(app, "a")
        for _ in range(2):  # (the second after a read of it: still no rollback)
            async with StateStore(url, witness=witness) as app:  # was: RollbackDetected
                with pytest.raises(AgentNotFound):
                    await app.load("a")
                assert (await app.load("b")).data == {"n": 1}
                assert not (await app.verify()).problems


async def test_an_agent_lost_on_a_store_without_ttl_is_still_a_rollback(tmp_path: Path) -> None:
    # no TTL of its own: its keys gone (a DEL outside the store) is a loss, not an expiry
    witness = tmp_path / "app.sk-witness"
    with fresh_url("redis", tmp_path) as url:
        async with StateStore(url, witness=witness) as app:
            await app.save("a", {"n": 1})
            await app.save("a", {"n": 2})
        async with StateStore(url, witness=False) as behind:
            await behind.backend.delete_agent("a")
        async with StateStore(url, witness=witness) as app:
            with pytest.raises(RollbackDetected, match="the agent is gone"):
                await app.load("a")


async def test_a_writer_clock_ahead_within_the_window_still_shows_the_rollback(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from statekeeper.security import expiry

    witness = tmp_path / "app.sk-witness"
    ahead = time.time() + 60  # another host's clock, a minute ahead
    async with StateStore(url, witness=False, clock=lambda: ahead) as writer:
        await writer.save("a", {"n": 1})
    async with StateStore(url, witness=witness) as app:  # marks seq 3 (its clock: now)
        await app.save("a", {"n": 2})
        await app.save("a", {"n": 3})
    async with StateStore(url, witness=False) as behind:  # an older copy of the server
        raw = await behind.backend.read("a")
        await behind.backend.delete_agent("a")
        await behind.backend.append(AppendRequest("a", 0, raw[:2]))
    # the check made after the writer's first record's time (its clock ahead by less
    # than the time since): no sleep, this process's clock is moved on
    monkeypatch.setattr(expiry, "time", SimpleNamespace(time=lambda: ahead + 1))
    async with StateStore(url, witness=witness) as app:
        with pytest.raises(RollbackDetected, match="head is seq 2"):
            await app.load("a")  # served {"n": 2}, no error
