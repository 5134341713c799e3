"""The sharded Redis key layout on the shared single server (fast; the same layout a
Redis Cluster uses, see test_redis_cluster.py): the contract, one slot per agent, the
layout recorded and enforced, per-shard feeds, cluster URLs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis.asyncio as aioredis
from redis.crc import key_slot

from statekeeper.backends import SQLiteBackend, TieredBackend, open_backend
from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import CapabilityUnsupported, ConfigurationError
from statekeeper.store import StateStore
from statekeeper.testing import BackendConformance, request

from ._services import REDIS_URL, namespace


class TestRedisShardedConformance(BackendConformance):
    """The whole contract holds in the sharded layout (4 shards, one server)."""

    @pytest.fixture(autouse=True)
    def _isolated_prefix(self, prefix: str) -> None:
        """Require the server and give the test its own key prefix."""

    async def make_backend(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", shards=4)

    async def open_peer(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", shards=4)

    async def open_readonly(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", shards=4, readonly=True)


class TestRedisOneShardConformance(TestRedisShardedConformance):
    """One shard: the sharded layout with the store-wide feed (FEED conformance runs)."""

    async def make_backend(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", shards=1)

    async def open_peer(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", shards=1)

    async def open_readonly(self, tmp_path: Path) -> RedisBackend:
        return RedisBackend(REDIS_URL, prefix=namespace(tmp_path) + ":", shards=1, readonly=True)


async def test_every_key_of_an_agent_and_its_shard_share_one_slot(prefix: str) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix, shards=8)
    raw = aioredis.Redis.from_url(REDIS_URL)
    try:
        for i in range(16):
            agent = f"agent-{i}"
            await backend.append(request(agent, 0, 2, key="k", snap_at=2))
            await backend.acquire_lease(agent, "me", 30)
        keys = [k async for k in raw.scan_iter(match=prefix + "*", count=1000)]
        slots: dict[bytes, set[int]] = {}
        for key in keys:
            if key == (prefix + "meta").encode():
                continue
            tag = key[key.index(b"{") + 1 : key.index(b"}")]
            slots.setdefault(tag, set()).add(key_slot(key))
        # every key is tagged; each shard's keys (agents, index, feed) sit in one slot
        assert len(keys) - 1 == sum(1 for k in keys if b"{" in k)
        assert all(len(s) == 1 for s in slots.values())
        for i in range(16):
            agent = f"agent-{i}"
            k = backend.layout.agent(agent)
            slot = key_slot(k.hash)
            assert {key_slot(k.snapshots), key_slot(k.lease)} == {slot}
            assert key_slot(k.shard.index) == slot == key_slot(k.shard.feed_stream)
        # 8 shards spread over 8 equal ranges of the slots (even over the masters)
        ranges = sorted(key_slot(s.index) * 8 // 16384 for s in backend.layout.shard_keys)
        assert ranges == list(range(8))
    finally:
        await backend.close()
        await raw.aclose()


async def test_the_layout_is_recorded_and_a_different_one_refused(prefix: str) -> None:
    sharded = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
    await sharded.append(request("a", 0, 1))
    await sharded.close()
    wrong_ones: list[tuple[int | None, str]] = [
        (8, "created with shards=4"),
        (None, r"open it with \?shards=4"),
    ]
    for shards, message in wrong_ones:
        backend = RedisBackend(REDIS_URL, prefix=prefix, shards=shards)
        with pytest.raises(ConfigurationError, match=message):
            await backend.read("a")
        await backend.close()
    again = RedisBackend.from_url(f"{REDIS_URL}?prefix={prefix}&shards=4")
    assert [e.seq for e in await again.read("a")] == [1]
    await again.close()


async def test_health_reports_a_store_recorded_with_another_layout(
    prefix: str, tmp_path: Path
) -> None:
    """Every operation of a backend opened with the wrong ``shards=`` is refused, so
    its health is not ok: a tiered store whose hot tier was so misconfigured reported
    it healthy while never using it (each hot call failed, silently passed over). Its
    writes are refused too, with nothing written to the durable tier (h/redisleft: a
    configuration error of the hot tier fails the call, it never heals by itself)."""
    sharded = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
    await sharded.append(request("a", 0, 1))
    assert (await sharded.health()).ok
    await sharded.close()
    for shards, message in [(2, "created with shards=4"), (None, r"open it with \?shards=4")]:
        wrong = RedisBackend(REDIS_URL, prefix=prefix, shards=shards)
        health = await wrong.health()
        assert not health.ok
        assert re.search(message, health.detail["error"])
        await wrong.close()
    hot = RedisBackend(REDIS_URL, prefix=prefix, shards=2, retry_timeout=0)
    tiered = TieredBackend(durable=SQLiteBackend(tmp_path / "durable.db"), hot=hot)
    try:
        with pytest.raises(ConfigurationError, match=r"hot tier refused.*created with shards=4"):
            await tiered.append(request("b", 0, 1))
        assert await tiered.durable.head("b") == 0
        health = await tiered.health()
        assert health.ok  # the durable tier decides; the hot tier's trouble is shown
        assert health.detail["hot"]["ok"] is False
        assert "created with shards=4" in health.detail["hot"]["error"]
    finally:
        await tiered.close()


async def test_a_plain_store_is_not_hidden_behind_a_sharded_one(prefix: str) -> None:
    plain = RedisBackend(REDIS_URL, prefix=prefix)
    await plain.append(request("a", 0, 2))
    await plain.close()
    sharded = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
    with pytest.raises(ConfigurationError, match="plain key layout"):
        await sharded.append(request("b", 0, 1))
    await sharded.close()
    plain = RedisBackend(REDIS_URL, prefix=prefix)  # untouched, still readable
    assert [e.seq for e in await plain.read("a")] == [1, 2]
    assert [a.agent_id for a in await plain.list_agents()] == ["a"]
    await plain.close()


async def test_feeds_are_per_shard_and_subscribe_follows_them_all(prefix: str) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix, shards=4)
    try:
        agents = [f"agent-{i}" for i in range(12)]
        for round_ in range(2):
            for agent in agents:
                await backend.append(request(agent, round_))
        seen: dict[str, list[int]] = {}
        for shard in range(4):
            records = await backend.read_shard_feed(shard)
            positions = [r.position for r in records]
            assert positions == sorted(set(positions))  # increasing within the shard
            assert await backend.shard_feed_bounds(shard) == (0, positions[-1] if records else 0)
            for r in records:
                assert backend.layout.shard_of(r.agent_id) == shard
                seen.setdefault(r.agent_id, []).append(r.event.seq)
        assert seen == {agent: [1, 2] for agent in agents}
        with pytest.raises(CapabilityUnsupported, match="4 shards"):
            await backend.read_feed(0)
        with pytest.raises(ConfigurationError, match=r"shard must be in 0\.\.3"):
            await backend.read_shard_feed(4)
        async with StateStore(backend) as store:
            # the store-wide subscription follows the four feeds (docs/feed.md)
            for agent in agents:
                await store.save(f"app/{agent}", {"n": 1})
            sub = store.subscribe(agent_prefix="app/", stop_at_head=True)
            got = sorted([(c.agent_id, c.seq) async for c in sub])
            assert got == sorted((f"app/{agent}", 1) for agent in agents)
            assert sub.cursor.shards == 4
            with pytest.raises(CapabilityUnsupported):
                await store.feed_bounds()  # one (floor, head) cannot describe 4 feeds
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+cluster://127.0.0.1:7000,127.0.0.1:x/", "a cluster node is host:port"),
        ("redis+cluster://127.0.0.1:7000/3", "only database 0"),
        ("redis+cluster://127.0.0.1:7000/?shards=many", "shards must be a number"),
        ("redis+cluster://127.0.0.1:7000/?shards=0", "shards must be between 1 and 4096"),
        ("redis+cluster://127.0.0.1:7000/?prefix=a{b}:", "cannot contain"),
        ("redis+cluster://127.0.0.1:7000/?wait_replicas=-1", "wait_replicas must be >= 0"),
        ("redis+cluster://127.0.0.1:7000/?bogus=1", "unknown Redis URL option 'bogus'"),
    ],
)
def test_bad_cluster_urls_are_refused_naming_the_part(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_backend(url)


def test_cluster_url_masks_the_password() -> None:
    with pytest.raises(ConfigurationError) as info:
        open_backend("redis+cluster://:hunter2@127.0.0.1:7000,127.0.0.1:x/")
    assert "hunter2" not in str(info.value)
