"""A rehydration (cold -> durable) that stops part way — an error of the durable tier
mid-copy, or a process killed mid-copy — never leaves the copied part served as the
whole agent: the cold tier still holds the stream, and it is copied again."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.backends import MemoryBackend, SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.errors import BackendError, ConflictError
from statekeeper.records import AppendRequest, AppendResult
from statekeeper.testing import request


class _FailsOnce(MemoryBackend):
    """A durable tier whose n-th append (counted from ``arm``) fails: a lost connection."""

    def __init__(self) -> None:
        super().__init__()
        self.left: int | None = None

    def arm(self, appends_before_failing: int) -> None:
        self.left = appends_before_failing

    async def append(self, request: AppendRequest) -> AppendResult:
        if self.left is not None:
            if self.left == 0:
                self.left = None
                raise BackendError("connection lost", maybe_applied=False)
            self.left -= 1
        return await super().append(request)


async def _five_keyed_appends(backend: TieredBackend) -> None:
    for seq in range(5):
        await backend.append(request("a", seq, key=f"k{seq}"))


async def test_an_error_mid_rehydration_leaves_no_part_served_as_the_agent() -> None:
    durable, cold = _FailsOnce(), MemoryBackend()
    backend = TieredBackend(durable, cold=cold, idle_after=1)
    await _five_keyed_appends(backend)
    assert await backend.demote("a")
    durable.arm(2)  # events 1 and 2 are copied back, then the durable tier fails
    with pytest.raises(BackendError):
        await backend.read("a")
    assert await backend.head("a") == 5
    assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4, 5]
    retried = await backend.append(request("a", 3, key="k3"))  # its key came back too
    assert retried.duplicate and retried.last_seq == 4
    assert await cold.head("a") == 0 and await durable.head(COLD_MARKER + "a") == 0


def _tiered(tmp_path: Path) -> TieredBackend:
    """SQLite durable and cold tiers in ``tmp_path`` (a new process's view of them)."""
    durable, cold = SQLiteBackend(tmp_path / "durable.db"), SQLiteBackend(tmp_path / "cold.db")
    return TieredBackend(durable, cold=cold, idle_after=1)


async def _killed_mid_rehydration(tmp_path: Path) -> None:
    """What a process killed after copying two of five appends back leaves: the cold
    marker, the whole cold copy, and the first two appends in the durable tier."""
    first = _tiered(tmp_path)
    await _five_keyed_appends(first)
    assert await first.demote("a")
    assert first.cold is not None
    for seq, event in enumerate(await first.cold.read("a", 0, 2)):
        await first.durable.append(AppendRequest("a", seq, (event,), idempotency_key=f"k{seq}"))
    await first.close()


async def test_a_process_killed_mid_rehydration_leaves_no_part_served(tmp_path: Path) -> None:
    await _killed_mid_rehydration(tmp_path)
    later = _tiered(tmp_path)
    try:
        assert [i.head_seq for i in await later.list_agents()] == [5]
        assert [e.seq for e in await later.read("a")] == [1, 2, 3, 4, 5]
        assert await later.head("a") == 5
        assert [i.head_seq for i in await later.list_agents()] == [5]
    finally:
        await later.close()


async def test_a_writer_never_forks_the_part_a_killed_rehydration_left(tmp_path: Path) -> None:
    await _killed_mid_rehydration(tmp_path)
    writer = _tiered(tmp_path)
    try:  # a writer that read the head as 2 somewhere: a conflict at the real head
        with pytest.raises(ConflictError) as info:
            await writer.append(request("a", 2))
        assert info.value.current_seq == 5
        assert [e.seq for e in await writer.read("a")] == [1, 2, 3, 4, 5]
    finally:
        await writer.close()


async def test_a_demotion_never_archives_the_part_a_rehydration_left(tmp_path: Path) -> None:
    """The part in the durable tier is not the agent: demoting it would replace the
    whole cold copy with it (and a rehydration under way in another process looks the
    same to the demoting one)."""
    await _killed_mid_rehydration(tmp_path)
    demoter = _tiered(tmp_path)
    try:
        assert not await demoter.demote("a")
        assert [e.seq for e in await demoter.read("a")] == [1, 2, 3, 4, 5]
    finally:
        await demoter.close()


async def test_a_readonly_opening_reads_the_cold_copy_not_the_part(tmp_path: Path) -> None:
    """``statekeeper verify``, ``export`` and the inspector open a tiered store read-only:
    they read a demoted agent from the cold tier, and so the agent a rehydration left
    part way too."""
    await _killed_mid_rehydration(tmp_path)
    durable = SQLiteBackend(tmp_path / "durable.db", readonly=True)
    cold = SQLiteBackend(tmp_path / "cold.db", readonly=True)
    reader = TieredBackend(durable, cold=cold, readonly=True)
    try:
        assert await reader.head("a") == 5
        assert [e.seq for e in await reader.read("a")] == [1, 2, 3, 4, 5]
    finally:
        await reader.close()


async def test_the_demoting_process_looks_at_the_marker_again(tmp_path: Path) -> None:
    """The process that demoted an agent (and had used it before) reads it after
    another process's rehydration of it was killed part way: the whole agent."""
    demoter = _tiered(tmp_path)
    try:
        await _five_keyed_appends(demoter)
        assert [e.seq for e in await demoter.read("a")] == [1, 2, 3, 4, 5]
        assert await demoter.demote("a")
        other = _tiered(tmp_path)  # another process: killed after copying two appends
        assert other.cold is not None
        for seq, event in enumerate(await other.cold.read("a", 0, 2)):
            await other.durable.append(AppendRequest("a", seq, (event,), idempotency_key=f"k{seq}"))
        await other.close()
        assert [e.seq for e in await demoter.read("a")] == [1, 2, 3, 4, 5]
    finally:
        await demoter.close()
