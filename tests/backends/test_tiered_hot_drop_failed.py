"""A change that keeps the head record (a prune, a rewrite) made through one tiered
store whose hot-copy drop fails (the hot tier timed out: a ``TimeoutError`` from the
hook, no timing) while the hot tier is shared with another store of the URL.

The other store checks a hot copy by head and head tag alone, which such a change
keeps: a copy left by a failed drop serves the removed history (or the old bytes)
there, no error. The change dropped the copy after it committed: a failure there was
reported (``maybe_applied``) but the other store served the old bytes on. Now the copy
is dropped before anything is written: a failure refuses the change (``BackendError``,
nothing changed, not ``maybe_applied``) and the other store serves what the durable
tier holds. A copy filled by another store between that drop and the change, whose
drop after it fails, is still reported (``maybe_applied``: the change is committed)."""

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


def _hot_drop_times_out(store: TieredBackend, after: int = 0) -> list[str]:
    """The hot tier's deletes time out from the ``after``-th one on."""
    held: list[str] = []
    real = store.hot.delete_agent  # type: ignore[union-attr]

    async def timed_out(agent_id: str, *args: Any, **kw: Any) -> bool:
        held.append(agent_id)
        if len(held) > after:
            raise TimeoutError
        return await real(agent_id, *args, **kw)

    store.hot.delete_agent = timed_out  # type: ignore[method-assign,union-attr]
    return held


async def _seqs(store: Any) -> object:
    try:
        return [e.seq for e in await store.read("a")]
    except HistoryCompacted:
        return HistoryCompacted


async def _rewrite_first(writer: TieredBackend) -> RewriteRequest:
    head, tag = await writer.head_tag("a")
    first = (await writer.read("a", 0, 1))[0]
    again = RawEvent(1, first.type, first.timestamp, b"erased", first.checksum)
    return RewriteRequest("a", head, tag, (again,))  # (its head tag kept)


async def test_a_prune_whose_hot_drop_times_out_changes_nothing(
    pair: tuple[TieredBackend, TieredBackend],
) -> None:
    writer, reader = pair
    await writer.append(appended("a", 0, 4, snap_at=2))
    assert await _seqs(reader) == [1, 2, 3, 4]  # (the shared hot copy filled)
    held = _hot_drop_times_out(writer)
    with pytest.raises(BackendError, match="dropped first") as caught:
        await writer.prune("a", 2)
    assert held == ["a"] and not caught.value.maybe_applied  # was: committed
    assert await _seqs(writer.durable) == [1, 2, 3, 4]
    assert await _seqs(reader) == await _seqs(writer.durable)  # was: [1, 2, 3, 4], pruned


async def test_a_rewrite_whose_hot_drop_times_out_changes_nothing(
    pair: tuple[TieredBackend, TieredBackend],
) -> None:
    writer, reader = pair
    await writer.append(appended("a", 0, 4))
    assert await _seqs(reader) == [1, 2, 3, 4]  # (the shared hot copy filled)
    request = await _rewrite_first(writer)
    held = _hot_drop_times_out(writer)
    with pytest.raises(BackendError, match="dropped first") as caught:
        await writer.rewrite(request)
    assert held == ["a"] and not caught.value.maybe_applied  # was: committed
    stored = (await writer.durable.read("a", 0, 1))[0].payload
    assert stored != b"erased"
    assert (await reader.read("a", 0, 1))[0].payload == stored  # was: the old, erased


@pytest.mark.parametrize("change", ["prune", "rewrite"])
async def test_a_change_whose_hot_drop_after_it_times_out_is_not_reported_done(
    pair: tuple[TieredBackend, TieredBackend], change: str
) -> None:
    """(a copy another store filled between the drop before the change and the change)"""
    writer, reader = pair
    await writer.append(appended("a", 0, 4, snap_at=2))
    request = await _rewrite_first(writer)
    held = _hot_drop_times_out(writer, after=1)
    durable = writer.durable
    real_prune, real_rewrite = durable.prune, durable.rewrite

    async def filled_first() -> None:
        assert held == ["a"]  # (dropped before)
        assert await _seqs(reader) == [1, 2, 3, 4]  # (filled again by the other store)

    async def prune(*args: Any, **kw: Any) -> None:
        await filled_first()
        await real_prune(*args, **kw)

    async def rewrite(*args: Any, **kw: Any) -> None:
        await filled_first()
        await real_rewrite(*args, **kw)

    durable.prune, durable.rewrite = prune, rewrite  # type: ignore[method-assign]
    with pytest.raises(BackendError, match="dropped after") as caught:
        if change == "prune":
            await writer.prune("a", 2)
        else:
            await writer.rewrite(request)
    assert held == ["a", "a"] and caught.value.maybe_applied  # (committed)
    if change == "prune":
        assert await _seqs(writer) != [1, 2, 3, 4]  # (this store: the agent dirty)
    else:
        assert (await writer.read("a", 0, 1))[0].payload == b"erased"  # (this store: dirty)
