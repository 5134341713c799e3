"""What Redis keeps after its agents are deleted, and what ``drop_all`` reports.

Deleting every agent leaves, by design: each delete's receipt (``d:<token>``, expiring
once no retry of it can come), each lease hash (kept so a fencing token never goes
back, as every engine keeps its lease rows), and the store's own keys (index sentinels,
change feed, identity marker). ``drop_all`` used to return how many Redis KEYS it
deleted — hundreds for a store whose agents were all deleted, read as a leak — while
SQLite and memory return how many agents there were. It now returns the agents too.
"""

from __future__ import annotations

import pytest

pytest.importorskip("redis")

import redis

from statekeeper.backends.redis import RedisBackend
from statekeeper.testing import request

from ._services import REDIS_URL


def _keys(prefix: str) -> list[bytes]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return list(client.scan_iter(match=prefix + "*", count=1000))
    finally:
        client.close()


def _kind(key: bytes, prefix: str) -> bytes:
    """``key`` without the prefix and a shard's ``{tag}``."""
    rest = key[len(prefix) :]
    return rest[rest.find(b"}") + 1 :] if rest[:1] == b"{" else rest


@pytest.mark.parametrize("shards", [None, 3], ids=["plain", "sharded"])
async def test_drop_all_counts_agents_not_the_keys_deletes_leave(
    prefix: str, shards: int | None
) -> None:
    backend = RedisBackend(REDIS_URL, prefix=prefix, shards=shards)
    try:
        for i in range(12):
            await backend.append(request(f"gone-{i}", 0, 2))
            lease = await backend.acquire_lease(f"gone-{i}", "worker", 30)
            await backend.release_lease(f"gone-{i}", "worker", lease.token)
        for i in range(12):
            assert await backend.delete_agent(f"gone-{i}") is True
        await backend.append(request("kept-1", 0, 1))
        await backend.append(request("kept/2", 0, 3))
        left = _keys(prefix)
        assert len(left) > 2 * 12  # receipts and lease hashes: what used to be counted
        assert await backend.drop_all() == 2  # the agents there were
        # everything went (receipts and leases too) but the new store's own markers
        kinds = {_kind(key, prefix) for key in _keys(prefix)}
        assert kinds <= {b"epoch", b"agents", b"feed", b"feed:n", b"feed:floor", b"meta"}
    finally:
        await backend.close()
