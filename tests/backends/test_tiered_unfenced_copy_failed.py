"""A prune on a durable tier without fencing (no ``append_together``: a Redis cluster,
S3) while a demotion of the agent is under way: the prune commits, then prunes that
demotion's cold copy too (:mod:`statekeeper.backends.tiered_unfenced`). When that
second step failed (the cold tier down), the cold tier's own error was raised as is —
``maybe_applied`` False: "nothing was written" — so the hot copy was kept (the tiered
store drops it after a change only when the change may stand) and served the pruned
history on, and the caller (retention) took the committed prune for not made. Now:
``BackendError(maybe_applied=True)`` naming the agent and what to do (prune again),
the hot copy dropped. Held by hooks on the tiers' calls (no timing)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends import MemoryBackend, SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.errors import BackendError

from .test_tiered_claims import _final_step, _until
from .test_tiered_demote_concurrent import _HEAD, _setup
from .test_tiered_demote_pruned import _Unfenced


class _ColdDown(SQLiteBackend):
    """A cold tier whose reads fail once :attr:`down` is set (the cold tier unreachable)."""

    down = False

    async def read(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise BackendError("the cold tier is down (test)")
        return await super().read(*args, **kwargs)


async def test_a_prune_whose_demotions_copy_could_not_be_pruned_says_it_may_stand(
    tmp_path: Path,
) -> None:
    cold = tmp_path / "cold.db"

    def process(cold_tier: SQLiteBackend, **tiers: Any) -> TieredBackend:
        durable = _Unfenced(tmp_path / "durable.db")
        return TieredBackend(durable, cold=cold_tier, idle_after=1, hot_timeout=60, **tiers)

    failing = _ColdDown(cold)
    setup, d1 = process(SQLiteBackend(cold)), process(SQLiteBackend(cold))
    other = process(failing, hot=MemoryBackend())
    last = _final_step(d1)
    t1: asyncio.Future[bool] | None = None
    try:
        await _setup(setup)
        assert (await other.read("a"))[0].seq == 1  # (its hot copy filled)
        t1 = asyncio.ensure_future(d1.demote("a"))
        await _until(last.reached, t1)  # (its copy whole, its look at the base made)
        failing.down = True
        with pytest.raises(BackendError) as info:
            await other.prune("a", 3)
        failing.down = False
        # the prune stands in the durable tier: said so (was: maybe_applied False, the
        # cold tier's message alone), and its hot copy is not served (was: events 1-5)
        assert info.value.maybe_applied
        assert "'a'" in str(info.value) and "prune" in str(info.value)
        assert (await other.read("a"))[0].seq == 4
        last.go.set()
        assert await t1 is True  # (its copy, unpruned, is the agent now: as the error said)
        await other.prune("a", 3)  # (pruned again: brought back, then pruned)
        assert (await other.read("a"))[0].seq == 4
        assert await other.durable.head("a") == _HEAD
    finally:
        last.go.set()
        if t1 is not None:
            await asyncio.gather(t1, return_exceptions=True)
        for t in (setup, d1, other):
            await t.close()
