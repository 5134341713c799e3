"""A Redis server that evicts any key when full (``maxmemory`` with an ``allkeys-*``
policy) is refused as a store of record: its evictions lost acknowledged agents without
an error (``get`` answered None, ``count_agents`` left them out). A hot tier, or a
backend opened with ``evictable=1``, still uses it; ``noeviction`` and ``volatile-*``
servers are used as before."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import ConfigurationError
from statekeeper.store import StateStore

from ._services import PrivateRedis, private_redis

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateRedis]:
    with private_redis() as started:
        yield started


def _configure(server: PrivateRedis, policy: str, maxmemory: str = "64mb") -> None:
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        client.flushall()
        client.config_set("maxmemory", maxmemory)
        client.config_set("maxmemory-policy", policy)
    finally:
        client.close()


def _keys(server: PrivateRedis) -> int:
    import redis

    client = redis.Redis.from_url(server.url)
    try:
        return int(client.dbsize())
    finally:
        client.close()


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
async def test_a_server_evicting_any_key_is_refused_before_anything_is_written(
    server: PrivateRedis, policy: str
) -> None:
    _configure(server, policy)
    async with StateStore(server.url) as store:
        with pytest.raises(ConfigurationError, match=f"maxmemory-policy {policy}") as caught:
            await store.save("a", {"n": 1})
    assert "evictable=1" in str(caught.value)
    assert _keys(server) == 0


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru"])
async def test_a_server_that_keeps_keys_without_expiry_is_used(
    server: PrivateRedis, policy: str
) -> None:
    _configure(server, policy)
    async with StateStore(server.url) as store:
        await store.save("a", {"n": 1})
        assert (await store.load("a")).data == {"n": 1}


async def test_an_evicting_server_without_a_memory_limit_is_used(server: PrivateRedis) -> None:
    _configure(server, "allkeys-lru", maxmemory="0")  # no limit: nothing is evicted
    async with StateStore(server.url) as store:
        await store.save("a", {"n": 1})
        assert (await store.load("a")).data == {"n": 1}


async def test_a_cache_opened_evictable_uses_an_evicting_server(server: PrivateRedis) -> None:
    _configure(server, "allkeys-lru")
    async with StateStore(server.url + "?evictable=1&ttl=60") as store:
        await store.save("a", {"n": 1})
        assert (await store.load("a")).data == {"n": 1}


async def test_a_hot_tier_on_an_evicting_server_is_used(
    server: PrivateRedis, tmp_path: Path
) -> None:
    from statekeeper.backends.redis import RedisBackend

    _configure(server, "allkeys-lru")
    hot = RedisBackend(server.url, retry_timeout=0)
    backend = TieredBackend(SQLiteBackend(tmp_path / "durable.db"), hot)
    async with StateStore(backend) as store:
        await store.save("a", {"n": 1})
        assert (await store.load("a")).data == {"n": 1}
    assert backend.stats["hot_failures"] == 0
    assert _keys(server) > 0  # the hot copy was written


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")
async def test_a_cluster_with_one_evicting_master_is_refused() -> None:
    import redis

    from statekeeper.backends.redis import RedisBackend
    from statekeeper.testing.redis_cluster import LocalRedisCluster

    with LocalRedisCluster(masters=3, replicas=0) as cluster:
        client = redis.Redis(port=cluster.ports[-1])  # one master of three
        try:
            client.config_set("maxmemory", "64mb")
            client.config_set("maxmemory-policy", "allkeys-lfu")
        finally:
            client.close()
        backend = RedisBackend(cluster.url)
        try:
            with pytest.raises(ConfigurationError, match="allkeys-lfu"):
                await backend.open()
        finally:
            await backend.close()
