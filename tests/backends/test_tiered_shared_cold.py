"""Two tiered stores sharing one cold tier (one S3 prefix for both, say), each with its
own durable tier and an agent of the same id. A demotion first deleted what the cold
tier held for the id ("an older archive copy") and copied its own stream there: store
B's demotion of ``user-1`` deleted store A's only copy of its ``user-1`` (demoted
before), and A's next load rehydrated B's stream as its own — the same head, so no
check noticed: A served B's data, verify said OK. Now a cold copy that is not this
store's stream (another record at its head) is refused, nothing demoted; a copy of this
store's own (a demotion or rehydration cut short) is still replaced."""

from __future__ import annotations

import pytest

from statekeeper.backends import MemoryBackend
from statekeeper.backends.tiered import TieredBackend, _copy_stream
from statekeeper.errors import ConfigurationError
from statekeeper.testing import request


async def _two(agent: TieredBackend, n: int, tag: str) -> None:
    """``n`` events of ``user-1``, stamped by store (``a``: 1001.0..., ``b``: 2001.0...)."""
    base = 1000.0 if tag == "a" else 2000.0
    for seq in range(n):
        await agent.append(request("user-1", seq, key=f"{tag}{seq}", timestamp=base + seq + 1))


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
    await a.append(request("user-1", 2, key="a2", timestamp=1003.0))
    with pytest.raises(ConfigurationError, match="another store sharing the cold tier"):
        await a.demote("user-1")


async def test_a_copy_of_its_own_stream_left_in_the_cold_tier_is_replaced() -> None:
    durable, cold = MemoryBackend(), MemoryBackend()
    tiered = TieredBackend(durable, cold=cold, idle_after=1)
    await _two(tiered, 2, "a")
    await _copy_stream(durable, cold, "user-1", 2, all_snapshots=True)  # a demotion cut short
    await tiered.append(request("user-1", 2, key="k2", timestamp=1003.0))  # written since
    assert await tiered.demote("user-1")
    assert await cold.head("user-1") == 3
    assert [e.seq for e in await tiered.read("user-1")] == [1, 2, 3]
