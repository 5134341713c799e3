"""A tiered store's hot fill whose check after the copy fails AND whose drop of the
copy then fails too (the hot tier failing at that moment), while another store
sharing the tiers rewrote the agent between the fill's read of the stream and its
write of the copy (a rekey: the same head, head tag and base, new bytes).

Was: the copy stayed in the hot tier under the durable head and head tag (the agent
dirty in the filling process alone), and every other store sharing the hot tier served
its old bytes. Now a copy is written under a pending head tag of its own, which only a
passed check turns into the durable one: a copy whose check did not pass is never
served (the next read anywhere drops it). No durable call is added to a hit. The
interleaving is made with events (no timing); the stream untagged (the raw backend
requests of the fixture's ``_agent``) and tagged (a store's)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError
from statekeeper.records import AppendRequest, RewriteRequest
from statekeeper.testing import request as appended

from .test_tiered_fill_rewrite_race import _agent, stores

__all__ = ["stores"]


async def _tagged(store: TieredBackend) -> tuple[int, bytes | None]:
    """Agent "a", its head tagged (as a store's appends are), the hot copy dropped."""
    first = appended("a", 0, 2)
    await store.append(dataclasses.replace(first, head_tag=b"tag-2"))
    await store.append(AppendRequest("a", 2, appended("a", 2, 2).events, head_tag=b"tag-4"))
    await store.hot.delete_agent("a")  # type: ignore[union-attr]  # (not filled yet)
    return await store.head_tag("a")


@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "tagged"])
async def test_a_fill_whose_check_and_drop_failed_leaves_no_copy_served(
    stores: list[TieredBackend], tagged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    filler, rewriter, reader = stores
    head, tag = await (_tagged(rewriter) if tagged else _agent(rewriter))
    old = (await rewriter.durable.read("a", 0, 1))[0]
    new = dataclasses.replace(old, payload=b"rekeyed", checksum=b"rekeyed-sum")
    copied, rewritten, checking = asyncio.Event(), asyncio.Event(), asyncio.Event()
    real_read = filler.durable.read
    real_delete = filler.hot.delete_agent  # type: ignore[union-attr]
    calls = 0

    async def read(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:  # (the check's read: the copy written)
            checking.set()
            raise BackendError("the durable tier failed (injected)")
        answer = await real_read(*args, **kw)
        if calls == 2:  # (the copy's read: the rewrite lands before the copy's write)
            copied.set()
            await rewritten.wait()
        return answer

    async def delete_agent(agent_id: str) -> bool:
        if checking.is_set():  # (the drop after the failed check)
            raise OSError("the hot tier failed (injected)")
        return await real_delete(agent_id)

    monkeypatch.setattr(filler.durable, "read", read)
    monkeypatch.setattr(filler.hot, "delete_agent", delete_agent)
    filling = asyncio.create_task(filler.read("a"))
    await copied.wait()
    await rewriter.rewrite(RewriteRequest("a", head, tag, (new,)))
    rewritten.set()
    with pytest.raises(BackendError, match="injected"):
        await filling
    monkeypatch.undo()
    assert await reader.head_tag("a") == (head, tag)  # (the rewrite kept them)
    stored = await reader.durable.read("a")
    assert stored[0].payload == b"rekeyed"
    assert await reader.read("a") == stored  # was: the old payload of event 1
    assert await reader.read("a") == stored  # (filled again, checked: served)
    assert reader.stats["hot_hits"] >= 1


async def test_a_checked_fill_is_served(stores: list[TieredBackend]) -> None:
    """A fill whose check passed is served (its pending tag turned into the durable
    one), tagged and untagged alike, and a write after it keeps it served."""
    filler, reader, _ = stores
    await _agent(filler)
    await _tagged_b(filler)
    for agent_id in ("a", "b"):
        stored = await filler.durable.read(agent_id)
        assert await filler.read(agent_id) == stored  # (a miss: filled)
        hits = reader.stats["hot_hits"]
        assert await reader.read(agent_id) == stored
        assert reader.stats["hot_hits"] == hits + 1
    assert filler.stats["fills"] == 2


async def _tagged_b(store: TieredBackend) -> None:
    await store.append(dataclasses.replace(appended("b", 0, 3), head_tag=b"tag-b"))
    await store.hot.delete_agent("b")  # type: ignore[union-attr]
