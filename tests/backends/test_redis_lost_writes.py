"""Every Redis script that writes to an agent finds the agent lost (its hash evicted,
deleted by hand or expired outside the store's ttl while the agent index lists it):
prune, rewrite, set_ttl and append_from_base raise
:class:`~statekeeper.errors.AgentLost` naming the agent and write nothing. Before,
a prune answered "cannot prune to base seq 0 with head 0", a rewrite a conflict, a
``set_ttl`` "absent" (False), and an import from a base silently created the agent
again over its lost history.

And none of the backend's own delete paths leaves the agent index without its proof
entry while it lists agents: a delete of the id ``"\\0"`` (the proof entry's own name)
is refused, a ``drop_all`` takes the identity markers first.

The shared server, each test under its own key prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis

from statekeeper.backends.redis import RedisBackend
from statekeeper.errors import AgentLost, InvalidArgument, StoreLost
from statekeeper.records import RawEvent, RewriteRequest
from statekeeper.testing import request, snapshot

from ._services import REDIS_URL, delete_prefix, namespace, require_redis


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path, "sk_lostw_") + ":"
    yield name
    delete_prefix(name)


@pytest.fixture
async def backend(prefix: str) -> AsyncIterator[RedisBackend]:
    opened = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        yield opened
    finally:
        await opened.close()


def _raw() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


def _delete(*keys: str) -> None:
    client = _raw()
    try:
        assert client.delete(*keys) == len(keys)
    finally:
        client.close()


def _keys(prefix: str) -> set[bytes]:
    client = _raw()
    try:
        return set(client.scan_iter(match=prefix + "*"))
    finally:
        client.close()


async def _lost(backend: RedisBackend, prefix: str) -> set[bytes]:
    """Agent "a" (4 events, a snapshot at 2) and "b", then a's hash deleted; the keys
    left under the prefix."""
    await backend.append(request("a", 0, 4, snap_at=2))
    await backend.append(request("b", 0, 1))
    _delete(f"{prefix}a:a")
    return _keys(prefix)


async def test_a_prune_of_a_lost_agent_raises(backend: RedisBackend, prefix: str) -> None:
    left = await _lost(backend, prefix)
    with pytest.raises(AgentLost, match="'a'"):  # main: ConfigurationError (head 0)
        await backend.prune("a", 2)
    with pytest.raises(AgentLost):
        await backend.prune("a", 0, [2])
    assert _keys(prefix) == left  # nothing written


async def test_a_rewrite_of_a_lost_agent_raises(backend: RedisBackend, prefix: str) -> None:
    left = await _lost(backend, prefix)
    new = RawEvent(1, "e", 2.0, b"rewritten-1", b"sum-r1")
    with pytest.raises(AgentLost, match="'a'"):  # main: ConflictError (head 0)
        await backend.rewrite(RewriteRequest("a", 4, None, (new,)))
    assert _keys(prefix) == left


async def test_set_ttl_of_a_lost_agent_raises(backend: RedisBackend, prefix: str) -> None:
    left = await _lost(backend, prefix)
    with pytest.raises(AgentLost, match="'a'"):  # main: False ("not stored")
        await backend.set_ttl("a", 60)
    with pytest.raises(AgentLost):
        await backend.set_ttl("a", None)
    assert _keys(prefix) == left  # (no own-ttl mark left behind either)
    with pytest.raises(AgentLost):  # still lost: the mark would have passed it for expired
        await backend.read("a")
    assert await backend.set_ttl("never-saved", 60) is False


async def test_an_import_from_a_base_does_not_recreate_a_lost_agent(
    backend: RedisBackend, prefix: str
) -> None:
    left = await _lost(backend, prefix)
    with pytest.raises(AgentLost, match="'a'"):  # main: made "a" again from seq 3
        await backend.append_from_base(request("a", 2, 2), snapshot(2))
    assert _keys(prefix) == left
    await backend.delete_agent("a")  # acknowledged: now it may be made again
    made = await backend.append_from_base(request("a", 2, 2), snapshot(2))
    assert (made.first_seq, made.last_seq) == (3, 4)


async def test_the_other_writes_of_a_stored_agent_still_work(backend: RedisBackend) -> None:
    await backend.append(request("a", 0, 4, snap_at=2))
    await backend.prune("a", 2)
    new = RawEvent(3, "e", 2.0, b"rewritten-3", b"sum-r3")
    await backend.rewrite(RewriteRequest("a", 4, None, (new,)))
    assert (await backend.read("a"))[0].payload == b"rewritten-3"
    assert await backend.set_ttl("a", 3600) is True
    assert await backend.set_ttl("a", None) is True


async def test_an_agent_given_its_own_ttl_then_created_again_is_checked_again(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 2))
    assert await backend.set_ttl("a", 3600)
    _delete(f"{prefix}a:a")  # as its own expiry would: not a loss
    assert await backend.read("a") == []
    await backend.append(request("a", 0, 1))  # a new "a", without a ttl of its own
    _delete(f"{prefix}a:a")  # now a loss
    with pytest.raises(AgentLost):  # main: [] (the old own-ttl mark stayed)
        await backend.read("a")


async def test_deleting_the_id_of_the_proof_entry_is_refused(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 1))
    with pytest.raises(InvalidArgument):  # main: True, and the proof entry was gone
        await backend.delete_agent("\0")
    with pytest.raises(InvalidArgument):
        await backend.set_ttl("\0", 60)
    client = _raw()
    try:
        assert client.zscore(f"{prefix}agents", "\0") is not None
    finally:
        client.close()
    assert [i.agent_id for i in await backend.list_agents()] == ["a"]


async def test_a_store_being_dropped_is_lost_to_other_backends(prefix: str) -> None:
    first = RedisBackend(REDIS_URL, prefix=prefix)
    other = RedisBackend(REDIS_URL, prefix=prefix)
    try:
        await first.append(request("a", 0, 1))
        await other.append(request("b", 0, 1))
        assert await first.drop_all() > 0
        with pytest.raises(StoreLost, match="marker"):  # the marker, not the index
            await other.append(request("c", 0, 1))
        assert await first.list_agents() == []
        await first.append(request("c", 0, 1))
    finally:
        await first.close()
        await other.close()


async def test_an_expired_agent_dropped_by_a_listing_then_created_again_is_checked_again(
    backend: RedisBackend, prefix: str
) -> None:
    await backend.append(request("a", 0, 2))
    assert await backend.set_ttl("a", 3600)
    _delete(f"{prefix}a:a")  # as its own expiry would
    assert await backend.list_agents() == []  # drops its index entry (and now its mark)
    await backend.append(request("a", 0, 1))
    _delete(f"{prefix}a:a")
    with pytest.raises(AgentLost):  # main: [] (the mark stayed)
        await backend.read("a")
