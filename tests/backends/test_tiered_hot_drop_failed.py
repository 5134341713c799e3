"""A change that keeps the head record (a prune, a rewrite) made through one tiered
store whose hot-copy drop then fails (the hot tier timed out: a ``TimeoutError`` from
the hook, no timing) while the hot tier is shared with another store of the URL.

The other store checks a hot copy by head and head tag alone, which such a change
keeps: the copy the failed drop left serves the removed history there, no error. So
the change must not return as if done: it raises ``BackendError`` (``maybe_applied``:
it is committed) naming the hot copy left, and the store retries the drop before its
own next hot read (the agent dirty)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError, HistoryCompacted
from statekeeper.records import RawEvent, RewriteRequest
from statekeeper.testing import request as appended


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[TieredBackend, TieredBackend]]:
    stores = [
        TieredBackend(SQLiteBackend(tmp_path / "d.db"), hot=SQLiteBackend(tmp_path / "h.db"))
        for _ in range(2)
    ]
    for store in stores:
        await store.initialize()
    try:
        yield stores[0], stores[1]
    finally:
        for store in stores:
            await store.close()


def _hot_drop_times_out(store: TieredBackend) -> list[str]:
    held: list[str] = []

    async def timed_out(agent_id: str, *args: Any, **kw: Any) -> None:
        held.append(agent_id)
        raise TimeoutError

    store.hot.delete_agent = timed_out  # type: ignore[method-assign,union-attr]
    return held


async def _seqs(store: TieredBackend) -> object:
    try:
        return [e.seq for e in await store.read("a")]
    except HistoryCompacted:
        return HistoryCompacted


async def test_a_prune_whose_hot_drop_times_out_is_not_reported_done(
    pair: tuple[TieredBackend, TieredBackend],
) -> None:
    writer, reader = pair
    await writer.append(appended("a", 0, 4, snap_at=2))
    assert await _seqs(reader) == [1, 2, 3, 4]  # (the shared hot copy filled)
    held = _hot_drop_times_out(writer)
    with pytest.raises(BackendError, match="hot") as caught:
        await writer.prune("a", 2)
    assert held == ["a"] and caught.value.maybe_applied
    assert [e.seq for e in await writer.durable.read("a", 2)] == [3, 4]  # (committed)
    assert await _seqs(writer) != [1, 2, 3, 4]  # (this store: the agent dirty)


async def test_a_rewrite_whose_hot_drop_times_out_is_not_reported_done(
    pair: tuple[TieredBackend, TieredBackend],
) -> None:
    writer, reader = pair
    await writer.append(appended("a", 0, 4))
    assert await _seqs(reader) == [1, 2, 3, 4]  # (the shared hot copy filled)
    head, tag = await writer.head_tag("a")
    first = (await writer.read("a", 0, 1))[0]
    again = RawEvent(1, first.type, first.timestamp, b"erased", first.checksum)
    held = _hot_drop_times_out(writer)
    with pytest.raises(BackendError, match="hot") as caught:
        await writer.rewrite(RewriteRequest("a", head, tag, (again,)))  # (its head tag kept)
    assert held == ["a"] and caught.value.maybe_applied
    assert (await writer.durable.read("a", 0, 1))[0].payload == b"erased"  # (committed)
    assert (await writer.read("a", 0, 1))[0].payload == b"erased"  # (this store: dirty)
