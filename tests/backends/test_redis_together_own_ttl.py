"""A Redis ``append_together`` change gives each stream it writes its own TTL: the
store's own streams (``\\x01sk-`` ids: a tiered store's demoted-agent marker, the
audit log) never expire, as :meth:`RedisBackend._ttl_of` has it for every other script.

Before, together.lua touched every change's stream with the store's ``ttl=``: a
tiered prune or rewrite, committed with its check of the agent's cold marker (the
marker's claim given another head tag), set an expiry on that marker — the record
that a demoted agent's data is in the cold tier, or that a demotion holds it. On the
shared server under the test's own key prefix; no waiting on an expiry (the TTL is
read with ``PTTL``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis

from statekeeper.backends.redis import RedisBackend
from statekeeper.records import AppendRequest, RewriteRequest, StreamChange
from statekeeper.testing._contract import request

from ._services import REDIS_URL, delete_prefix, namespace, require_redis

MARKER = "\x01sk-cold/a"  # (a tiered store's marker id: one of the store's own streams)


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path, "sk_tttl_") + ":"
    yield name
    delete_prefix(name)


@pytest.fixture
async def backend(prefix: str) -> AsyncIterator[RedisBackend]:
    found = RedisBackend(REDIS_URL, prefix=prefix, ttl=3600)
    await found.open()
    try:
        yield found
    finally:
        await found.close()


def _pttl(backend: RedisBackend, agent_id: str) -> list[int]:
    """The PTTL of the agent's hash and snapshot keys (-1: no expiry)."""
    keys = backend.layout.agent(agent_id)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return [int(client.pttl(keys.hash)), int(client.pttl(keys.snapshots))]
    finally:
        client.close()


async def _fence(backend: RedisBackend) -> StreamChange:
    head, tag = await backend.head_tag(MARKER)
    return StreamChange(MARKER, rewrite=RewriteRequest(MARKER, head, tag, head_tag=b"f" * 16))


async def test_a_change_alone_leaves_the_stores_own_stream_unexpiring(
    backend: RedisBackend,
) -> None:
    await backend.append(request("a", 0, 4, snap_at=2))
    await backend.append(request(MARKER, 0, snap_at=1))
    assert _pttl(backend, MARKER)[0] == -1  # (its append: no expiry)
    prune = StreamChange("a", prune_to=2)
    assert await backend.append_together([], [prune, await _fence(backend)]) == []
    assert [e.seq for e in await backend.read("a")] == [3, 4]  # (pruned)
    assert await backend.head_tag(MARKER) == (1, b"f" * 16)  # (fenced)
    assert _pttl(backend, MARKER) == [-1, -1]  # main: the store's ttl, 3600 s
    assert all(ms > 0 for ms in _pttl(backend, "a"))  # (an agent's: the store's)


async def test_a_change_with_appends_leaves_the_stores_own_stream_unexpiring(
    backend: RedisBackend,
) -> None:
    await backend.append(request(MARKER, 0, snap_at=1))
    append: AppendRequest = request("b", 0, 2)
    assert len(await backend.append_together([append], [await _fence(backend)])) == 1
    assert _pttl(backend, MARKER) == [-1, -1]  # main: the store's ttl, 3600 s
    assert _pttl(backend, "b")[0] > 0  # (an agent's: the store's; no snapshot key)
