"""A tiered store filling an agent's hot copy while another store sharing its tiers
prunes the agent (two processes: SQLite files shared by path).

A hot copy is checked by head and head tag alone, which a prune keeps. The pruning
store drops the hot copy before its prune and again after; a fill that read the
stream before the prune and wrote its copy after that second drop checked the durable
head and head tag again — unchanged — and kept the copy: every store sharing the hot
tier then served the pruned history. Now the fill checks the stream's base too (a prune
moves it): the copy is dropped. The interleaving is made with events (the fill held
after its read of the stream until the prune returned), not timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.records import AppendRequest, RawSnapshot
from statekeeper.testing import request as appended


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[list[TieredBackend]]:
    made = [
        TieredBackend(SQLiteBackend(tmp_path / "d.db"), hot=SQLiteBackend(tmp_path / "h.db"))
        for _ in range(3)
    ]
    for store in made:
        await store.initialize()
    try:
        yield made
    finally:
        for store in made:
            await store.close()


async def test_a_fill_racing_a_prune_keeps_no_pruned_history(
    stores: list[TieredBackend],
) -> None:
    filler, pruner, reader = stores
    snap = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
    await pruner.append(AppendRequest("a", 0, appended("a", 0, 2).events, snapshot=snap))
    await pruner.append(appended("a", 2, 2))
    assert await pruner.hot.head("a") == 4  # type: ignore[union-attr]  # (mirrored)
    await pruner.hot.delete_agent("a")  # type: ignore[union-attr]  # (not filled yet)

    copied, pruned = asyncio.Event(), asyncio.Event()
    real = filler.durable.read
    reads = 0

    async def read(*args: Any, **kw: Any) -> Any:
        nonlocal reads
        events = await real(*args, **kw)
        reads += 1
        if reads == 2:  # (the fill's read of the stream: held until the prune is done)
            copied.set()
            await pruned.wait()
        return events

    filler.durable.read = read  # type: ignore[method-assign]
    filling = asyncio.create_task(filler.read("a"))  # (a miss: the copy filled)
    await copied.wait()
    await pruner.prune("a", 2)
    pruned.set()
    assert [e.seq for e in await filling] == [1, 2, 3, 4]  # (read before the prune)
    stored = [e.seq for e in await reader.durable.read("a")]
    assert [e.seq for e in await reader.read("a")] == stored  # was: [1, 2, 3, 4]
