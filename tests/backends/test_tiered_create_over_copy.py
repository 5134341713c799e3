"""A plain create (an append at 0, one or in a batch) of an agent whose hot copy was
left behind by an earlier agent of that id (a delete whose drop after it failed, told
to its caller alone) while the hot tier is down or failing — the tiers shared with
another tiered store (SQLite files shared by path).

A hot copy is checked by head and head tag alone: an untagged copy left matches the
new untagged stream at its head, and every store sharing the hot tier served the old
agent's events as the new one's — was: the create made, the copy left (dirty in the
writing store alone). Now, as ``append_from_base`` (test_tiered_drop_after_writes),
the copy is dropped before an untagged create, else the create is refused with
nothing written (a tagged create goes: a tag commits to the whole chain)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError
from statekeeper.records import AppendRequest, AppendResult, RawEvent
from statekeeper.testing import request as appended

from .test_tiered_delete_hot_drop import HotDeletes

Opened = Callable[[], Awaitable[TieredBackend]]


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Opened]:
    made: list[TieredBackend] = []

    async def open_one() -> TieredBackend:
        store = TieredBackend(
            SQLiteBackend(tmp_path / "d.db"),
            hot=SQLiteBackend(tmp_path / "h.db"),
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


def _create(agent_id: str = "a", tag: bytes | None = None) -> AppendRequest:
    events = tuple(RawEvent(s, "patch", float(s), b"new-%d" % s, b"ck-%d" % s) for s in range(1, 5))
    return AppendRequest(agent_id, 0, events, head_tag=tag)


async def _left(writer: TieredBackend, down: bool) -> HotDeletes:
    """A copy of an earlier "a" left in the hot tier; its deletes failing (and the hot
    tier marked down in ``writer``, when ``down``)."""
    hot = HotDeletes()
    hot.wrap(writer)
    assert writer.hot is not None
    await writer.hot.append(appended("a", 0, 4))
    hot.failing = True
    if down:
        writer._hot_failed(ConnectionError("hot tier: connection reset"))
    return hot


@pytest.mark.parametrize("down", [True, False], ids=["down", "failing"])
async def test_an_untagged_create_over_a_copy_left_is_refused_until_dropped(
    opened: Opened, down: bool
) -> None:
    writer = await opened()
    hot = await _left(writer, down)
    with pytest.raises(BackendError, match="the create") as refused:
        await writer.append(_create())  # was: made, the old copy served
    assert not refused.value.maybe_applied
    assert await writer.durable.head("a") == 0  # (nothing written)
    hot.failing = False
    await writer.append(_create())
    reader = await opened()
    assert [e.payload for e in await reader.read("a")] == [b"new-%d" % s for s in range(1, 5)]


@pytest.mark.parametrize("down", [True, False], ids=["down", "failing"])
async def test_an_untagged_create_in_a_batch_over_a_copy_left_is_refused_alone(
    opened: Opened, down: bool
) -> None:
    writer = await opened()
    hot = await _left(writer, down)
    results = await writer.append_batch([_create("a"), _create("b", b"t")])
    assert isinstance(results[0], BackendError) and "the create" in str(results[0])
    assert isinstance(results[1], AppendResult)  # (the other made)
    assert await writer.durable.head("a") == 0
    hot.failing = False
    assert isinstance((await writer.append_batch([_create("a")]))[0], AppendResult)
    reader = await opened()
    assert [e.payload for e in await reader.read("a")] == [b"new-%d" % s for s in range(1, 5)]


async def test_a_tagged_create_over_a_copy_left_goes_and_the_copy_is_not_served(
    opened: Opened,
) -> None:
    writer = await opened()
    await _left(writer, True)
    await writer.append(_create(tag=b"t"))
    reader = await opened()
    assert [e.payload for e in await reader.read("a")] == [b"new-%d" % s for s in range(1, 5)]
