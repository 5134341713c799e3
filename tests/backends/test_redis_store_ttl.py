"""The TTL of a Redis store whose agents expire (``?ttl=``) is part of the store: it is
recorded in the store's meta hash (and its copy in shard 0's agent index) by the first
writable backend opened with it, and every backend opened without ``ttl=`` (the CLI's
``agents``, ``verify``, another process) takes it. Before, such an opener reported every
expired agent as lost ("restore from a backup"), ``verify`` exited 1 and a save of the
expired agent raised ``AgentLost`` until it was deleted. A ``ttl=`` that contradicts the
recorded one is refused, naming both.

On the shared server under the test's own key prefix; an agent is expired at once by a
``PEXPIRE`` of 1 ms on its keys, then waited for (the key gone), never slept on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis

from statekeeper import StateStore
from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import AgentNotFound, ConfigurationError

from ..cli._proc import sk_in_process
from ._services import REDIS_URL, delete_prefix, namespace, require_redis


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path, "sk_sttl_") + ":"
    yield name
    delete_prefix(name)


def _raw() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


def _expire_now(prefix: str, agent: str) -> None:
    """Expire the agent's keys as its TTL would, and wait until Redis has."""
    client = _raw()
    try:
        keys = [f"{prefix}a:{agent}", f"{prefix}s:{agent}"]
        for key in keys:
            client.pexpire(key, 1)
        deadline = time.monotonic() + 10
        while client.exists(*keys):  # (EXISTS expires a key past its time)
            assert time.monotonic() < deadline, "the keys did not expire"
    finally:
        client.close()


async def _saved_with_ttl(prefix: str, ttl: str = "3600") -> None:
    async with StateStore(f"{REDIS_URL}?prefix={prefix}&ttl={ttl}") as store:
        await store.save("r-0", {"n": 0})
        await store.save("r-1", {"n": 1})


async def test_an_opener_without_ttl_takes_the_stores_and_an_expiry_is_no_loss(
    prefix: str,
) -> None:
    await _saved_with_ttl(prefix)
    _expire_now(prefix, "r-0")
    async with StateStore(f"{REDIS_URL}?prefix={prefix}") as store:
        ids = [a.agent_id for a in await store.list_agents()]
        assert ids == ["r-1"]  # main: AgentLost "r-0"
        assert store.backend.expires_agents  # once open (main: False)
        with pytest.raises(AgentNotFound):
            await store.load("r-0")  # main: AgentLost
        result = await store.save("r-0", {"n": 9})  # main: AgentLost until deleted
        assert (result.first_seq, result.last_seq) == (1, 1)  # starts fresh
        assert (await store.load("r-0")).data == {"n": 9}
    client = _raw()
    try:  # the save gave it the store's TTL
        assert 0 < client.pttl(f"{prefix}a:r-0") <= 3_600_000
    finally:
        client.close()


def test_the_cli_opened_without_ttl_reports_no_lost_agent(prefix: str) -> None:
    import asyncio

    asyncio.run(_saved_with_ttl(prefix))
    _expire_now(prefix, "r-0")
    url = f"{REDIS_URL}?prefix={prefix}"
    agents = sk_in_process("agents", "--json", "--url", url)
    assert agents.returncode == 0, agents.stdout + agents.stderr
    listed = json.loads(agents.stdout)
    assert [(a["agent_id"], a["lost"]) for a in listed["agents"]] == [("r-1", False)]
    assert not listed["lost"]  # main: r-0 "(lost) ... restore it from a backup"
    verify = sk_in_process("verify", "--url", url)
    assert verify.returncode == 0, verify.stdout + verify.stderr  # main: 1


async def test_a_ttl_that_contradicts_the_stores_is_refused(prefix: str) -> None:
    await _saved_with_ttl(prefix, "3")
    for readonly in (False, True):
        backend = RedisBackend(REDIS_URL, prefix=prefix, ttl=5, readonly=readonly)
        try:
            with pytest.raises(ConfigurationError) as raised:
                await backend.list_agents()
            text = str(raised.value)
            assert "ttl=3" in text and "ttl=5" in text and repr(prefix) in text
            assert "without ttl=" in text
        finally:
            await backend.close()
    backend = RedisBackend(REDIS_URL, prefix=prefix, ttl=3)  # the same ttl is fine
    try:
        assert [a.agent_id for a in await backend.list_agents()] == ["r-0", "r-1"]
    finally:
        await backend.close()


async def test_a_read_only_opener_takes_the_stores_ttl(prefix: str) -> None:
    await _saved_with_ttl(prefix)
    _expire_now(prefix, "r-0")
    backend = RedisBackend(REDIS_URL, prefix=prefix, readonly=True)
    try:
        assert [a.agent_id for a in await backend.list_agents()] == ["r-1"]  # main: AgentLost
        assert backend.ttl == 3600
        assert await backend.count_agents() == 1
    finally:
        await backend.close()


async def test_a_store_without_ttl_records_none_until_one_is_used(prefix: str) -> None:
    async with StateStore(f"{REDIS_URL}?prefix={prefix}") as store:
        await store.save("a", {"n": 1})
        assert not store.backend.expires_agents
    client = _raw()
    try:
        assert client.hget(f"{prefix}meta", "ttl") is None
        await _saved_with_ttl(prefix, "60")  # the first use of a ttl records it
        assert client.hget(f"{prefix}meta", "ttl") == b"60000"
    finally:
        client.close()
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await backend.open()
        assert backend.ttl == 60
    finally:
        await backend.close()


