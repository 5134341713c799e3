"""A process SIGKILLed before each step of a demotion, or of a rehydration, that
changes a tier (each page copied, the snapshot, the marker, the deletes): whatever it
left, the next process finds the agent whole — verify OK, listed and counted once, its
state and its idempotency keys — and can delete it and demote a new agent of that id.
(A guard of the order of those steps, which the fixes of test_tiered_demote_race.py and
test_tiered_rehydrate_race.py changed: a rehydration now deletes the cold copy before
its marker, and a marker beside the whole stream is left alone.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import SQLiteBackend
from statekeeper.backends.tiered import TieredBackend
from statekeeper.backends.tiered_ending import ENDING

_CHILD = Path(__file__).with_name("_tiered_kill_child.py")


def _tiered(where: Path) -> TieredBackend:
    durable, cold = SQLiteBackend(where / "durable.db"), SQLiteBackend(where / "cold.db")
    return TieredBackend(durable, cold=cold, idle_after=1)


async def _setup(where: Path, demoted: bool) -> None:
    async with StateStore(_tiered(where)) as store:
        for n in range(4):
            await store.save("a", {"n": n}, idempotency_key=f"k{n}")
            if n == 1:
                await store.snapshot("a")
        await store.save("b", {"n": 0})
        if demoted:
            assert await store.backend.demote("a")  # type: ignore[attr-defined]


async def _check(where: Path, step: str) -> None:
    backend = _tiered(where)
    async with StateStore(backend) as store:
        report = await store.verify()
        assert report.ok, (step, report.problems)
        assert await backend.count_agents() == 2, step
        assert [i.agent_id for i in await backend.list_agents()] == ["a", "b"], step
        loaded = await store.load("a")
        assert (loaded.seq, loaded.data) == (4, {"n": 3}), step
        assert (await store.save("a", {"n": 3}, idempotency_key="k3")).duplicate, step
        assert await store.delete("a"), step
        await store.save("a", {"other": True})
        if await backend.durable.head(ENDING + "a"):
            # a rehydration killed in its end, announced (tiered_ending): no demotion
            # makes its last step until that process is provably gone and the
            # announcement older than CLAIM_STALE — the agent stays whole meanwhile
            assert not await backend.demote("a"), step
            later = time.time() + 3600
            backend.clock = lambda: later
        assert await backend.demote("a"), step  # (before: ConfigurationError)
        assert (await store.load("a")).data == {"other": True}, step


async def killed_at_each_step(
    tmp_path: Path, op: str, check: Callable[[Path, str], Awaitable[None]]
) -> list[str]:
    """Run the child (``op``: demote, rehydrate) killed before its K-th step for K = 1,
    2, … until it finishes, ``check`` (the store's folder, the step) after each; the
    steps it was killed before, in order."""
    steps: list[str] = []
    for k in range(1, 40):
        where = tmp_path / f"{op}{k}"
        await asyncio.to_thread(where.mkdir)
        await _setup(where, demoted=op == "rehydrate")
        child = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(_CHILD), str(where), op, str(k)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        said = child.stdout.strip().splitlines()
        assert said, child.stderr[-2000:]
        await check(where, said[-1])
        if said[-1] == "done":
            assert child.returncode == 0, child.stderr[-2000:]
            return steps
        assert child.returncode == -9, (said, child.stderr[-2000:])
        steps.append(said[-1])
    pytest.fail("the child never finished")


@pytest.mark.parametrize("op", ["demote", "rehydrate"])
async def test_a_process_killed_at_each_step_leaves_the_agent_whole(
    tmp_path: Path, op: str
) -> None:
    steps = await killed_at_each_step(tmp_path, op, _check)
    assert len(steps) >= 7, steps  # every page, the snapshot, the marker, the deletes
