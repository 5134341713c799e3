"""A demotion's page copy never lands on another copy that reached the same seq.

D1 demotes "a" (five keyed appends: a page each) and is held after reading its third
page, before appending it to the cold tier. Meanwhile another process deletes "a"
(ending D1's claim), makes a new "a" of two events and demotes it whole (D2). D1 goes
on. Before: its page went onto D2's finished copy (head 2: the seq it expected), so the
cold copy held the new agent's two events under the old one's third, its head 3 where
D2's marker says 2 — every load of the new agent raised ``IntegrityError``, its
acknowledged data unreadable, no delete or demotion clearing it. Now the page is
appended only onto D1's own page before it (the head tag compared in the append, or —
a cold tier without head tags, as S3 — the head record read just before): D1 backs off
and the new agent loads. Held on a condition (the hooked call), no timing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.testing import request

from .test_tiered_claims import _until


def _process(tmp_path: Path, *, tags: bool = True) -> TieredBackend:
    durable, cold = SQLiteBackend(tmp_path / "durable.db"), SQLiteBackend(tmp_path / "cold.db")
    if not tags:  # (a cold tier whose appends compare no head tag, as S3's)
        cold.compares_head_tag = False
    return TieredBackend(durable, cold=cold, idle_after=1)


class _Held:
    reached: asyncio.Event
    go: asyncio.Event


def _read_then_hold(durable: Any) -> _Held:
    """Holds D1 once its read of the third page ("a" after seq 2) returned: the page in
    hand, before it goes to the cold tier."""
    held = _Held()
    held.reached, held.go = asyncio.Event(), asyncio.Event()
    call = durable.read

    async def hooked(agent_id: str, after_seq: int = 0, *args: Any, **kwargs: Any) -> Any:
        events = await call(agent_id, after_seq, *args, **kwargs)
        if agent_id == "a" and after_seq == 2 and not held.reached.is_set():
            held.reached.set()
            await held.go.wait()
        return events

    durable.read = hooked
    return held


@pytest.mark.parametrize("tags", [True, False], ids=["head-tags", "no-head-tags"])
async def test_a_demotions_page_never_lands_on_another_copy(tmp_path: Path, tags: bool) -> None:
    d1, d2 = _process(tmp_path, tags=tags), _process(tmp_path, tags=tags)
    try:
        for seq in range(5):
            await d1.append(request("a", seq, key=f"k{seq}"))
        assert d1.cold is not None
        held = _read_then_hold(d1.durable)
        t1: asyncio.Future[Any] = asyncio.ensure_future(d1.demote("a"))
        await _until(held.reached, t1)
        assert await d2.delete_agent("a")
        for seq in range(2):
            await d2.append(request("a", seq, key=f"new{seq}"))
        new = [e.payload for e in await d2.read("a")]
        assert await d2.demote("a")
        held.go.set()
        assert await t1 is False
        assert [e.payload for e in await d2.read("a")] == new  # (before: IntegrityError)
        assert (await d2.append(request("a", 1, key="new1"))).duplicate
        assert await d2.demote("a")
    finally:
        await d1.close()
        await d2.close()
