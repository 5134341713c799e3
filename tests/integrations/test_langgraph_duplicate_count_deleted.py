"""A deleted thread's snapshot count is not carried to the thread made again.

After a write answered "duplicate", the saver keeps the thread's snapshot count for
its next view (``test_langgraph_duplicate_snapshot.py``). A thread deleted meanwhile
(``delete_thread``, ``prune(strategy="delete")``) and written again under the same id
is another stream: its next view is its first, and it counts from zero. Before, the
deleted stream's count was handed to it (the same stream id): the new thread was
snapshotted on the old one's schedule (its size, the bytes counted on it), not at the
seqs of a thread that never had a predecessor. And the count was kept as the whole
dropped view: its document and message caches stayed in the saver's memory (for up to
``cache_size`` threads beside the cache's own) until the id was written again.

The duplicate answer is made deterministic by wrapping the store's append, as in
``test_langgraph_duplicate_snapshot.py``.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import checkpoint, new_thread
from .test_langgraph_duplicate_snapshot import _put_all

PUTS = 24


def _checkpoints(size: int) -> list[Any]:
    return [checkpoint({"v": f"value {i} " * size}, {"v": str(i + 1)}) for i in range(PUTS)]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("how", ["delete_thread", "prune"])
async def test_a_thread_made_again_counts_from_zero(url: str, mode: str, how: str) -> None:
    saver = await StatekeeperSaver.afrom_url(url, snapshot_min_bytes=512)
    try:
        taken: dict[str, list[int]] = {}
        snapshot = saver.store.snapshot

        async def recorded(agent_id: str) -> int:
            seq = await snapshot(agent_id)
            taken.setdefault(agent_id, []).append(seq)
            return seq

        saver.store.snapshot = recorded  # type: ignore[method-assign]
        again, fresh = new_thread(), new_thread()
        views: list[weakref.ref[Any]] = []
        hand = saver._hand_count

        def handed(view: Any) -> None:
            views.append(weakref.ref(view))
            hand(view)

        saver._hand_count = handed  # type: ignore[method-assign, assignment]
        # the first life of the thread: large values, its last write answered
        # "duplicate" (its count handed on to the thread's next view)
        await _put_all(saver, again, _checkpoints(400), {PUTS - 1}, mode)
        # its count kept, not the view it was counted on (its document, messages)
        gc.collect()
        assert views and all(view() is None for view in views)
        if how == "prune":
            await saver.aprune([again], strategy="delete")
        elif mode == "sync":
            await asyncio.to_thread(saver.delete_thread, again)
        else:
            await saver.adelete_thread(again)
        taken.clear()
        cps = _checkpoints(40)
        await _put_all(saver, again, cps, set(), mode)
        await _put_all(saver, fresh, cps, set(), mode)
        expected = taken.get(m.agent_id(saver.prefix, fresh), [])
        assert len(expected) >= 3  # (the test snapshots the thread several times)
        # made again: snapshotted as any new thread is (the seqs start over from the
        # delete's: the same number of events since the thread was made)
        got = taken.get(m.agent_id(saver.prefix, again), [])
        base = await saver.store.head(m.agent_id(saver.prefix, again)) - PUTS
        first = await saver.store.head(m.agent_id(saver.prefix, fresh)) - PUTS
        assert [s - base for s in got] == [s - first for s in expected]
    finally:
        await saver.aclose()
