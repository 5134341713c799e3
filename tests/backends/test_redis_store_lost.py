"""A Redis store that loses its data behind the backend's back — ``FLUSHALL``,
``FLUSHDB``, its keys deleted, the server restarted without persistence, a cluster
master emptied — raises :class:`~statekeeper.errors.StoreLost` on the first operation
after the loss (saves, loads, leases, the change feed), writing nothing. Before, a
cached agent's next save started it over at seq 1 (its history gone, no error) and a
feed subscriber took the events of the store made again in its place, at positions it
believed it had passed, for the ones that followed them.

Every test runs on a PRIVATE ``redis-server`` (or cluster): they flush it.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("redis")

import redis

from statekeeper import StateStore
from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import AgentNotFound, ConfigurationError, StorageError, StoreLost
from statekeeper.testing import request

from ._services import PrivateRedis, private_redis

pytestmark = pytest.mark.slow


@pytest.fixture
def server() -> Iterator[PrivateRedis]:
    with private_redis() as started:
        yield started


def _raw(server: PrivateRedis) -> redis.Redis:
    return redis.Redis.from_url(server.url)


def _lose(server: PrivateRedis, how: str) -> None:
    """Empty the store ``how`` a server loses it."""
    if how == "restart":  # no persistence: the server comes back empty
        server.kill()
        server.start()
        return
    client = _raw(server)
    try:
        if how == "flushall":
            client.flushall()
        elif how == "flushdb":
            client.flushdb()
        else:  # someone deleted the store's keys
            keys = list(client.scan_iter(match="statekeeper:*"))
            client.delete(*keys)
    finally:
        client.close()


def _dbsize(server: PrivateRedis) -> int:
    client = _raw(server)
    try:
        return int(client.dbsize())
    finally:
        client.close()


@pytest.mark.parametrize("how", ["flushall", "flushdb", "deleted", "restart"])
async def test_a_cached_agent_is_not_started_over_after_the_store_is_emptied(
    server: PrivateRedis, how: str
) -> None:
    async with StateStore(server.url + "?retry_timeout=10") as store:
        for n in range(1, 4):
            await store.save("a", {"n": n})
        _lose(server, how)
        with pytest.raises(StoreLost) as raised:
            await store.save("a", {"n": 4})  # main: stored as seq 1, history gone
        assert _dbsize(server) == 0  # nothing written
        assert isinstance(raised.value, StorageError) and raised.value.shard is None
        assert "prefix 'statekeeper:'" in str(raised.value)
        with pytest.raises(StoreLost):
            await store.load("a")
        with pytest.raises(StoreLost):  # a new agent too: the store it belongs to is gone
            await store.save("b", {"n": 1})
        assert _dbsize(server) == 0
    async with StateStore(server.url) as again:  # opened again: what the server holds
        with pytest.raises(AgentNotFound):
            await again.load("a")
        assert (await again.save("a", {"n": 1})).last_seq == 1


async def test_a_store_created_again_by_another_process_is_not_taken_for_ours(
    server: PrivateRedis,
) -> None:
    async with StateStore(server.url) as store:
        await store.save("a", {"n": 1})
        await store.save("a", {"n": 2})
        _lose(server, "flushall")
        async with StateStore(server.url) as other:  # a new store under the same prefix
            await other.save("a", {"n": 9})
        with pytest.raises(StoreLost, match="created again"):
            await store.save("a", {"n": 3})  # main: a conflict with head 1, then...
        with pytest.raises(StoreLost):
            await store.history("a").__anext__()
        async with StateStore(server.url) as again:
            assert (await again.load("a")).data == {"n": 9}  # the other store's, untouched


async def test_every_kind_of_operation_raises_after_the_loss(server: PrivateRedis) -> None:
    backend = RedisBackend(server.url)
    try:
        await backend.append(request("a", 0, 3, key="k", snap_at=2))
        lease = await backend.acquire_lease("a", "me", 30)
        _lose(server, "flushall")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "append": lambda: backend.append(request("a", 3)),
            "append_batch": lambda: backend.append_batch([request("a", 3)]),
            "read": lambda: backend.read("a"),
            "read_state": lambda: backend.read_state("a"),
            "latest_snapshot": lambda: backend.latest_snapshot("a"),
            "seq_at": lambda: backend.seq_at("a", 1e12),
            "head": lambda: backend.head("a"),
            "head_tag": lambda: backend.head_tag("a"),
            "lookup_key": lambda: backend.lookup_key("a", "k"),
            "idempotency_keys": lambda: backend.idempotency_keys("a"),
            "list_agents": lambda: backend.list_agents(),
            "count_agents": lambda: backend.count_agents(),
            "delete_agent": lambda: backend.delete_agent("a"),
            "acquire_lease": lambda: backend.acquire_lease("a", "other", 30),
            "renew_lease": lambda: backend.renew_lease("a", "me", lease.token, 30),
            "release_lease": lambda: backend.release_lease("a", "me", lease.token),
            "get_lease": lambda: backend.get_lease("a"),
            "read_feed": lambda: backend.read_feed(0),
            "feed_bounds": lambda: backend.feed_bounds(),
            "trim_feed": lambda: backend.trim_feed(1),
        }
        for name, call in calls.items():
            result = call()
            with pytest.raises(StoreLost):
                out = await result
                if isinstance(out, list) and out and isinstance(out[0], BaseException):
                    raise out[0]  # append_batch answers per request
                pytest.fail(f"{name} answered {out!r}")
        assert _dbsize(server) == 0  # none of them wrote anything
    finally:
        await backend.close()


async def test_a_feed_subscriber_is_not_handed_the_next_store_s_events(
    server: PrivateRedis,
) -> None:
    async with StateStore(server.url) as store:
        for agent in ("a", "b", "c"):
            await store.save(agent, {"n": 1})
        sub = store.subscribe()
        seen = [await anext(sub) for _ in range(3)]
        assert [e.position for e in seen] == [1, 2, 3]
        _lose(server, "flushall")
        async with StateStore(server.url) as other:  # the feed counter starts over
            for agent in ("x", "y", "z", "w", "v"):
                await other.save(agent, {"n": 1})
        # main: position 4 and 5 of the new feed ("w", "v"), 1-3 ("x", "y", "z") skipped
        with pytest.raises(StoreLost):
            await anext(sub)


async def test_a_catch_up_after_the_loss_raises_instead_of_ending_short(
    server: PrivateRedis,
) -> None:
    async with StateStore(server.url) as store:
        for agent in ("a", "b"):
            await store.save(agent, {"n": 1})
        _lose(server, "flushall")
        with pytest.raises(StoreLost):
            [e async for e in store.subscribe(stop_at_head=True)]


async def test_the_likely_cause_is_named_when_the_server_now_evicts_any_key(
    server: PrivateRedis,
) -> None:
    async with StateStore(server.url) as store:
        await store.save("a", {"n": 1})
        client = _raw(server)
        try:
            client.config_set("maxmemory", "64mb")
            client.config_set("maxmemory-policy", "allkeys-random")
            health = await store.backend.health()
            assert not health.ok and "allkeys-random" in health.detail["error"]
            client.delete("statekeeper:epoch")  # evicted, as allkeys-random may
        finally:
            client.close()
        with pytest.raises(StoreLost, match=r"now evicts any key when full .*allkeys-random"):
            await store.load("a")


async def test_a_reconnect_checks_the_eviction_policy_again(server: PrivateRedis) -> None:
    backend = RedisBackend(server.url, retry_timeout=10)
    try:
        await backend.append(request("a", 0))
        client = _raw(server)
        try:
            client.config_set("maxmemory", "64mb")
            client.config_set("maxmemory-policy", "allkeys-lru")
            client.client_kill_filter(_type="normal", skipme=True)  # the backend's connections
        finally:
            client.close()
        with pytest.raises(ConfigurationError, match="allkeys-lru"):
            await backend.head("a")
    finally:
        await backend.close()


async def test_a_copy_that_may_be_lost_is_not_checked(server: PrivateRedis) -> None:
    backend = RedisBackend(server.url, evictable=True)  # a hot tier's, or a cache's
    try:
        await backend.append(request("a", 0, 2))
        _lose(server, "flushall")
        assert await backend.head("a") == 0
        await backend.append(request("a", 0))
        assert _raw(server).exists("statekeeper:epoch") == 0  # no marker kept
    finally:
        await backend.close()


async def test_drop_all_by_the_backend_itself_is_not_a_loss(server: PrivateRedis) -> None:
    backend = RedisBackend(server.url)
    peer = RedisBackend(server.url)
    try:
        await backend.append(request("a", 0, 2))
        assert await peer.head("a") == 2
        await backend.drop_all()
        assert await backend.head("a") == 0
        await backend.append(request("a", 0))
        with pytest.raises(StoreLost):  # another process's view is gone, though
            await peer.head("a")
    finally:
        await backend.close()
        await peer.close()


async def test_a_read_only_backend_checks_the_marker_the_writer_made(
    server: PrivateRedis,
) -> None:
    writer = RedisBackend(server.url)
    reader = RedisBackend(server.url, readonly=True)
    try:
        await writer.append(request("a", 0, 2))
        assert await reader.head("a") == 2
        _lose(server, "flushall")
        with pytest.raises(StoreLost):
            await reader.read("a")
        with pytest.raises(StoreLost):
            await reader.read_feed(0)
    finally:
        await writer.close()
        await reader.close()


@pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
    reason="needs redis-server and redis-cli",
)
async def test_a_cluster_master_emptied_is_a_loss_of_its_shards_only() -> None:
    from statekeeper.testing.redis_cluster import LocalRedisCluster

    with LocalRedisCluster(masters=3, replicas=0) as cluster:
        async with StateStore(cluster.url) as store:
            backend = store.backend
            assert isinstance(backend, RedisBackend)
            agents = [f"agent-{n}" for n in range(24)]
            for agent in agents:
                await store.save(agent, {"n": 1})
            emptied = cluster.ports[0]
            client = redis.Redis(port=emptied)
            try:
                client.flushall()
            finally:
                client.close()
            raw = backend._client
            lost = [
                a
                for a in agents
                if raw.get_node_from_key(backend.layout.agent(a).hash).port == emptied  # type: ignore[union-attr]
            ]
            kept = [a for a in agents if a not in lost]
            assert lost and kept
            for agent in lost:
                with pytest.raises(StoreLost) as raised:
                    await store.save(agent, {"n": 2})
                assert raised.value.shard == backend.layout.shard_of(agent)
            for agent in kept:
                assert (await store.save(agent, {"n": 2})).last_seq == 2
            with pytest.raises(StoreLost):
                await backend.shard_feed_bounds_all()
