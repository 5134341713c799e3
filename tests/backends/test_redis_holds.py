"""A legal hold stops Redis's own expiry (issue 15: ``ttl=`` expires an agent's keys on
the server, where no purge check runs): the keys of a held agent never expire — also
those of one created later under a held namespace, one saved again, one given its own
TTL (schema expiry) — and a release lets the TTL apply again at once. On the real
server, each store under its own key prefix; every wait is for a condition on the
server, never a duration."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis.asyncio as aioredis

from statekeeper import StateStore
from statekeeper.codec.keys import Keyring
from statekeeper.governance.holds import add_hold, remove_hold

from ._services import REDIS_URL, delete_prefix, namespace, require_redis

TTL = 1.0  # seconds: long enough to check every key before any can expire


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path) + ":"
    try:
        yield name
    finally:
        delete_prefix(name)


async def _gone(raw: aioredis.Redis, key: str, limit: float = 30.0) -> None:
    """Wait until ``key`` has expired on the server (a condition, polled)."""
    deadline = time.monotonic() + limit
    while await raw.exists(key):
        assert time.monotonic() < deadline, f"{key} did not expire"
        await asyncio.sleep(0.05)


async def test_a_held_agent_never_expires_and_a_release_restores_its_ttl(prefix: str) -> None:
    url = f"{REDIS_URL}?prefix={prefix}&ttl={TTL}"
    raw = aioredis.Redis.from_url(REDIS_URL)
    keys = Keyring({"k1": bytes(range(32))})
    try:
        async with StateStore(url, keyring=keys) as store:
            await store.save("acme/alice", {"n": 1})
            await store.save("legal/x", {"n": 1})
            assert await add_hold(store, "acme/alice", "Smith v. Acme")
            assert await add_hold(store, "legal/*", "matter 7")
            await store.save("acme/alice", {"n": 2})  # a save of a held agent: no expiry
            await store.save("legal/y", {"n": 1})  # created under a held namespace
            await store.backend.set_ttl("legal/x", 0.05)  # its own TTL (schema expiry)
            await store.save("acme/bob", {"n": 1})  # written last: expires first
            for held in ("acme/alice", "legal/x", "legal/y"):
                assert await raw.pttl(f"{prefix}a:{held}") == -1, held  # no expiry set
            assert await raw.pttl(f"{prefix}a:acme/bob") > 0
            # bob, written after every held agent, expires: each of them was due before
            await _gone(raw, f"{prefix}a:acme/bob")
            for held in ("acme/alice", "legal/x", "legal/y"):
                assert await raw.exists(f"{prefix}a:{held}"), held
            assert (await store.load("acme/alice")).data == {"n": 2}
            # released: the TTL applies again at once (legal/x: its own, recorded)
            assert await remove_hold(store, "acme/alice", "case closed")
            assert await remove_hold(store, "legal/*", "settled")
            assert 0 < await raw.pttl(f"{prefix}a:acme/alice") <= TTL * 1000
            assert 0 < await raw.pttl(f"{prefix}a:legal/y") <= TTL * 1000
            await _gone(raw, f"{prefix}a:legal/x")
            await _gone(raw, f"{prefix}a:acme/alice")
    finally:
        await raw.aclose()


async def test_one_hold_released_keeps_an_agent_another_hold_covers(prefix: str) -> None:
    url = f"{REDIS_URL}?prefix={prefix}&ttl={TTL}"
    raw = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with StateStore(url) as store:
            await store.save("legal/x", {"n": 1})
            await add_hold(store, "legal/x", "matter 7")
            await add_hold(store, "legal/*", "matter 8")
            await remove_hold(store, "legal/x", "closed")
            assert await raw.pttl(f"{prefix}a:legal/x") == -1  # legal/* still holds it
            # a second store (another process's view) saving it sets no expiry either
            async with StateStore(url) as other:
                await other.save("legal/x", {"n": 2})
            assert await raw.pttl(f"{prefix}a:legal/x") == -1
            await remove_hold(store, "legal/*", "closed")
            assert await raw.pttl(f"{prefix}a:legal/x") > 0
    finally:
        await raw.aclose()
