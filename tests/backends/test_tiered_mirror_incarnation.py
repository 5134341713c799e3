"""An append that compares no known head tag (no ``check_tag``: a raw caller, a restore's
pieces, a store whose cached tag is not known) mirrored onto a hot copy of an EARLIER
incarnation of the agent whose head seq equals the new stream's head.

The copy is left by a path that bypasses the hot tier: the agent deleted and written
again to the same seq through the durable tier alone (another store sharing it, not this
hot tier; the raw backend), or through a tiered store whose hot tier failed during the
delete of a tagged stream (its copy left, harmless while the tag differs) and the
re-creation. A read compares the copy's head and head tag with the durable tier's: the
tags differ, the copy is dropped. But the mirror of an unchecked append read the copy's
tag and appended onto it (a compare-and-set on that tag): the copy then had the durable
head and the append's head tag, and every store sharing the hot tier served the first
incarnation's events with the new append (a silent stale serve). Now an append is
mirrored only onto a copy proven of the same incarnation: the copy's tag, read before the
durable append, is compared by the durable commit itself (a refusal: the copy dropped,
the append made as asked). SQLite and Redis hot tiers, shared by three stores.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, AppendResult, RawEvent
from statekeeper.testing import request as appended

from .test_tiered_fill_rewrite_race import stores

__all__ = ["stores"]

#: (the first incarnation's head tag, the second's): a first untagged stream's copy is
#: under the stand-in tag of a fill, or none (its appends mirrored)
INCARNATIONS = [(b"old-2", b"new-2"), (None, b"new-2"), (b"old-2", None)]
IDS = ["tagged-tagged", "untagged-tagged", "tagged-untagged"]


def _events(start: int, count: int, body: bytes) -> tuple[RawEvent, ...]:
    return tuple(
        dataclasses.replace(e, payload=body + b"-%d" % e.seq, checksum=body + b"-sum-%d" % e.seq)
        for e in appended("a", start, count).events
    )


async def _first(store: TieredBackend, tag: bytes | None, *, filled: bool) -> None:
    """Agent "a" at seq 2 through ``store``, its hot copy made (by the mirror of its
    appends, or by a read's fill)."""
    await store.append(AppendRequest("a", 0, _events(0, 2, b"old"), head_tag=tag))
    if filled:
        await store.hot.delete_agent("a")  # type: ignore[union-attr]
        await store.read("a")
        assert store.stats["fills"] == 1
    assert await store.hot.head("a") == 2  # type: ignore[union-attr]


async def _second(store: TieredBackend, tag: bytes | None) -> list[RawEvent]:
    """The next append (no check_tag), then what a store sharing the tiers reads."""
    request = AppendRequest("a", 2, _events(2, 1, b"next"), head_tag=b"next-3")
    await store.append(request)
    return await store.durable.read("a")


@pytest.mark.parametrize(("old", "new"), INCARNATIONS, ids=IDS)
@pytest.mark.parametrize("filled", [False, True], ids=["mirrored", "filled"])
async def test_an_unchecked_append_onto_an_earlier_incarnations_copy_serves_no_old_events(
    stores: list[TieredBackend], old: bytes | None, new: bytes | None, filled: bool
) -> None:
    first, other, reader = stores
    await _first(first, old, filled=filled)
    # deleted and written again to seq 2 past the hot tier (another store of the durable
    # tier alone, the raw backend)
    await other.durable.delete_agent("a")
    await other.durable.append(AppendRequest("a", 0, _events(0, 2, b"new"), head_tag=new))
    assert await other.hot.head("a") == 2  # type: ignore[union-attr]  # (the old copy)
    stored = await _second(other, new)
    assert [e.payload for e in stored] == [b"new-1", b"new-2", b"next-3"]
    assert await reader.read("a") == stored  # was: old-1, old-2, next-3
    assert await first.read("a") == stored


@pytest.mark.parametrize(("old", "new"), INCARNATIONS, ids=IDS)
async def test_an_unchecked_batch_onto_an_earlier_incarnations_copy_serves_no_old_events(
    stores: list[TieredBackend], old: bytes | None, new: bytes | None
) -> None:
    """The same through ``append_batch`` (a store's group commit, a restore's round),
    beside an agent whose copy is its own (still mirrored: no refill)."""
    first, other, reader = stores
    await _first(first, old, filled=False)
    await first.append(AppendRequest("b", 0, _events(0, 2, b"b"), head_tag=b"b-2"))
    await other.durable.delete_agent("a")
    await other.durable.append(AppendRequest("a", 0, _events(0, 2, b"new"), head_tag=new))
    results = await other.append_batch(
        [
            AppendRequest("a", 2, _events(2, 1, b"next"), head_tag=b"next-3"),
            AppendRequest("b", 2, _events(2, 1, b"b"), head_tag=b"b-3"),
            AppendRequest("a", 3, _events(3, 1, b"next"), head_tag=b"next-4"),
        ]
    )
    assert [r.last_seq for r in results] == [3, 3, 4]  # type: ignore[union-attr]
    stored = await other.durable.read("a")
    assert [e.payload for e in stored] == [b"new-1", b"new-2", b"next-3", b"next-4"]
    assert await reader.read("a") == stored  # was: old-1, old-2, next-3, next-4
    assert await other.hot.head_tag("b") == (3, b"b-3")  # type: ignore[union-attr]
    assert await reader.read("b") == await other.durable.read("b")
    assert reader.stats["fills"] == 1  # (a's alone)


async def test_a_copy_left_by_a_delete_whose_hot_drop_failed_is_not_appended_to(
    stores: list[TieredBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy of a tagged stream left by a tiered delete while its hot tier failed
    (the delete goes on: the tag commits to the chain), the agent written again through
    that store while its hot tier still failed; then another store's unchecked append."""
    first, other, reader = stores
    await _first(first, b"old-2", filled=False)
    hot: Any = first.hot

    async def failing(*args: Any, **kw: Any) -> Any:
        raise ConnectionError("hot tier down")

    monkeypatch.setattr(hot, "delete_agent", failing)
    monkeypatch.setattr(hot, "append_batch", failing)
    assert await first.delete_agent("a")
    await first.append(AppendRequest("a", 0, _events(0, 2, b"new"), head_tag=b"new-2"))
    monkeypatch.undo()
    assert await other.hot.head_tag("a") == (2, b"old-2")  # type: ignore[union-attr]
    stored = await _second(other, b"new-2")
    assert await reader.read("a") == stored  # was: old-1, old-2, next-3


async def test_an_unchecked_append_onto_its_own_copy_is_still_mirrored(
    stores: list[TieredBackend],
) -> None:
    """The copy of the same incarnation keeps being appended to (no refill, no drop);
    the durable tier asked once per append as before."""
    first, other, reader = stores
    await _first(first, b"t-2", filled=True)
    calls: list[str] = []
    real = other.durable.append

    async def counted(request: AppendRequest) -> Any:
        calls.append(request.agent_id)
        return await real(request)

    other.durable.append = counted  # type: ignore[method-assign]
    for seq in (2, 3):
        await other.append(
            AppendRequest("a", seq, _events(seq, 1, b"n"), head_tag=b"t-%d" % (seq + 1))
        )
    assert calls == ["a", "a"]
    assert await other.hot.head_tag("a") == (4, b"t-4")  # type: ignore[union-attr]
    assert await reader.read("a") == await reader.durable.read("a")
    assert reader.stats["hot_hits"] == 1 and reader.stats["fills"] == 0


async def test_a_durable_tier_comparing_no_tags_proves_by_its_head_read(
    stores: list[TieredBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable tier without ``compares_head_tag``: its head and tag read beside the
    copy's before the append (not compared by the commit): another incarnation's copy
    is dropped, the agent's own appended to."""
    first, other, reader = stores
    await _first(first, b"old-2", filled=False)
    monkeypatch.setattr(other.durable, "compares_head_tag", False)
    await other.durable.delete_agent("a")
    await other.durable.append(AppendRequest("a", 0, _events(0, 2, b"new"), head_tag=b"new-2"))
    stored = await _second(other, b"new-2")
    assert await other.hot.head("a") == 0  # type: ignore[union-attr]  # (dropped)
    assert await reader.read("a") == stored  # was: old-1, old-2, next-3
    assert await other.hot.head_tag("a") == (3, b"next-3")  # type: ignore[union-attr]
    await other.append(AppendRequest("a", 3, _events(3, 1, b"next"), head_tag=b"next-4"))
    assert await other.hot.head_tag("a") == (4, b"next-4")  # type: ignore[union-attr]
    assert await reader.read("a") == await reader.durable.read("a")
    assert reader.stats["fills"] == 1


async def test_a_private_memory_hot_copy_of_an_earlier_incarnation_is_not_appended_to(
    tmp_path: Path,
) -> None:
    """A ``memory://`` hot tier (private to its backend): the agent re-made through the
    durable tier alone, then this backend's unchecked append, then its own read."""
    store = TieredBackend(SQLiteBackend(tmp_path / "d.db"), hot=MemoryBackend(), hot_timeout=60)
    await store.initialize()
    try:
        await _first(store, b"old-2", filled=False)
        await store.durable.delete_agent("a")
        await store.durable.append(AppendRequest("a", 0, _events(0, 2, b"new"), head_tag=b"new-2"))
        stored = await _second(store, b"new-2")
        assert await store.read("a") == stored  # was: old-1, old-2, next-3
    finally:
        await store.close()


async def test_a_batch_of_two_appends_at_one_seq_keeps_its_order(
    stores: list[TieredBackend],
) -> None:
    """Two unchecked appends of the agent at the same seq in one batch (a group commit of
    two writers that read the same head): the first wins, as asked, the second is the
    conflict. Was: the first, given the earlier incarnation's copy tag, refused by the
    commit; the second (not proven) landed and was acknowledged; the first, made again
    only after it, refused — the batch's order turned round."""
    first, other, reader = stores
    await _first(first, b"old-2", filled=False)
    await other.durable.delete_agent("a")
    await other.durable.append(AppendRequest("a", 0, _events(0, 2, b"new"), head_tag=b"new-2"))
    results = await other.append_batch(
        [
            AppendRequest("a", 2, _events(2, 1, b"x"), head_tag=b"x-3"),
            AppendRequest("a", 2, _events(2, 1, b"y"), head_tag=b"y-3"),
        ]
    )
    assert isinstance(results[0], AppendResult)  # was: ConflictError (head 3)
    assert isinstance(results[1], ConflictError) and results[1].current_seq == 3
    stored = await other.durable.read("a")
    assert [e.payload for e in stored] == [b"new-1", b"new-2", b"x-3"]
    assert await reader.read("a") == stored
