"""A Session's TTL is honoured on every backend (issue 14): Redis keys expire with
the session (the engine's TTL follows ``last_seen + ttl`` at every write); on every
engine an expired session reads as gone, and ``expire`` sweeps expired ones."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import AgentNotFound
from statekeeper.schema import TypedStates
from statekeeper.schema.expiry import expire, expires_at, is_expired
from statekeeper.schema.structures import Session

from ..backends._services import REDIS_URL, delete_prefix, namespace, require_redis


def _url(engine: str, tmp_path: Path) -> str:
    if engine == "memory":
        return "memory://"
    if engine == "sqlite":
        return f"sqlite:///{tmp_path / 's.db'}"
    require_redis()
    return f"{REDIS_URL}?prefix={namespace(tmp_path, 'sk_ttl_')}:"


def _session(age: float, ttl: float | None = 60.0) -> Session:
    now = time.time()
    return Session(user_id="u-1", started_at=now - age, last_seen=now - age, ttl=ttl)


@pytest.mark.parametrize("engine", ["memory", "sqlite", "redis"])
async def test_an_expired_session_reads_as_gone_on_every_engine(
    tmp_path: Path, engine: str
) -> None:
    url = _url(engine, tmp_path)
    try:
        async with StateStore(url) as store:
            sessions = TypedStates(store, Session)
            await sessions.save("live", _session(age=0))
            await sessions.save("forever", _session(age=10**6, ttl=None))
            await store.save("plain", {"ttl": 1, "last_seen": 0})  # not a Session
            # written by old code that did not tie the TTL: stored as is, expired
            await store.save("old", {"$model": "statekeeper.Session",
                                     **_session(age=120).model_dump(mode="json")})  # fmt: skip
            assert await sessions.get("live") is not None
            assert await sessions.get("forever") is not None
            assert await sessions.get("old") is None
            with pytest.raises(AgentNotFound):
                await sessions.load("old")
            assert (await sessions.load_snapshot("old", at_seq=1)).state.user_id == "u-1"
            # opening it starts a new session: the expired one is gone
            agent = await store.agent("old", model=Session, initial_state=_session(age=0))
            assert not is_expired(agent.state) and agent.seq == 1
            await sessions.save("stale", _session(age=30, ttl=60))
            assert await expire(store, Session, now=time.time() + 45) == ["stale"]
            assert await store.get("stale") is None
            assert {i.agent_id async for i in store.iter_agents()} == {
                "live", "forever", "plain", "old"
            }  # fmt: skip
    finally:
        if engine == "redis":
            delete_prefix(url.split("prefix=")[1])


async def test_on_redis_the_key_expires_with_the_session(tmp_path: Path) -> None:
    require_redis()
    import redis.asyncio as aioredis

    prefix = namespace(tmp_path, "sk_ttl_") + ":"
    client = aioredis.Redis.from_url(REDIS_URL)
    key = f"{prefix}a:s-1".encode()
    try:
        async with StateStore(f"{REDIS_URL}?prefix={prefix}") as store:
            begun = _session(age=0)
            begun.started_at -= 100
            agent = await store.agent("s-1", model=Session, initial_state=begun)
            left = await client.pttl(key)
            assert 50_000 < left <= 60_000  # last_seen + 60 s
            # a session seen 50 s ago has 10 s left; touching it gives it 60 s again
            agent.state.last_seen = time.time() - 50
            await agent.save()
            assert 0 < await client.pttl(key) <= 10_000
            agent.state.touch()
            await agent.save()
            assert await client.pttl(key) > 50_000
            agent.state.ttl = None  # no expiry: the key persists
            await agent.save()
            assert await client.pttl(key) == -1
            agent.state.ttl = 60.0
            await agent.save()
            assert await client.pttl(key) > 0
            # a session written already expired is removed by Redis itself
            sessions = TypedStates(store, Session)
            await sessions.save("s-2", _session(age=120))
            gone = f"{prefix}a:s-2".encode()
            deadline = time.monotonic() + 30
            while await client.exists(gone) and time.monotonic() < deadline:
                pass  # (each EXISTS is a round trip: Redis expires the key on access)
            assert not await client.exists(gone)
            assert await sessions.get("s-2") is None
    finally:
        await client.aclose()
        delete_prefix(prefix)


async def test_on_redis_a_session_without_expiry_keeps_the_stores_default_ttl(
    tmp_path: Path,
) -> None:
    require_redis()
    import redis.asyncio as aioredis

    prefix = namespace(tmp_path, "sk_ttl_") + ":"
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with StateStore(f"{REDIS_URL}?prefix={prefix}&ttl=3600") as store:
            await TypedStates(store, Session).save("s", _session(age=0, ttl=None))
            assert 3_500_000 < await client.pttl(f"{prefix}a:s".encode()) <= 3_600_000
    finally:
        await client.aclose()
        delete_prefix(prefix)


def test_expires_at_of_models_that_do_not_expire() -> None:
    from .apps import SupportV1

    assert expires_at(SupportV1(customer_name="x")) is None
    assert not is_expired(SupportV1(customer_name="x"))
    assert expires_at(_session(age=0, ttl=None)) is None


async def test_on_redis_a_namespaced_stores_session_key_gets_its_ttl(tmp_path: Path) -> None:
    """Through a store opened in a namespace, the TTL lands on the agent's own key
    (``acme/s``), not on the relative id's (``s``): was set on a key that does not
    exist, so the session never expired in Redis."""
    require_redis()
    import redis.asyncio as aioredis

    prefix = namespace(tmp_path, "sk_ttl_") + ":"
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with StateStore(f"{REDIS_URL}?prefix={prefix}", namespace="acme") as store:
            await TypedStates(store, Session).save("s", _session(age=0))
            assert 50_000 < await client.pttl(f"{prefix}a:acme/s".encode()) <= 60_000
            assert not await client.exists(f"{prefix}a:s".encode())
    finally:
        await client.aclose()
        delete_prefix(prefix)
