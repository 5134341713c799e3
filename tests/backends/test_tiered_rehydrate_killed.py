"""A rehydration SIGKILLed after it copied the agent back (before deleting the cold copy,
or before deleting the marker): the agent stays demotable. Its marker, left beside the
whole stream, names the rehydration's process (a claim, as a demotion's does), so once
that process is provably gone and the claim old, a demotion takes it over by the same
rule as a dead demotion's claim. Was: the marker named no owner, and no demotion ever
took it over — the agent never demoted again (``demote`` False for ever).

The child kills itself just before its K-th call that changes a tier (a condition, not
a time: ``_tiered_kill_child.py``); every K up to the rehydration's end is tried."""

from __future__ import annotations

import time
from pathlib import Path

from statekeeper import StateStore
from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import COLD_MARKER, TieredBackend

from .test_tiered_killed_steps import killed_at_each_step


def _later(where: Path) -> TieredBackend:
    """Another process, an hour after the child's claim (older than the takeover's
    threshold, whatever the machine's load)."""
    durable, cold = SQLiteBackend(where / "durable.db"), SQLiteBackend(where / "cold.db")
    return TieredBackend(durable, cold=cold, idle_after=1, clock=lambda: time.time() + 3600)


async def _demotable(where: Path, step: str) -> None:
    backend = _later(where)
    async with StateStore(backend) as store:
        loaded = await store.load("a")
        assert (loaded.seq, loaded.data) == (4, {"n": 3}), step
        assert await backend.demote("a"), step  # (before: False, for ever)
        assert await backend.durable.head("a") == 0, step
        assert await backend.durable.head(COLD_MARKER + "a") == 2, step  # (demoted)
        loaded = await store.load("a")  # brought back whole, its keys too
        assert (loaded.seq, loaded.data) == (4, {"n": 3}), step
        assert (await store.save("a", {"n": 3}, idempotency_key="k3")).duplicate, step
        assert (await store.verify()).ok, step
        assert await backend.count_agents() == 2, step
        assert await backend.demote("a"), step  # (its own end: nothing left behind)


async def test_a_rehydration_killed_after_copying_back_leaves_the_agent_demotable(
    tmp_path: Path,
) -> None:
    steps = await killed_at_each_step(tmp_path, "rehydrate", _demotable)
    # the last steps: after the copy back, its end announced (tiered_ending), the cold
    # copy's delete, the marker's and the announcement's (each a conditional delete:
    # on SQLite its own append_together, a step of its own)
    assert steps[-7:] == [
        "kill before durable.append_together",
        "kill before cold.delete_agent_at",
        "kill before cold.append_together",
        "kill before durable.delete_agent_at",
        "kill before durable.append_together",
        "kill before durable.delete_agent_at",
        "kill before durable.append_together",
    ]
