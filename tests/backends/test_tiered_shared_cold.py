"""Two tiered stores sharing one cold tier (one S3 prefix for both, say), each with its
own durable tier and an agent of the same id. A demotion first deleted what the cold
tier held for the id ("an older archive copy") and copied its own stream there: store
B's demotion of ``user-1`` deleted store A's only copy of its ``user-1`` (demoted
before), and A's next load rehydrated B's stream as its own — the same head, so no
check noticed: A served B's data, verify said OK. Now a cold copy that is not this
store's stream (another record at its head) is refused, nothing demoted; a copy of this
store's own (a demotion or rehydration cut short) is still replaced."""

from __future__ import annotations

import hashlib

import pytest

from statekeeper.backends import Backend, MemoryBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.backends.tiered_copy import copy_stream as _copy_stream
from statekeeper.errors import ConfigurationError, IntegrityError
from statekeeper.records import AppendRequest, RawEvent


def _event(seq: int, tag: str) -> RawEvent:
    """Event ``seq`` of store ``tag``'s ``user-1`` (its own payload and checksum)."""
    payload = f"{tag}:{seq}".encode()
    return RawEvent(seq, "patch", 1000.0 + seq, payload, hashlib.sha256(payload).digest())


async def _two(agent: Backend, n: int, tag: str, after: int = 0) -> None:
    """``n`` events of ``user-1`` after ``after``, each of store ``tag``."""
    for seq in range(after, after + n):
        events = (_event(seq + 1, tag),)
        await agent.append(AppendRequest("user-1", seq, events, None, f"{tag}{seq}"))


async def test_another_stores_cold_copy_is_not_replaced() -> None:
    cold = MemoryBackend()
    a = TieredBackend(MemoryBackend(), cold=cold, idle_after=1)
    b = TieredBackend(MemoryBackend(), cold=cold, idle_after=1)
    await _two(a, 2, "a")
    mine = [e.payload for e in await a.read("user-1")]
    assert await a.demote("user-1")
    await _two(b, 2, "b")
    with pytest.raises(ConfigurationError, match="not a copy of this store's stream"):
        await b.demote("user-1")  # (before: True, A's copy deleted and replaced)
    assert [e.payload for e in await a.read("user-1")] == mine  # A's, rehydrated
    assert await b.head("user-1") == 2  # B keeps its agent in its durable tier
    # and the other way round: A's agent back in its durable tier, B's demoted now
    assert await b.demote("user-1")
    await _two(a, 1, "a", after=2)
    with pytest.raises(ConfigurationError, match="another store sharing the cold tier"):
        await a.demote("user-1")


async def test_a_copy_of_its_own_stream_left_in_the_cold_tier_is_replaced() -> None:
    durable, cold = MemoryBackend(), MemoryBackend()
    tiered = TieredBackend(durable, cold=cold, idle_after=1)
    await _two(tiered, 2, "a")
    await _copy_stream(durable, cold, "user-1", 2, all_snapshots=True)  # a demotion cut short
    await _two(tiered, 1, "a", after=2)  # written to since
    assert await tiered.demote("user-1")
    assert await cold.head("user-1") == 3
    assert [e.seq for e in await tiered.read("user-1")] == [1, 2, 3]


async def test_a_cold_copy_replaced_by_another_store_is_not_rehydrated() -> None:
    """Defence in depth, for a copy replaced without the check above (an older version,
    a copy by hand): the demotion's marker keeps the checksum of the head it demoted."""
    cold, theirs = MemoryBackend(), MemoryBackend()
    a = TieredBackend(MemoryBackend(), cold=cold, idle_after=1)
    await _two(a, 2, "a")
    assert await a.demote("user-1")
    await _two(theirs, 2, "b")  # another store's user-1, the same head, put in its place
    await cold.delete_agent("user-1")
    await _copy_stream(theirs, cold, "user-1", 2, all_snapshots=True)
    with pytest.raises(IntegrityError, match="not the stream this store demoted"):
        await a.read("user-1")  # (before: the other store's events, as A's)
