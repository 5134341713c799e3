"""A rehydration whose agent another process keeps changing under it — its marker
changed, or what it copied back deleted, each time it looks — gives up with
:class:`BackendError` naming the agent after a bounded number of looks. Was: each look
started a new one with its count at 0 (``attempt`` not passed on): the load recursed until
a raw RecursionError, or spun for as long as the change came back."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.backends import MemoryBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.backends.tiered_rehydrate import _ATTEMPTS
from statekeeper.errors import BackendError, IntegrityError
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


class _Dropper:
    """Before each page of "a" after the first is copied back into ``tier``: the stream
    deleted — another rehydration dropping what this one copied (its own copy to come)."""

    def __init__(self, tier: Any) -> None:
        self.dropped: list[int] = []
        for name in ("append", "append_together"):
            setattr(tier, name, self._hook(tier, getattr(tier, name)))

    def _hook(self, tier: Any, call: Any) -> Any:
        async def hooked(*args: Any) -> Any:
            first = args[0][0] if isinstance(args[0], list) else args[0]
            if first.agent_id == "a" and first.expected_seq > 0:
                self.dropped.append(first.expected_seq)
                await tier.delete_agent("a")
            return await call(*args)

        return hooked


@pytest.mark.timeout(120)  # (a safety net only)
async def test_a_copy_dropped_under_every_look_gives_up_with_backend_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Was: once the bound was reached, the page's ConflictError itself raised to the
    load — "expected head seq 1, stored head is 0", for a load that wrote nothing."""
    backend = TieredBackend(MemoryBackend(), cold=MemoryBackend(), idle_after=1)
    for seq in range(3):  # (keyed: a page each)
        await backend.append(request("a", seq, key=f"k{seq}"))
    assert await backend.demote("a")
    durable = backend.durable
    with monkeypatch.context() as patched:
        for name in ("append", "append_together"):
            patched.setattr(durable, name, getattr(durable, name))
        dropper = _Dropper(durable)
        with pytest.raises(BackendError, match=r"agent 'a' was not brought back.*try again"):
            await backend.read("a")
    assert dropper.dropped == [1] * (_ATTEMPTS + 1)
    assert [e.seq for e in await backend.read("a")] == [1, 2, 3]  # nothing lost


class _Unfenced(MemoryBackend):
    """A durable tier that commits no several streams at once (a Redis cluster): its
    claims name no owner, a rehydration copies under the marker it read."""

    appends_together = False


async def test_a_marker_changed_during_the_copy_is_looked_at_again() -> None:
    """While a load copies "a" back, another process deletes it, writes a new "a" and
    demotes that one (another marker); the load's next page conflicts. Was: that
    ConflictError raised to the load; now the load looks again and reads the new "a"."""
    durable, cold = _Unfenced(), MemoryBackend()
    backend = TieredBackend(durable, cold=cold, idle_after=1)
    other = TieredBackend(durable, cold=cold, idle_after=1)
    for seq in range(3):
        await backend.append(request("a", seq, key=f"k{seq}"))
    assert await backend.demote("a")
    plain, hits = durable.append, list[Any]()

    async def append(req: Any) -> Any:
        if req.agent_id == "a" and req.expected_seq == 1 and not hits:
            hits.append(req)
            assert await other.delete_agent("a")
            for seq in range(2):
                await other.append(request("a", seq))
            assert await other.demote("a")
        return await plain(req)

    durable.append = append  # type: ignore[method-assign,assignment]
    assert [e.seq for e in await backend.read("a")] == [1, 2]  # (the new "a")
    assert hits
    assert await backend.durable.head(COLD_MARKER + "a") == 0


async def test_a_gap_in_the_cold_copy_raises_integrity_error_at_once() -> None:
    """A cold copy with a gap (damaged, the marker and the copy's head unchanged: no
    other process in the way) fails its copy back with IntegrityError at the first
    try. Was: taken for another rehydration's race and copied again _ATTEMPTS times
    first."""
    backend = await _demoted()
    cold = backend.cold
    assert cold is not None
    plain, reads = cold.read, []

    async def read(agent_id: str, after: int = 0, *args: Any, **kwargs: Any) -> Any:
        events = await plain(agent_id, after, *args, **kwargs)
        if agent_id == "a" and after == 0 and len(events) == 3:
            reads.append(after)
            return events[1:]  # (seq 1 missing)
        return events

    cold.read = read  # type: ignore[method-assign,assignment]
    with pytest.raises(IntegrityError, match="gap"):
        await backend.read("a")
    assert len(reads) == 1
    cold.read = plain  # type: ignore[method-assign]
    assert [e.seq for e in await backend.read("a")] == [1, 2, 3]
