"""A delete of a demoted agent while another process brings it back: the delete stands.

R1 claims the rehydration of "a" and is held with its first page read from the cold
tier, before it lands in the durable tier. Meanwhile another process deletes "a"
(``delete_agent``: the cold copy, the marker, the stream; or ``delete_agent_at``, which
brings the agent back itself first) — acknowledged. R1 goes on: its page lands on no
stream. Before: an agent of one page came back whole (R1's copy, then its end: the
deleted agent served and kept, no error), and of several pages a part came back — the
next page's read found the cold copy gone, and R1 took the stream there for the agent
brought back by another process: its head 1 of 5, served as the agent. Now R1, finding
its claim gone (on these durable tiers only a delete ends a live process's claim), drops
what it copied (a delete conditional on the last record it wrote) and reads the agent as
deleted.

Each "process" is a TieredBackend of its own over one durable store (SQLite file, or a
PostgreSQL schema, or a Redis prefix) and one cold SQLite file; held on a hooked call,
no timing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.testing import request

from ._services import require_postgres, require_redis
from .test_tiered_claims import _MAKERS, _Pause, _redis, _until
from .test_tiered_demote_concurrent import Durable, _drop, _postgres, _process


async def _delete(backend: TieredBackend, op: str) -> None:
    if op == "delete_agent":
        assert await backend.delete_agent("a")
        return
    head = await backend.head("a")  # (brought back by this process too, R1's claim seen)
    last = (await backend.read("a", head - 1, head))[-1]
    assert await backend.delete_agent_at("a", head, last.checksum)


@_MAKERS
@pytest.mark.parametrize("op", ["delete_agent", "delete_agent_at"])
@pytest.mark.parametrize("pages", [1, 3], ids=["one-page", "pages"])
async def test_a_delete_during_a_rehydration_is_not_undone(
    tmp_path: Path, make: Callable[[Path], Durable], op: str, pages: int
) -> None:
    if make is _postgres:
        require_postgres()
    if make is _redis:
        require_redis()
    durable = make(tmp_path)
    setup = _process(tmp_path, durable)
    r1, other, fresh = (_process(tmp_path, durable) for _ in range(3))
    try:
        await setup.durable.initialize()
        for seq in range(3):  # (each keyed append a page of a copy of its own)
            await setup.append(request("a", seq, key=f"k{seq}" if pages > 1 else None))
        await setup.append(request("b", 0))
        assert await setup.demote("a")
        copying = _Pause(r1.durable, "append", when=lambda req: req.agent_id == "a")
        t1 = asyncio.ensure_future(r1.head("a"))
        await _until(copying.reached, t1)  # (its claim made, its first page in hand)
        await _delete(other, op)
        copying.go.set()
        assert await t1 == 0  # (before: 3, or 1 — a part)
        assert await fresh.head("a") == 0  # (before: the deleted agent, or a part of it)
        assert await fresh.read("a") == []
        assert await setup.durable.head("a") == 0
        assert await setup.durable.head(COLD_MARKER + "a") == 0
        assert setup.cold is not None and await setup.cold.head("a") == 0
        assert [i.agent_id for i in await fresh.list_agents()] == ["b"]
        await fresh.append(request("a", 0))  # (a new agent of that id, as ever)
        assert await fresh.head("a") == 1
    finally:
        for t in (setup, r1, other, fresh):
            await t.close()
    await _drop(tmp_path, durable)
