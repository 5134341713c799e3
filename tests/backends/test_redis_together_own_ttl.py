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


def _shorten(backend: RedisBackend, agent_id: str) -> None:
    """The agent's keys given 100 s left of their TTL (as an agent unwritten for a while)."""
    keys = backend.layout.agent(agent_id)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.pexpire(keys.hash, 100_000)
        client.pexpire(keys.snapshots, 100_000)
    finally:
        client.close()


@pytest.mark.parametrize("how", ["prune", "append_together"])
async def test_a_prune_refreshes_the_agents_ttl_either_way(backend: RedisBackend, how: str) -> None:
    """A prune is a write: the agent's TTL starts again (docs/backends.md: keys expire
    "after that long without a write"), by ``prune`` as by ``append_together``. Before:
    together.lua refreshed it, prune.lua left it running."""
    await backend.append(request("a", 0, 4, snap_at=2))
    _shorten(backend, "a")
    if how == "prune":
        await backend.prune("a", 2)
    else:
        await backend.append_together([], [StreamChange("a", prune_to=2)])
    assert all(ms > 3_000_000 for ms in _pttl(backend, "a"))  # (before, prune: <= 100 s)
    assert [e.seq for e in await backend.read("a")] == [3, 4]  # (a read touches: after)


async def test_a_guarded_rename_leaves_the_stores_own_stream_unexpiring(
    backend: RedisBackend,
) -> None:
    """``rename_keys(..., guard=...)`` (a tiered rename's marker check) fences the
    marker in its script and gives it its own TTL: none."""
    await backend.append(request("a", 0, key="k1"))
    await backend.append(request(MARKER, 0, snap_at=1))
    assert await backend.rename_keys("a", [("k1", "n1")], guard=await _fence(backend)) == 1
    assert [k for k, _, _ in await backend.idempotency_keys("a")] == ["n1"]
    assert await backend.head_tag(MARKER) == (1, b"f" * 16)  # (fenced)
    assert _pttl(backend, MARKER) == [-1, -1]
