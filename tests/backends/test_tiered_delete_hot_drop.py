"""A delete through a tiered store whose hot-copy drop fails (an injected error in the hot
tier's deletes), the hot and durable tiers shared with other tiered stores.

Another store checks a hot copy by head and head tag alone: an agent deleted and re-made
to the same head with no head tag (its events other bytes) matched the copy the failed
drop left, and was served the deleted agent's data. The delete dropped the hot copy
last: its failure marked the agent dirty in the deleting process alone and the delete
returned done. Now the copy is dropped before anything is deleted: a failure refuses
the delete (nothing deleted, ``maybe_applied`` False) and a retry finishes; a stream
whose head carries a tag (which commits to its whole chain: no re-made stream is taken
for it) is deleted even so. A copy another store fills between that drop and the
delete is dropped after; when that fails the delete says so (``maybe_applied``).
Stores are SQLite files shared by path (as processes share them); a third store opened
afterwards (a process started later) is the reader that knows nothing of any failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError
from statekeeper.records import AppendRequest, RawEvent
from statekeeper.testing import request as appended

Opened = Callable[[], Awaitable[TieredBackend]]


class HotDeletes:
    """The hot tier's deletes fail (a ``ConnectionError``) while ``failing`` (each store
    given to :meth:`wrap`: the hot tier is one, shared)."""

    def __init__(self) -> None:
        self.failing = False
        self.calls = 0

    def wrap(self, store: TieredBackend) -> None:
        hot = store.hot
        assert hot is not None
        real = hot.delete_agent

        async def delete_agent(agent_id: str, *args: Any, **kw: Any) -> bool:
            self.calls += 1
            if self.failing:
                raise ConnectionError("hot tier: connection reset")
            return await real(agent_id, *args, **kw)

        hot.delete_agent = delete_agent  # type: ignore[method-assign]


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Opened]:
    made: list[TieredBackend] = []

    async def open_one() -> TieredBackend:
        store = TieredBackend(
            SQLiteBackend(tmp_path / "d.db"),
            hot=SQLiteBackend(tmp_path / "h.db"),
            hot_retry_after=3600.0,  # (a failure marks it down: tried again all the same)
        )
        await store.initialize()
        made.append(store)
        return store

    try:
        yield open_one
    finally:
        for store in made:
            await store.close()


def _remade(agent_id: str, count: int, tag: bytes | None = None) -> AppendRequest:
    """``agent_id`` made again: ``count`` events of other bytes than the deleted ones."""
    events = tuple(RawEvent(s, "patch", float(s), b"new-%d" % s, b"ck") for s in range(1, 5))
    return AppendRequest(agent_id, 0, events[:count], head_tag=tag)


async def _payloads(store: TieredBackend) -> list[bytes]:
    return [e.payload for e in await store.read("a")]


async def _delete(store: TieredBackend, how: str) -> bool:
    if how == "delete_agent":
        return await store.delete_agent("a")
    head = await store.head("a")
    return await store.delete_agent_at("a", head, await store.head_checksum("a", head))


@pytest.mark.parametrize("how", ["delete_agent", "delete_agent_at"])
async def test_a_delete_whose_hot_drop_fails_deletes_nothing(opened: Opened, how: str) -> None:
    writer, reader = await opened(), await opened()
    hot = HotDeletes()
    hot.wrap(writer)
    await writer.append(appended("a", 0, 4))
    old = await _payloads(reader)  # (the shared hot copy filled)
    hot.failing = True
    with pytest.raises(BackendError, match="hot copy could not be dropped first") as caught:
        await _delete(writer, how)  # was: done, the hot copy left
    assert not caught.value.maybe_applied
    assert await writer.durable.head("a") == 4  # (the agent whole)
    assert await _payloads(reader) == old
    hot.failing = False
    assert await _delete(writer, how)  # (the retry finishes)
    assert await writer.head("a") == 0 and await reader.head("a") == 0


@pytest.mark.parametrize("how", ["delete_agent", "delete_agent_at"])
async def test_a_deleted_agent_re_made_is_never_served_its_old_data(
    opened: Opened, how: str
) -> None:
    writer, remaker = await opened(), await opened()
    hot = HotDeletes()
    hot.wrap(writer)
    hot.wrap(remaker)
    await writer.append(appended("a", 0, 4))
    assert await _payloads(remaker) == [b"payload-%d" % s for s in range(1, 5)]  # (hot filled)
    hot.failing = True
    try:
        await _delete(writer, how)
    except BackendError:
        hot.failing = False
        assert await _delete(writer, how)  # (refused: deleted once the hot tier answers)
    hot.failing = True  # (the re-make's own drop of a copy in its way fails too: an
    with pytest.raises(BackendError, match="the create"):  # untagged create refused,
        await remaker.append(_remade("a", 4))  # nothing written: test_tiered_create_over_copy)
    assert await remaker.durable.head("a") == 0
    hot.failing = False
    await remaker.append(_remade("a", 4))  # (the same head, no head tag)
    reader = await opened()  # (a process started later: it saw no failure)
    assert await _payloads(reader) == [b"new-1", b"new-2", b"new-3", b"new-4"]
    assert await _payloads(remaker) == await _payloads(reader)


async def test_a_tagged_stream_is_deleted_while_the_hot_tier_fails(opened: Opened) -> None:
    """(no refusal where none is needed: a re-made stream never matches the copy left)"""
    writer, remaker = await opened(), await opened()
    hot = HotDeletes()
    hot.wrap(writer)
    hot.wrap(remaker)
    first = appended("a", 0, 4)
    await writer.append(AppendRequest("a", 0, first.events, head_tag=b"tag-of-the-old-chain"))
    assert len(await _payloads(remaker)) == 4  # (the shared hot copy filled)
    hot.failing = True
    assert await writer.delete_agent("a")  # (the copy left: tagged)
    assert await writer.durable.head("a") == 0
    with pytest.raises(BackendError, match="the create"):  # (an untagged create while
        await remaker.append(_remade("a", 4))  # the hot tier fails: test_tiered_create_over_copy)
    hot.failing = False
    await remaker.append(_remade("a", 4))  # (the same head, no head tag)
    assert await _payloads(await opened()) == [b"new-1", b"new-2", b"new-3", b"new-4"]


async def test_a_copy_filled_between_the_drop_and_the_delete_is_reported_left(
    opened: Opened,
) -> None:
    writer, reader = await opened(), await opened()
    hot = HotDeletes()
    hot.wrap(writer)
    await writer.append(appended("a", 0, 4))
    durable_delete = writer.durable.delete_agent
    once = [True]

    async def filled_first(agent_id: str) -> bool:
        if agent_id == "a" and once and once.pop():  # (after the first drop: a fill)
            await _payloads(reader)
            assert await reader.hot.head("a") == 4  # type: ignore[union-attr]
            hot.failing = True  # (and the hot tier fails before the second)
        return await durable_delete(agent_id)

    writer.durable.delete_agent = filled_first  # type: ignore[method-assign]
    with pytest.raises(BackendError, match="dropped after") as caught:
        await writer.delete_agent("a")  # was: True, the copy left
    assert caught.value.maybe_applied
    assert await writer.durable.head("a") == 0
    with pytest.raises(BackendError, match="dropped first"):  # (the retry waits for it)
        await writer.delete_agent("a")
    hot.failing = False
    assert not await writer.delete_agent("a")
    assert await reader.hot.head("a") == 0  # type: ignore[union-attr]
