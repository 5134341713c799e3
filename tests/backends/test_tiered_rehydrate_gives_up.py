"""A rehydration whose agent another process keeps changing under it — its marker
changed, or what it copied back deleted, each time it looks — gives up with
:class:`BackendError` naming the agent after a bounded number of looks. Was: each look
started a new one with its count at 0 (``attempt`` not passed on): the load recursed until
a raw RecursionError, or spun for as long as the change came back."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.backends import MemoryBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.backends.tiered_rehydrate import _ATTEMPTS
from statekeeper.errors import BackendError
from statekeeper.testing import request


async def _demoted() -> TieredBackend:
    backend = TieredBackend(MemoryBackend(), cold=MemoryBackend(), idle_after=1)
    for seq in range(3):
        await backend.append(request("a", seq))
    assert await backend.demote("a")
    return backend


@pytest.mark.timeout(120)  # (a safety net only)
async def test_a_marker_that_changes_at_every_look_gives_up_typed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = await _demoted()
    looks: list[str] = []

    async def changed(self: Any, cold: Any, agent_id: str, entry: Any) -> bool:
        looks.append(agent_id)
        return True  # "the marker changed meanwhile: look again", every time

    monkeypatch.setattr(TieredBackend, "_end_deleted", changed)
    with pytest.raises(BackendError, match=r"agent 'a' was not brought back.*marker changed"):
        await backend.read("a")
    assert len(looks) == _ATTEMPTS + 1
    monkeypatch.undo()
    assert [e.seq for e in await backend.read("a")] == [1, 2, 3]  # nothing lost


@pytest.mark.timeout(120)  # (a safety net only)
async def test_a_copy_deleted_under_every_look_gives_up_typed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = await _demoted()
    copies: list[int] = []

    async def deleted(self: Any, agent_id: str, ours: Any, entry: Any, wrote: Any) -> bool:
        copies.append(await self.durable.head(agent_id))
        await self.durable.delete_agent(agent_id)  # what it copied, deleted under it
        return True

    monkeypatch.setattr(TieredBackend, "_deleted_under", deleted)
    with pytest.raises(BackendError, match=r"agent 'a' was not brought back.*deleted"):
        await backend.head("a")
    assert copies == [3] * (_ATTEMPTS + 1)
    monkeypatch.undo()
    assert [e.seq for e in await backend.read("a")] == [1, 2, 3]
