"""A tiered prune or rewrite whose durable commit may have landed — the durable tier
raised ``BackendError(maybe_applied=True)``: a lost reply it could not settle, a
Redis ``wait_replicas`` write not acknowledged by enough replicas, PostgreSQL's
``retry_timeout`` spent — drops the hot copy as a change that returned does, then
raises that error.

Before, the error left the hot copy as it was: after a prune that had committed, the
store went on serving the pruned history from it (the hot copy's check, head and head
tag, cannot see a prune, which keeps the head record) — the events a retention run
removed, read back through the very store that removed them. Hooked on the durable
tier (the change made, then the error), no timing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.memory import MemoryBackend
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError
from statekeeper.records import RawEvent, RewriteRequest
from statekeeper.testing import request as appended


@pytest.fixture(params=[False, True], ids=["no-cold", "cold"])
async def tiered(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    cold = SQLiteBackend(tmp_path / "cold.db") if request.param else None
    backend = TieredBackend(SQLiteBackend(tmp_path / "d.db"), hot=MemoryBackend(), cold=cold)
    await backend.initialize()
    try:
        yield backend
    finally:
        await backend.close()


def _applied_then_lost(tier: Any, names: tuple[str, ...]) -> list[str]:
    """Each of the tier's ``names`` makes its change, then raises what a reply lost
    past settling does (the change stands)."""
    made: list[str] = []
    for name in names:
        call: Callable[..., Awaitable[Any]] = getattr(tier, name)

        async def hooked(*args: Any, _call: Any = call, _name: str = name, **kw: Any) -> Any:
            await _call(*args, **kw)
            made.append(_name)
            raise BackendError("the reply was lost: committed?", maybe_applied=True)

        setattr(tier, name, hooked)
    return made


_CHANGES = ("prune", "rewrite", "append_together")  # (plain, or with the marker's check)


async def _filled(tiered: TieredBackend) -> None:
    await tiered.append(appended("a", 0, 4, snap_at=2))
    assert [e.seq for e in await tiered.read("a")] == [1, 2, 3, 4]
    assert await tiered.hot.head("a") == 4  # type: ignore[union-attr]  # (the hot copy)


async def test_a_prune_that_may_have_landed_drops_the_hot_copy(tiered: TieredBackend) -> None:
    await _filled(tiered)
    made = _applied_then_lost(tiered.durable, _CHANGES)
    with pytest.raises(BackendError) as caught:
        await tiered.prune("a", 2)
    assert caught.value.maybe_applied and made
    assert [e.seq for e in await tiered.read("a", 2)] == [3, 4]
    assert [e.seq for e in await tiered.read("a")] == [3, 4]  # main: 1-4, the hot copy's
    assert await tiered.hot.head("a") in (0, 4)  # type: ignore[union-attr]


async def test_a_rewrite_that_may_have_landed_drops_the_hot_copy(tiered: TieredBackend) -> None:
    await _filled(tiered)
    made = _applied_then_lost(tiered.durable, _CHANGES)
    head, tag = await tiered.head_tag("a")
    first = (await tiered.read("a", 0, 1))[0]
    again = RawEvent(1, first.type, first.timestamp, b"erased", first.checksum)
    with pytest.raises(BackendError) as caught:
        await tiered.rewrite(RewriteRequest("a", head, tag, (again,)))  # (its head tag kept)
    assert caught.value.maybe_applied and made
    assert (await tiered.read("a", 0, 1))[0].payload == b"erased"  # main: the old bytes
