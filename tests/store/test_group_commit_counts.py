"""``durability="group"`` counts a shared commit only when it stored something: a batch
whose every append was refused (a conflict, a bad request) or was a duplicate of one
already stored wrote nothing, and ``stats().commits`` (the ``statekeeper_commits``
metric) must not say it did.

Before, :class:`GroupCommitter` counted the commit (and every append in it) as soon as
``append_batch`` returned, before looking at its results: a save refused with
``ConflictError`` showed as one commit and one append."""

from __future__ import annotations

import pytest

from statekeeper import ConflictError, StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.records import AppendRequest, AppendResult, RawEvent
from statekeeper.store.durability import GroupCommitter


def _request(agent_id: str, expected: int, key: str | None = None) -> AppendRequest:
    seq = expected + 1
    event = RawEvent(seq, "e", 1.0 + seq, b"payload-%d" % seq, b"sum-%d" % seq)
    return AppendRequest(agent_id, expected, [event], idempotency_key=key)


async def test_a_batch_of_refused_appends_is_no_commit() -> None:
    group = GroupCommitter(MemoryBackend())
    with pytest.raises(ConflictError):
        await group.submit(_request("a", 5))  # the stream is empty: refused
    await group.drain()
    assert (group.commits, group.appends) == (0, 0)


async def test_a_batch_counts_the_appends_it_stored() -> None:
    group = GroupCommitter(MemoryBackend())
    first = await group.submit(_request("a", 0, key="k"))
    assert isinstance(first, AppendResult) and not first.duplicate
    assert (group.commits, group.appends) == (1, 1)
    again = await group.submit(_request("a", 0, key="k"))  # a retry: already stored
    assert again.duplicate
    with pytest.raises(ConflictError):
        await group.submit(_request("b", 3))
    await group.drain()
    # the duplicate was answered (an append call that returned), but nothing was committed
    assert (group.commits, group.appends) == (1, 2)


async def test_a_refused_save_is_no_commit_in_the_store_stats() -> None:
    backend = MemoryBackend()
    async with StateStore(backend, durability="group") as store, StateStore(backend) as other:
        await store.save("a", {"n": 1})
        await other.save("a", {"n": "elsewhere"})  # store's cached head (1) is stale now
        with pytest.raises(ConflictError):
            await store.save("a", {"n": 2}, expected_seq=1)  # sent, and refused
        stats = store.stats()
        assert (stats.commits, stats.appends) == (1, 1)
