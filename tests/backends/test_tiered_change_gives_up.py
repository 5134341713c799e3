"""A prune or a rewrite whose check of the agent's cold marker fails at every try —
another process changing the marker (a demotion's claim given another head tag, as a
change's fence does) between each look and each commit (hooked, no timing) — gives up
with :class:`BackendError` naming the agent, nothing changed. Was: after the bounded
tries it returned "this tier cannot check" and the caller made the change UNCHECKED — the
very change a demotion whose last step commits meanwhile undoes (the history back, the
old bytes served at a later load, no error)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.tiered import COLD_MARKER, TieredBackend
from statekeeper.backends.tiered_rehydrate import _ATTEMPTS
from statekeeper.errors import BackendError
from statekeeper.records import RawEvent, RewriteRequest, StreamChange

from ._tiered_interleave import MAKERS, Make, processes
from .test_tiered_claims import _final_step, _until
from .test_tiered_demote_concurrent import _HEAD, _setup


async def _prune(b: TieredBackend) -> None:
    await b.prune("a", 3)


async def _rewrite(b: TieredBackend) -> None:
    head, tag = await b.head_tag("a")
    first = (await b.read("a", 0, 1))[0]
    again = RawEvent(1, first.type, first.timestamp, b"rekeyed", first.checksum)
    await b.rewrite(RewriteRequest("a", head, tag, (again,)))


async def _unchanged(b: TieredBackend) -> None:
    events = await b.read("a")
    assert [e.seq for e in events] == list(range(1, _HEAD + 1))  # (not pruned)
    assert events[0].payload != b"rekeyed"  # (not rewritten)


def _changes_a(changes: Any) -> bool:
    return any(
        isinstance(c, StreamChange)
        and c.agent_id == "a"
        and (c.prune_to is not None or c.rewrite is not None)
        for c in changes
    )


class _MarkerMover:
    """Before each commit of a change of "a" by ``tier``: the agent's marker given
    another head tag (what another process's fence of a demotion's claim does), so
    that commit's check of the marker fails, every time."""

    def __init__(self, tier: Any) -> None:
        self.moved = 0
        call = tier.append_together

        async def hooked(requests: Any, changes: Any = ()) -> Any:
            if _changes_a(changes):
                self.moved += 1
                marker = COLD_MARKER + "a"
                seq, tag = await tier.head_tag(marker)
                fence = RewriteRequest(marker, seq, tag, head_tag=secrets.token_bytes(16))
                await tier.rewrite(fence)
            return await call(requests, changes)

        tier.append_together = hooked


@pytest.mark.parametrize("change", [_prune, _rewrite], ids=["prune", "rewrite"])
@MAKERS
async def test_a_change_whose_marker_moves_at_every_check_gives_up_unchanged(
    tmp_path: Path, make: Make, change: Callable[[TieredBackend], Awaitable[None]]
) -> None:
    async with processes(tmp_path, make, 4) as (_, (setup, d1, other, fresh)):
        await _setup(setup)
        if not other._changes_with_claim_check():
            pytest.skip("this durable tier commits no change with the marker's check")
        last = _final_step(d1)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)  # (its claim the marker, its copy whole)
        mover = _MarkerMover(other.durable)
        with pytest.raises(BackendError, match=r"agent 'a' was not changed.*nothing was"):
            await change(other)
        assert mover.moved == _ATTEMPTS
        await _unchanged(fresh)  # (before: the change made unchecked after all)
        last.go.set()
        assert await t1 is False  # (its claim fenced: nothing deleted)
        await _unchanged(fresh)
        assert await fresh.durable.head("a") == _HEAD
        await change(fresh)  # (nothing in the way now: made, and checked)
