"""A deleted agent's copy left in the cold tier.

A delete removed the agent from the durable tier and its marker, then its cold copy.
When that last step failed, the error was the cold tier's own (nothing said the agent
was half deleted), and a later demotion of a new agent of that id was refused as if
"another store sharing the cold tier" had demoted it — with no word of the leftover,
nor how to clear it. Now a delete deletes the cold copy first: a failure leaves the agent
whole (still demoted) and deleting again finishes; a leftover an earlier version left
(its marker gone) makes the demotion's refusal name both causes and the fix.

And ``expire_keys(None, count_only=True)`` counted such a leftover's idempotency keys
(every record the cold tier holds) with the durable tier's: the agent's keys twice.
(A leftover's records are not touched at all now: nothing here says they are this
store's — see test_tiered_shared_cold_neighbours.py.)
"""

from __future__ import annotations

import pytest

from statekeeper.backends import MemoryBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import (
    BackendUnavailable,
    ConfigurationError,
)
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.testing import request


class _ColdDeleteFails(MemoryBackend):
    """A cold tier whose deletes fail while ``failing`` (a lost connection, say)."""

    failing = False

    async def delete_agent(self, agent_id: str) -> bool:
        if self.failing:
            raise BackendUnavailable("the cold tier is unreachable")
        return await super().delete_agent(agent_id)


def _new_agent() -> AppendRequest:
    """A new ``user-1``: three events of its own (not the deleted one's), key "new"."""
    events = tuple(RawEvent(s, "patch", 100.0 + s, b"new:%d" % s, b"c%d" % s) for s in (1, 2, 3))
    return AppendRequest("user-1", 0, events, None, "new")


async def _deleted_with_a_leftover() -> tuple[TieredBackend, _ColdDeleteFails]:
    """A demoted ``user-1`` deleted by an earlier version whose delete of its cold copy
    failed: the durable stream and the marker gone, the cold copy left."""
    cold = _ColdDeleteFails()
    durable = MemoryBackend()
    tiered = TieredBackend(durable, cold=cold, idle_after=1)
    await tiered.append(request("user-1", 0, 2, key="old"))
    assert await tiered.demote("user-1")
    await durable.delete_agent(COLD_MARKER + "user-1")
    assert await tiered.head("user-1") == 0  # deleted, as far as the store is concerned
    assert await cold.head("user-1") == 2  # but its copy is left in the cold tier
    return tiered, cold


async def test_a_failed_cold_delete_leaves_the_agent_whole_and_deleting_again_ends_it() -> None:
    cold = _ColdDeleteFails()
    tiered = TieredBackend(MemoryBackend(), cold=cold, idle_after=1)
    await tiered.append(request("user-1", 0, 2, key="old"))
    assert await tiered.demote("user-1")
    cold.failing = True
    with pytest.raises(BackendUnavailable, match="unreachable"):
        await tiered.delete_agent("user-1")
    cold.failing = False
    assert await tiered.head("user-1") == 2  # (before: 0, and its copy left in the cold tier)
    assert await tiered.lookup_key("user-1", "old") is not None
    assert await tiered.demote("user-1")
    assert await tiered.delete_agent("user-1")
    assert await cold.head("user-1") == 0
    assert await tiered.head("user-1") == 0
    await tiered.append(_new_agent())
    assert await tiered.demote("user-1")
    assert await tiered.head("user-1") == 3


async def test_a_demotion_refused_over_the_leftover_says_what_it_may_be() -> None:
    tiered, cold = await _deleted_with_a_leftover()
    await tiered.append(_new_agent())  # a new agent of that id
    with pytest.raises(ConfigurationError) as info:
        await tiered.demote("user-1")
    said = str(info.value)
    assert "another store sharing the cold tier" in said
    assert "this store deleted, left there when deleting it from the cold tier failed" in said
    assert "statekeeper delete <the cold tier's URL> 'user-1'" in said
    assert await tiered.head("user-1") == 3  # nothing demoted
    await cold.delete_agent("user-1")  # the fix it names
    assert await tiered.demote("user-1")
    assert [e.seq for e in await tiered.read("user-1")] == [1, 2, 3]


@pytest.mark.parametrize("count_only", [True, False])
async def test_expire_keys_counts_a_leftovers_keys_once(count_only: bool) -> None:
    tiered, _ = await _deleted_with_a_leftover()
    await tiered.append(_new_agent())  # the durable agent: one key
    await tiered.append(request("user-2", 0, 1, key="two"))
    assert await tiered.demote("user-2")  # a demoted agent's key: counted in the cold tier
    assert await tiered.expire_keys(None, 1e12, count_only=True) == 2  # (was 3)
    assert await tiered.expire_keys(None, 1e12, count_only=count_only) == 2
    assert await tiered.expire_keys("user-1", 1e12, count_only=True) == (1 if count_only else 0)