async def test_the_ttl_survives_the_loss_of_the_meta_hash(prefix: str) -> None:
    await _saved_with_ttl(prefix, "120")
    client = _raw()
    try:
        assert client.delete(f"{prefix}meta") == 1  # the copy in the index stays
        backend = RedisBackend(REDIS_URL, prefix=prefix)
        try:
            await backend.open()
            assert backend.ttl == 120
        finally:
            await backend.close()
        assert client.hget(f"{prefix}meta", "ttl") == b"120000"  # put back
    finally:
        client.close()


async def test_change_store_ttl_records_the_new_one(prefix: str) -> None:
    await _saved_with_ttl(prefix, "3")
    backend = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await backend.open()
        await backend.change_store_ttl(7)
        assert backend.ttl == 7
    finally:
        await backend.close()
    client = _raw()
    try:
        own = client.zrangebylex(f"{prefix}agents", b"[\x00d:", b"(\x00d;")
        assert own == [b"\x00d:7000"]  # one copy, the new one
    finally:
        client.close()
    backend = RedisBackend(REDIS_URL, prefix=prefix, ttl=3)
    try:
        with pytest.raises(ConfigurationError, match="ttl=7"):
            await backend.open()
    finally:
        await backend.close()


@pytest.mark.parametrize("first", ["load", "history", "snapshot", "seq_at", "set_ttl", "prune"])
async def test_the_first_call_of_an_opener_without_ttl_already_takes_it(
    prefix: str, first: str
) -> None:
    await _saved_with_ttl(prefix)
    _expire_now(prefix, "r-0")
    backend = RedisBackend(REDIS_URL, prefix=prefix)  # not opened: its first call opens it
    try:
        if first == "load":
            with pytest.raises(AgentNotFound):
                await StateStore(backend).load("r-0")  # main: AgentLost
        elif first == "history":
            assert await backend.read("r-0") == []
        elif first == "snapshot":
            assert await backend.latest_snapshot("r-0") is None
        elif first == "seq_at":
            assert await backend.seq_at("r-0", time.time()) == 0
        elif first == "set_ttl":
            assert await backend.set_ttl("r-0", 60) is False
        else:
            with pytest.raises(Exception) as raised:
                await backend.prune("r-0", 1)
            assert "lost" not in str(raised.value)
    finally:
        await backend.close()


async def test_a_sharded_store_keeps_its_ttl_too(prefix: str) -> None:
    url = f"{REDIS_URL}?prefix={prefix}&shards=4"
    async with StateStore(f"{url}&ttl=3600") as store:
        await store.save("r-0", {"n": 0})
        await store.save("r-1", {"n": 1})
        assert isinstance(store.backend, RedisBackend)
        keys = store.backend.layout.agent("r-0")
    client = _raw()
    try:
        for key in (keys.hash, keys.snapshots):
            client.pexpire(key, 1)
        deadline = time.monotonic() + 10
        while client.exists(keys.hash, keys.snapshots):
            assert time.monotonic() < deadline, "the keys did not expire"
    finally:
        client.close()
    async with StateStore(url) as store:
        assert [a.agent_id for a in await store.list_agents()] == ["r-1"]  # main: AgentLost
        assert (await store.save("r-0", {"n": 9})).first_seq == 1


async def test_a_tier_of_record_refuses_a_store_whose_agents_expire(prefix: str) -> None:
    from statekeeper.backends.memory import MemoryBackend
    from statekeeper.backends.tiered import TieredBackend

    await _saved_with_ttl(prefix)
    durable = RedisBackend(REDIS_URL, prefix=prefix)  # no ttl=: it would take the store's
    tiered = TieredBackend(durable, MemoryBackend())
    try:
        with pytest.raises(ConfigurationError, match="tier of record"):
            await tiered.head("r-1")  # main: no refusal
    finally:
        await tiered.close()


async def test_a_guard_of_a_made_stream_refreshes_the_guarded_streams_ttl(prefix: str) -> None:
    """``append_from_base(guard=...)`` stores the guarded stream's new head tag (a write
    of that stream, as a rewrite is): its TTL is refreshed as every write's is. Was:
    from_base.lua wrote the tag and left the guarded stream's TTL as it was (rewrite.lua
    and together.lua refresh it), so it expired that much earlier."""
    from statekeeper.backends.base import Backend
    from statekeeper.records import RewriteRequest, StreamChange
    from statekeeper.testing._contract import request, snapshot, tagged

    async with StateStore(f"{REDIS_URL}?prefix={prefix}&ttl=3600") as store:
        backend: Backend = store.backend
        await backend.append(tagged(request("m", 0), b"m1"))
        client = _raw()
        try:
            keys = [f"{prefix}a:m", f"{prefix}s:m"]
            for key in keys:
                client.pexpire(key, 100_000)  # (much less than the store's hour left)
            moved = StreamChange("m", rewrite=RewriteRequest("m", 1, b"m1", head_tag=b"m2"))
            await backend.append_from_base(
                tagged(request("a", 3, 1), b"t4"), snapshot(3), guard=moved
            )
            assert await backend.head_tag("m") == (1, b"m2")
            assert client.pttl(keys[0]) > 3_000_000, "the guarded stream's TTL not refreshed"
        finally:
            client.close()
