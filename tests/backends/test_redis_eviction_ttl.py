"""A store whose agents expire (``ttl=``, given or recorded) on a server that evicts
keys with an expiry when full (``maxmemory`` with a ``volatile-*`` policy) is refused
as a store of record: such a server evicted an agent a moment after its save, with
nearly all of its ttl left, and the store took it for expired — ``AgentNotFound``, and
the next save started it afresh at seq 1, its history gone without an error. A store
without a ttl (nothing of its agents expires), a hot tier and an ``evictable=1`` cache
still use such a server. Private server (the test sets its memory policy)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from statekeeper.backends import open_backend
from statekeeper.errors import ConfigurationError
from statekeeper.store import StateStore

from ._services import PrivateRedis, private_redis

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateRedis]:
    with private_redis() as started:
        yield started


def _configure(server: PrivateRedis, policy: str) -> None:
    client = redis.Redis.from_url(server.url)
    try:
        client.flushall()
        client.config_set("maxmemory", "0")
        client.config_set("maxmemory-policy", policy)
    finally:
        client.close()


def _limit(server: PrivateRedis, policy: str, maxmemory: str = "64mb") -> None:
    """Set the memory policy, keeping the data."""
    client = redis.Redis.from_url(server.url)
    try:
        client.config_set("maxmemory-policy", policy)
        client.config_set("maxmemory", maxmemory)
    finally:
        client.close()


@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-ttl", "volatile-random"])
async def test_a_ttl_store_on_a_server_evicting_keys_with_an_expiry_is_refused(
    server: PrivateRedis, policy: str
) -> None:
    _configure(server, "noeviction")
    async with StateStore(f"{server.url}?prefix=t:&ttl=86400") as store:
        await store.save("a", {"n": 1})  # records the store's ttl
    _limit(server, policy)
    for url in (f"{server.url}?prefix=n:&ttl=86400", f"{server.url}?prefix=t:"):
        async with StateStore(url) as store:  # a ttl given, and a ttl recorded
            with pytest.raises(ConfigurationError, match=f"maxmemory-policy {policy}") as caught:
                await store.save("b", {"n": 1})
            assert "before its ttl" in str(caught.value)


async def test_a_ttl_store_is_refused_after_a_reconnect_to_such_a_server(
    server: PrivateRedis,
) -> None:
    _configure(server, "noeviction")
    async with StateStore(f"{server.url}?prefix=t:&ttl=86400&retry_timeout=30") as store:
        await store.save("a", {"n": 1})
        server.kill()
        server.start()  # (a server restarted with another policy)
        _limit(server, "volatile-lru")
        with pytest.raises(ConfigurationError, match="volatile-lru"):
            await store.load("a")


@pytest.mark.parametrize("cache", ["evictable=1", "no ttl"])
async def test_a_store_without_a_ttl_or_a_cache_still_uses_it(
    server: PrivateRedis, cache: str
) -> None:
    _configure(server, "volatile-lru")
    _limit(server, "volatile-lru")
    url = f"{server.url}?prefix=c:" + ("&evictable=1&ttl=60" if cache == "evictable=1" else "")
    async with StateStore(open_backend(url)) as store:
        await store.save("a", {"n": 1})
        assert (await store.load("a")).data == {"n": 1}


async def test_an_agents_own_ttl_on_such_a_server_is_refused(server: PrivateRedis) -> None:
    """A store without a ttl opens on a ``volatile-*`` server (nothing expires); an
    agent given a ttl of its own (``set_ttl``) would be evicted as soon as the server is
    full, and taken for expired: refused, the agent left without an expiry."""
    _configure(server, "volatile-lru")
    _limit(server, "volatile-lru")
    backend = open_backend(f"{server.url}?prefix=o:")
    async with StateStore(backend) as store:
        await store.save("a", {"n": 1})
        with pytest.raises(ConfigurationError, match="maxmemory-policy volatile-lru"):
            await backend.set_ttl("a", 3600)
        await backend.set_ttl("a", None)  # (taking an expiry off is no risk)
        assert (await store.load("a")).data == {"n": 1}
    client = redis.Redis.from_url(server.url)
    try:
        assert all(client.ttl(key) == -1 for key in client.keys("o:*"))
    finally:
        client.close()


async def test_a_store_ttl_changed_on_such_a_server_is_refused(server: PrivateRedis) -> None:
    """``change_store_ttl`` gives every agent an expiry: refused on a ``volatile-*``
    server as ``ttl=`` is at open, nothing recorded (the next open has no ttl)."""
    _configure(server, "volatile-ttl")
    _limit(server, "volatile-ttl")
    backend = open_backend(f"{server.url}?prefix=c2:")
    async with StateStore(backend) as store:
        await store.save("a", {"n": 1})
        with pytest.raises(ConfigurationError, match="before its ttl"):
            await backend.change_store_ttl(3600)  # type: ignore[attr-defined]
    async with StateStore(f"{server.url}?prefix=c2:") as store:
        await store.save("b", {"n": 1})  # (still a store without a ttl)
        assert store.backend.ttl is None  # type: ignore[attr-defined]


async def test_agents_given_their_own_ttl_earlier_are_refused_at_open(
    server: PrivateRedis,
) -> None:
    """The check at open knew only the store's ttl: a store without one whose agents
    were given a ttl of their own (``set_ttl``, on a ``noeviction`` server) opened on a
    server since set to a ``volatile-*`` policy, and those agents were evicted as soon
    as it was full, taken for expired, without an error. Their own-ttl marks (in the
    agent index) are looked for at open: refused as a ttl store is; once every agent's
    own ttl is taken off, the store opens there again."""
    _configure(server, "noeviction")
    url = f"{server.url}?prefix=own:"
    backend = open_backend(url)
    async with StateStore(backend) as store:
        for agent_id in ("a", "b"):
            await store.save(agent_id, {"n": 1})
        assert await backend.set_ttl("a", 3600)
    _limit(server, "volatile-lru")
    for _ in range(2):  # (refused each time it is opened)
        async with StateStore(url) as store:
            with pytest.raises(ConfigurationError, match="maxmemory-policy volatile-lru") as caught:
                await store.save("c", {"n": 1})
            assert "set_ttl" in str(caught.value)
    _limit(server, "noeviction")
    backend = open_backend(url)
    async with StateStore(backend) as store:
        assert await backend.set_ttl("a", None)
    _limit(server, "volatile-lru")
    async with StateStore(url) as store:
        await store.save("c", {"n": 1})
        assert (await store.load("a")).data == {"n": 1}
