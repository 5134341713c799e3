"""Processes sharing a tiered store's durable and cold tiers while one of them brings a
demoted agent back. Process B used the agent (head 5); A demoted it; C's read started
bringing it back, page by page. B, which had looked at the agent's cold marker once
already, took the part C had copied so far for the agent: its ``head`` said 1 (the
agent is at 5: a stale read, no error), and its save at 1 was acknowledged — then C's
next page conflicted, C deleted "its part" and B's acknowledged event with it, and the
next rehydration brought back the five events from the cold tier: B's write gone, no
error anywhere. Now a durable head below the one a process saw sends it to the marker
again (it brings the agent back itself), a part is deleted only while its head event is
the cold copy's, and C, finding the agent brought back by B meanwhile, reads it.

Each "process" is a TieredBackend of its own over the same SQLite files (a process's
memory of the agents it looked at is per backend); C's rehydration is held after its
first page by a durable tier that waits on an event there: no timing.

And ``verify`` (which reads a demoted agent in the cold tier, in place) that found a
rehydration's part, then the cold copy deleted by that rehydration finishing: it read
the agent as not there (head 0); now it reads it in the durable tier, where it is."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import IntegrityError
from statekeeper.records import AppendRequest, AppendResult, RawEvent
from statekeeper.testing import request


class _Held(SQLiteBackend):
    """A durable tier whose second append of ``a`` (a rehydration's second page) waits
    for ``go``, ``reached`` set when it does."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.appends = 0
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    async def append(self, request: AppendRequest) -> AppendResult:
        if request.agent_id == "a":
            self.appends += 1
            if self.appends == 2:
                self.reached.set()
                await self.go.wait()
        return await super().append(request)


def _process(tmp_path: Path, durable: SQLiteBackend | None = None) -> TieredBackend:
    durable = durable or SQLiteBackend(tmp_path / "durable.db")
    return TieredBackend(durable, cold=SQLiteBackend(tmp_path / "cold.db"), idle_after=1)


async def test_a_save_during_another_process_rehydration_is_kept(tmp_path: Path) -> None:
    a, b = _process(tmp_path), _process(tmp_path)
    held = _Held(tmp_path / "durable.db")
    c = _process(tmp_path, held)
    reading: asyncio.Task[list[RawEvent]] | None = None
    try:
        for seq in range(5):  # keyed: one page per append in the rehydration's copy
            await a.append(request("a", seq, key=f"k{seq}"))
        assert await b.head("a") == 5  # B uses the agent
        assert await a.demote("a")
        reading = asyncio.create_task(c.read("a"))  # C brings it back...
        await held.reached.wait()  # ...and has copied its first page
        assert [e.seq for e in await b.read("a")] == [1, 2, 3, 4, 5]  # (before: [1])
        assert await b.head("a") == 5  # (before: 1)
        saved = await b.append(request("a", 5))
        assert (saved.first_seq, saved.duplicate) == (6, False)
        held.go.set()
        assert [e.seq for e in await reading] == [1, 2, 3, 4, 5, 6]  # (no error)
        fresh = _process(tmp_path)
        assert await fresh.head("a") == 6  # (before: 5, B's acknowledged event deleted)
        assert await fresh.durable.head(COLD_MARKER + "a") == 0
        await fresh.close()
    finally:
        held.go.set()
        if reading is not None:
            with contextlib.suppress(Exception):  # (reported by the assertions above)
                await reading
        for backend in (a, b, c):
            await backend.close()


async def test_a_part_with_a_write_on_top_is_not_deleted(tmp_path: Path) -> None:
    """Whatever let a write land on a rehydration's part (a process of an earlier
    version), the part is deleted only while its head is the copy's own event."""
    a = _process(tmp_path)
    try:
        for seq in range(5):
            await a.append(request("a", seq, key=f"k{seq}"))
        assert await a.demote("a")
        first = await a.cold.read("a", 0, 1)  # type: ignore[union-attr]
        await a.durable.append(AppendRequest("a", 0, tuple(first)))  # a part...
        theirs = RawEvent(2, "patch", 2.0, b"theirs", bytes(32))
        await a.durable.append(AppendRequest("a", 1, (theirs,)))  # ...and a write on it
        fresh = _process(tmp_path)
        with pytest.raises(IntegrityError, match="could not be dropped"):
            await fresh.head("a")
        written = await fresh.durable.read("a", 1, 2)
        assert written and written[0].payload == b"theirs"  # kept (before: deleted)
        assert await fresh.cold.head("a") == 5  # type: ignore[union-attr]
        await fresh.close()
    finally:
        await a.close()


class _Racing(SQLiteBackend):
    """A cold tier whose first ``head`` of ``a`` (the in-place check's first read) lets
    ``other`` bring the agent back first."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.other: TieredBackend | None = None

    async def head(self, agent_id: str) -> int:
        other, self.other = self.other, None
        if other is not None and agent_id == "a":
            assert await other.head("a") == 5
        return await super().head(agent_id)


async def test_verify_reads_an_agent_brought_back_while_it_looked(tmp_path: Path) -> None:
    """verify found a rehydration's part (so the agent is read in the cold tier), and
    before it read the cold copy another process finished the rehydration and deleted
    it: the agent is read in the durable tier, no problem reported."""
    a = _process(tmp_path)
    for seq in range(5):
        await a.append(request("a", seq, key=f"k{seq}"))
    assert await a.demote("a")
    first = await a.cold.read("a", 0, 1)  # type: ignore[union-attr]
    await a.durable.append(AppendRequest("a", 0, tuple(first)))  # a killed one's part
    racing = _Racing(tmp_path / "cold.db")
    verifying = TieredBackend(SQLiteBackend(tmp_path / "durable.db"), cold=racing)
    racing.other = other = _process(tmp_path)
    try:
        with verifying.in_place():
            assert await verifying.head("a") == 5
            assert [e.seq for e in await verifying.read("a")] == [1, 2, 3, 4, 5]
        assert racing.other is None  # (the race happened)
    finally:
        for backend in (a, other, verifying):
            await backend.close()
