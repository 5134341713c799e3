"""Two tiered stores sharing one cold tier (one S3 prefix, one SQLite file), each with
its own durable tier. What one store does to the cold tier must touch only the cold
copies of its own demoted agents (those its durable markers name, the copy checked
against the marker), never the other store's:

* ``expire_keys(None)`` expired every idempotency key record the cold tier held (it
  only stopped counting the other store's): the other store's recorded step, retried
  with its key, ran again — a doubled side effect. ``expire_keys(agent)`` did the same
  to the other store's copy of an agent of that id.
* ``delete_agent`` / ``delete_agent_at`` of an agent deleted the cold tier's copy of
  that id whoever had demoted it: deleting a never-demoted agent of one store deleted
  the other store's only copy of its demoted agent of the same id.
* ``drop_all`` dropped the whole cold tier, every other store's demoted agents with it.
"""

from __future__ import annotations

import hashlib

import pytest

from statekeeper.backends import MemoryBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import IntegrityError
from statekeeper.records import AppendRequest, RawEvent


async def _pair() -> tuple[TieredBackend, TieredBackend, MemoryBackend]:
    cold = MemoryBackend()
    a = TieredBackend(MemoryBackend(), cold=cold, idle_after=1)
    b = TieredBackend(MemoryBackend(), cold=cold, idle_after=1)
    return a, b, cold


async def _step(store: TieredBackend, agent_id: str, key: str) -> bool:
    """A recorded step of ``agent_id`` under ``key``: True when it ran (appended),
    False when the store answered it from the key's record (exactly once)."""
    if await store.lookup_key(agent_id, key) is not None:
        return False
    head = await store.head(agent_id)
    payload = f"{id(store)}:{agent_id}:{key}".encode()  # (each store's events its own)
    event = RawEvent(head + 1, "patch", 1000.0 + head, payload, hashlib.sha256(payload).digest())
    await store.append(AppendRequest(agent_id, head, (event,), None, key))
    return True


async def test_expire_keys_of_all_leaves_the_other_stores_keys() -> None:
    a, b, cold = await _pair()
    assert await _step(a, "a-agent", "pay-1")
    assert await _step(b, "b-agent", "pay-1")
    assert await a.demote("a-agent") and await b.demote("b-agent")
    assert await a.expire_keys(None, 1e12) == 1  # A's own key only
    assert await cold.lookup_key("b-agent", "pay-1") is not None  # (before: expired)
    assert not await _step(b, "b-agent", "pay-1")  # B's step does not run again
    assert await b.head("b-agent") == 1
    assert await _step(a, "a-agent", "pay-1")  # A's key is expired: as asked


async def test_expire_keys_of_all_counts_and_expires_only_its_own() -> None:
    a, b, _ = await _pair()
    await _step(a, "a-agent", "k")
    await _step(b, "b-agent", "k")
    await _step(b, "b-two", "k")
    assert await a.demote("a-agent") and await b.demote("b-agent")
    assert await b.demote("b-two")
    assert await a.expire_keys(None, 1e12, count_only=True) == 1
    assert await b.expire_keys(None, 1e12, count_only=True) == 2
    assert await a.expire_keys(None, 1e12) == 1
    assert await b.expire_keys(None, 1e12, count_only=True) == 2


async def test_expire_keys_of_an_agent_leaves_the_other_stores_copy_of_that_id() -> None:
    a, b, cold = await _pair()
    await _step(a, "user-1", "pay-1")
    assert await a.demote("user-1")
    await _step(b, "user-1", "pay-1")  # B's own user-1, in its durable tier
    assert await b.expire_keys("user-1", 1e12) == 1  # B's own record
    assert await cold.lookup_key("user-1", "pay-1") is not None  # (before: expired)
    assert not await _step(a, "user-1", "pay-1")
    assert await a.head("user-1") == 1


async def test_deleting_an_agent_leaves_the_other_stores_demoted_agent_of_that_id() -> None:
    a, b, cold = await _pair()
    await _step(a, "user-1", "a")
    assert await a.demote("user-1")
    await _step(b, "user-1", "b")  # B's user-1, never demoted
    assert await b.delete_agent("user-1")
    assert await cold.head("user-1") == 1  # (before: 0, A's only copy deleted)
    assert await a.head("user-1") == 1
    assert await a.lookup_key("user-1", "a") is not None


async def test_a_conditional_delete_leaves_the_other_stores_demoted_agent() -> None:
    a, b, cold = await _pair()
    await _step(a, "user-1", "a")
    assert await a.demote("user-1")
    await _step(b, "user-1", "b")
    [head] = await b.read("user-1")
    assert await b.delete_agent_at("user-1", 1, head.checksum)
    assert await cold.head("user-1") == 1  # (before: 0)
    assert await a.head("user-1") == 1


async def test_deleting_its_own_demoted_agent_deletes_its_cold_copy() -> None:
    a, b, cold = await _pair()
    await _step(a, "user-1", "a")
    assert await a.demote("user-1")
    assert await a.delete_agent("user-1")
    assert await cold.head("user-1") == 0
    assert await a.head("user-1") == 0
    await _step(b, "user-1", "b")  # the id is free for B's demotion now
    assert await b.demote("user-1")


async def test_drop_all_leaves_the_other_stores_demoted_agents() -> None:
    a, b, cold = await _pair()
    await _step(a, "a-agent", "k")
    await _step(b, "b-agent", "k")
    assert await a.demote("a-agent") and await b.demote("b-agent")
    await a.drop_all()
    assert await cold.head("a-agent") == 0  # its own copy dropped
    assert await cold.head("b-agent") == 1  # (before: 0, B's only copy)
    assert await b.head("b-agent") == 1
    assert await a.count_agents() == 0


async def test_deleting_an_id_it_never_had_leaves_the_other_stores_demoted_agent() -> None:
    a, b, cold = await _pair()
    await _step(a, "a-agent", "a")
    assert await a.demote("a-agent")
    assert not await b.delete_agent("a-agent")  # not B's: nothing to delete
    assert await cold.head("a-agent") == 1  # (before: 0, A's only copy deleted)
    assert await a.head("a-agent") == 1


async def test_a_marker_whose_copy_is_now_another_stores_expires_nothing_there() -> None:
    a, b, cold = await _pair()
    await _step(a, "user-1", "pay-1")
    assert await a.demote("user-1")
    await cold.delete_agent("user-1")  # A's copy gone (by hand, an older version) ...
    await _step(b, "user-1", "pay-1")
    assert await b.demote("user-1")  # ... and B's user-1 demoted in its place
    assert await a.expire_keys(None, 1e12) == 0  # A's marker names it: still not A's
    with pytest.raises(IntegrityError, match="not the stream this store demoted"):
        await a.expire_keys("user-1", 1e12)
    assert await cold.lookup_key("user-1", "pay-1") is not None
    assert not await _step(b, "user-1", "pay-1")
