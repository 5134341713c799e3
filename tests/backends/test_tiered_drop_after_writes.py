"""The writes of a tiered store that drop (or update) the hot copy only AFTER writing
the durable tier, best effort — a compacted create (``append_from_base``: a restore),
a snapshot, a demotion — with that hot step failing (an injected error in the hot
tier's deletes, or its snapshot saves), the tiers shared with other tiered stores
(SQLite files shared by path; a store opened afterwards knows nothing of the failure).

* A compacted create: a hot copy left of an agent of that id (a delete whose drop after
  it failed, told to its caller alone) matched the new stream of its head without a
  head tag, and every other store served the old events as the new agent. Now it is
  dropped first, else the create refused, nothing written (test fails before).
* A snapshot whose hot save failed leaves a copy without it: another store serves an
  older snapshot (or none) and replays the events after it — the same state (kept
  as a test: nothing to change).
* A demotion whose drop failed leaves a copy of the demoted stream: served only once
  the agent is back with the same head and tag — rehydrated, the same records — and a
  delete of the demoted agent waits for it to be dropped (test_tiered_delete_hot_down),
  so no agent re-made to that head is served it (kept as a test: nothing to change).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError
from statekeeper.records import AppendRequest, RawEvent, RawSnapshot
from statekeeper.testing import request as appended

from .test_tiered_delete_hot_drop import HotDeletes

Opened = Callable[[], Awaitable[TieredBackend]]


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Opened]:
    made: list[TieredBackend] = []
    cold = MemoryBackend()

    async def open_one() -> TieredBackend:
        store = TieredBackend(
            SQLiteBackend(tmp_path / "d.db"),
            hot=SQLiteBackend(tmp_path / "h.db"),
            cold=cold,
            hot_retry_after=3600.0,
        )
        await store.initialize()
        made.append(store)
        return store

    try:
        yield open_one
    finally:
        for store in made:
            await store.close()


def _new(seq: int) -> RawEvent:
    return RawEvent(seq, "patch", float(seq), b"new-%d" % seq, b"ck-%d" % seq)


async def test_a_compacted_create_over_a_copy_left_is_refused_until_dropped(
    opened: Opened,
) -> None:
    writer = await opened()
    hot = HotDeletes()
    hot.wrap(writer)
    assert writer.hot is not None
    # a copy left of a deleted agent "a" (its delete's drop after it failed)
    await writer.hot.append(appended("a", 0, 4))
    hot.failing = True
    base = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
    create = AppendRequest("a", 2, (_new(3), _new(4)))
    with pytest.raises(BackendError, match="compacted create") as refused:
        await writer.append_from_base(create, base)  # was: made, the copy served
    assert not refused.value.maybe_applied
    assert await writer.durable.head("a") == 0  # (nothing written)
    hot.failing = False
    await writer.append_from_base(create, base)
    reader = await opened()
    assert [e.payload for e in await reader.read("a")] == [b"new-3", b"new-4"]


async def test_a_compacted_create_with_a_tag_goes_and_its_copy_is_not_served(
    opened: Opened,
) -> None:
    """(a tag commits to the whole chain: a copy left, of another chain, never matches)"""
    writer = await opened()
    hot = HotDeletes()
    hot.wrap(writer)
    assert writer.hot is not None
    await writer.hot.append(appended("a", 0, 4))
    hot.failing = True
    base = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
    await writer.append_from_base(AppendRequest("a", 2, (_new(3), _new(4)), head_tag=b"t"), base)
    reader = await opened()
    assert [e.payload for e in await reader.read("a")] == [b"new-3", b"new-4"]


async def test_a_snapshot_whose_hot_save_failed_is_served_older_not_wrong(
    opened: Opened,
) -> None:
    writer = await opened()
    snap2 = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
    await writer.append(AppendRequest("a", 0, appended("a", 0, 4).events, snapshot=snap2))
    assert writer.hot is not None
    real = writer.hot.save_snapshot

    async def failing(*args: Any, **kw: Any) -> None:
        raise ConnectionError("hot tier: connection reset")

    writer.hot.save_snapshot = failing  # type: ignore[method-assign]
    snap4 = RawSnapshot(4, 4.0, b"state-4", b"ssum-4")
    await writer.save_snapshot("a", snap4)  # (its hot save failed: a copy without it)
    writer.hot.save_snapshot = real  # type: ignore[method-assign]
    reader = await opened()
    stored = await reader.durable.read("a")
    assert await reader.read("a") == stored  # (a hit: the copy's head and tag match)
    assert reader.stats["hot_hits"] == 1
    # the older snapshot (the caller replays 3 and 4 after it): never another state
    assert await reader.latest_snapshot("a") == snap2
    assert await reader.read("a", 2) == stored[2:]


async def test_a_demotion_whose_drop_failed_serves_no_other_agent(opened: Opened) -> None:
    writer = await opened()
    hot = HotDeletes()
    hot.wrap(writer)
    assert writer.hot is not None
    await writer.append(appended("a", 0, 4))
    old = await writer.durable.read("a")
    hot.failing = True
    assert await writer.demote("a")  # (its drop of the hot copy failed: left)
    assert await writer.hot.head("a") == 4
    hot.failing = False
    reader = await opened()
    hot.wrap(reader)
    assert await reader.read("a") == old  # rehydrated: the same records
    hot.failing = True
    with pytest.raises(BackendError):  # (a delete waits for the copy's drop)
        await reader.delete_agent("a")
    hot.failing = False
    assert await reader.delete_agent("a")
    await reader.append(AppendRequest("a", 0, tuple(_new(s) for s in range(1, 5))))
    other = await opened()
    assert [e.payload for e in await other.read("a")] == [b"new-%d" % s for s in range(1, 5)]
