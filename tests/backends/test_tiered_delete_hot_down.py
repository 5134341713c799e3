"""A delete through a tiered store whose hot tier is down (its deletes fail: the hot
copy cannot be dropped first) of an agent with no stream in the durable tier — never
made, deleted already, or demoted.

Such a delete writes nothing in the durable tier, but it is still refused: a hot copy
of the agent is not provably absent (an earlier delete whose drop after it failed left
one — told to that caller alone, maybe another process — or a store racing that delete
filled one), and a delete answered done with it left lets an agent re-made to the same
head without a head tag be served it. The refusal said only "its hot copy could not be
dropped first"; it now says why one may be there, and nothing is changed. Stores are
SQLite files shared by path (as processes share them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError
from statekeeper.testing import request as appended

from .test_tiered_delete_hot_drop import HotDeletes


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[list[TieredBackend], HotDeletes]]:
    cold = MemoryBackend()
    made = [
        TieredBackend(
            SQLiteBackend(tmp_path / "d.db"),
            hot=SQLiteBackend(tmp_path / "h.db"),
            cold=cold,
            hot_retry_after=3600.0,
        )
        for _ in range(2)
    ]
    failing = HotDeletes()
    for store in made:
        await store.initialize()
        failing.wrap(store)
    try:
        yield made, failing
    finally:
        for store in made:
            await store.close()


async def test_a_delete_of_no_stream_is_refused_saying_why(
    stores: tuple[list[TieredBackend], HotDeletes],
) -> None:
    (store, other), failing = stores
    await store.append(appended("gone", 0, 2))
    assert await store.delete_agent("gone")  # (the hot tier up)
    failing.failing = True
    for agent_id in ("never", "gone"):
        with pytest.raises(BackendError, match="no stream of the agent") as refused:
            await store.delete_agent(agent_id)  # was: no word of why
        assert "a delete whose drop after it failed" in str(refused.value)
        assert not refused.value.maybe_applied
    failing.failing = False
    assert await store.delete_agent("never") is False  # (the hot tier back: done)
    assert await other.head("never") == 0


async def test_a_copy_left_by_a_failed_delete_is_why(
    stores: tuple[list[TieredBackend], HotDeletes],
) -> None:
    """The case the refusal guards: another store's delete left a hot copy (its drop
    after failed, told to it alone); a delete here, answered done, would let the
    agent re-made to the same head without a tag be served that copy."""
    (store, other), failing = stores
    await other.append(appended("a", 0, 2))
    hot = other.hot
    assert hot is not None
    await other.durable.delete_agent("a")  # (the delete's, its drop after it failed)
    assert await hot.head("a") == 2  # the copy left
    failing.failing = True
    with pytest.raises(BackendError, match="no stream of the agent"):
        await store.delete_agent("a")
    assert await hot.head("a") == 2  # (nothing changed: it is still there)
    failing.failing = False
    assert await store.delete_agent("a") is False
    assert await hot.head("a") == 0  # dropped once the hot tier answers


async def test_a_demoted_agent_is_refused_saying_why(
    stores: tuple[list[TieredBackend], HotDeletes],
) -> None:
    (store, other), failing = stores
    await store.append(appended("d", 0, 2))
    assert await store.demote("d")
    failing.failing = True
    with pytest.raises(BackendError, match="demoted") as refused:
        await store.delete_agent("d")  # was: no word of why
    assert not refused.value.maybe_applied
    failing.failing = False
    assert [e.seq for e in await other.read("d")] == [1, 2]  # (nothing deleted)
