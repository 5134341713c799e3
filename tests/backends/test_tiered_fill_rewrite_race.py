"""A tiered store filling an agent's hot copy while another store sharing its tiers
rewrites the agent (``rekey``, ``migrate``: new bytes, the same head, head tag and
base) — two processes: SQLite files shared by path, the hot tier a SQLite file or a
Redis prefix.

A hot copy is served when its head and head tag are the durable tier's. The rewriting
store drops the hot copy before its rewrite and again after; a fill that read the
stream before the rewrite and wrote its copy after that second drop checked the durable
head, head tag and base again — all unchanged — and kept the copy: every store sharing
the hot tier then served the old bytes (under a retired key, an old schema). Now the
fill reads what it copied again once its copy is written (the events in the call that
checked the base before, each snapshot it copied): bytes that differ drop the copy. No
durable read is added to a hit. The interleaving is made with events (the fill held
after its read of the stream until the rewrite returned), not timing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.backends.url import open_backend
from statekeeper.records import AppendRequest, RawSnapshot, RewriteRequest
from statekeeper.testing import request as appended

from ._services import fresh_url


@pytest.fixture(params=["sqlite", "redis"])
async def stores(tmp_path: Path, request: Any) -> AsyncIterator[list[TieredBackend]]:
    """Three stores sharing a durable SQLite file and a hot tier (a SQLite file, or a
    Redis prefix of the shared server)."""
    with fresh_url(request.param, tmp_path, "h.db") as hot_url:
        made = [
            TieredBackend(SQLiteBackend(tmp_path / "d.db"), hot=open_backend(hot_url))
            for _ in range(3)
        ]
        for store in made:
            await store.initialize()
        try:
            yield made
        finally:
            for store in made:
                await store.close()


async def _filled_during(
    filler: TieredBackend,
    rewriter: TieredBackend,
    rewrite: RewriteRequest,
    *,
    hold: str,
    refiller: TieredBackend | None = None,
) -> None:
    """``filler`` reads "a" (a miss: its hot copy filled), held after the fill's first
    durable ``hold`` call (``read``: the stream, the miss's own read before it;
    ``latest_snapshot``: its snapshots) until ``rewriter`` has rewritten the agent
    whole (both drops included) — and ``refiller``, when given, has filled the hot
    copy again from the rewritten stream."""
    copied, rewritten = asyncio.Event(), asyncio.Event()
    real = getattr(filler.durable, hold)
    calls = 0

    async def held(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        answer = await real(*args, **kw)
        calls += 1
        if calls == (2 if hold == "read" else 1):
            copied.set()
            await rewritten.wait()
        return answer

    setattr(filler.durable, hold, held)
    filling = asyncio.create_task(filler.read("a"))
    await copied.wait()
    await rewriter.rewrite(rewrite)
    if refiller is not None:
        await refiller.read("a")
        assert refiller.stats["fills"] == 1
    rewritten.set()
    await filling
    setattr(filler.durable, hold, real)


async def _agent(store: TieredBackend) -> tuple[int, bytes | None]:
    snap = RawSnapshot(2, 2.0, b"state-2", b"ssum-2")
    await store.append(AppendRequest("a", 0, appended("a", 0, 2).events, snapshot=snap))
    await store.append(appended("a", 2, 2))
    assert await store.hot.head("a") == 4  # type: ignore[union-attr]  # (mirrored)
    await store.hot.delete_agent("a")  # type: ignore[union-attr]  # (not filled yet)
    return await store.head_tag("a")


async def test_a_fill_racing_a_rewrite_keeps_no_old_bytes(
    stores: list[TieredBackend],
) -> None:
    filler, rewriter, reader = stores
    head, tag = await _agent(rewriter)
    old = (await rewriter.durable.read("a", 0, 1))[0]
    new = dataclasses.replace(old, payload=b"rekeyed", checksum=b"rekeyed-sum")
    await _filled_during(filler, rewriter, RewriteRequest("a", head, tag, (new,)), hold="read")
    assert await reader.head_tag("a") == (head, tag)  # (the rewrite kept them)
    stored = await reader.durable.read("a")
    assert stored[0].payload == b"rekeyed"
    assert await reader.read("a") == stored  # was: the old payload of event 1
    assert await filler.read("a") == stored


async def test_a_fill_racing_a_snapshot_rewrite_keeps_no_old_snapshot(
    stores: list[TieredBackend],
) -> None:
    """The fill read the snapshot before the rewrite; a third store filled the copy
    anew after it; the fill's save of its old snapshot lands on that copy (its events
    are there): the events the same, its check passed — was: the old snapshot served."""
    filler, rewriter, reader = stores
    head, tag = await _agent(rewriter)
    new = RawSnapshot(2, 2.0, b"rekeyed-state", b"rekeyed-ssum")
    rewrite = RewriteRequest("a", head, tag, (), (new,))
    await _filled_during(filler, rewriter, rewrite, hold="latest_snapshot", refiller=reader)
    assert await reader.durable.latest_snapshot("a") == new
    assert await reader.read("a") == await reader.durable.read("a")
    assert await reader.latest_snapshot("a") == new  # was: the old snapshot's bytes
