"""Another process's write to an agent while a demotion of it is between its last two
steps (its marker written, the durable stream not yet deleted). The other process took
the marker beside the whole stream for a finished rehydration and deleted the marker
and the cold copy; the demotion's delete of the stream then went through: the agent
gone from every tier, ``demote`` True, no error — after nothing more than a create of
the agent that conflicted (``expected_seq=0``: it exists), or a rewrite (a migration, a
rekey: the demotion's delete, conditional on the head seq only, deleted the rewritten
stream too). Now a marker beside the whole stream is left to its demotion, and the
demotion's delete is conditional on the head event it copied as well.

Each "process" is a TieredBackend of its own over the same SQLite files; the demotion
is held before its delete by a durable tier that waits on an event there: no timing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import ConflictError
from statekeeper.records import (
    AppendRequest,
    AppendResult,
    RawEvent,
    RewriteRequest,
    StreamChange,
)
from statekeeper.testing import request


class _Held(SQLiteBackend):
    """A durable tier whose conditional delete of ``a`` (a demotion's last step) waits
    for ``go``, ``reached`` set when it does."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        if agent_id == "a":
            self.reached.set()
            await self.go.wait()
        return await super().delete_agent_at(agent_id, head, checksum)

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        if any(c.agent_id == "a" and c.delete_at for c in changes):  # (that step, fenced)
            self.reached.set()
            await self.go.wait()
        return await super().append_together(requests, changes)


def _process(tmp_path: Path, durable: SQLiteBackend | None = None) -> TieredBackend:
    durable = durable or SQLiteBackend(tmp_path / "durable.db")
    return TieredBackend(durable, cold=SQLiteBackend(tmp_path / "cold.db"), idle_after=1)


async def _race(
    tmp_path: Path, other_write: Callable[[TieredBackend], Awaitable[None]]
) -> tuple[bool, TieredBackend]:
    held = _Held(tmp_path / "durable.db")
    a, b = _process(tmp_path, held), _process(tmp_path)
    try:
        for seq in range(5):
            await a.append(request("a", seq, key=f"k{seq}"))
        demoting = asyncio.create_task(a.demote("a"))
        await held.reached.wait()  # marker written, the stream not yet deleted
        await other_write(b)
        held.go.set()
        demoted = await demoting
    finally:
        held.go.set()
        await a.close()
        await b.close()
    return demoted, _process(tmp_path)


async def test_a_conflicting_create_during_a_demotion_loses_nothing(tmp_path: Path) -> None:
    async def create(b: TieredBackend) -> None:
        with pytest.raises(ConflictError):
            await b.append(request("a", 0))  # it exists: refused, nothing written

    demoted, fresh = await _race(tmp_path, create)
    try:
        assert demoted
        assert await fresh.head("a") == 5  # (before: 0, the agent in no tier)
        assert [e.seq for e in await fresh.read("a")] == [1, 2, 3, 4, 5]
        assert (await fresh.append(request("a", 2, key="k2"))).duplicate
    finally:
        await fresh.close()


async def test_a_rewrite_during_a_demotion_is_kept(tmp_path: Path) -> None:
    async def rewrite(b: TieredBackend) -> None:
        head, tag = await b.head_tag("a")
        new = tuple(
            RawEvent(e.seq, e.type, e.timestamp, b"rekeyed-%d" % e.seq, bytes(32))
            for e in await b.read("a")
        )
        await b.rewrite(RewriteRequest("a", head, tag, new))

    demoted, fresh = await _race(tmp_path, rewrite)
    try:
        assert not demoted  # (before: True, and the agent gone)
        assert [e.payload for e in await fresh.read("a")] == [
            b"rekeyed-%d" % seq for seq in range(1, 6)
        ]
        assert await fresh.durable.head(COLD_MARKER + "a") == 0
        assert await fresh.cold.head("a") == 0  # type: ignore[union-attr]
        assert await fresh.demote("a")  # and it demotes cleanly later
        assert [e.payload for e in await fresh.read("a")][-1] == b"rekeyed-5"
    finally:
        await fresh.close()
