"""A rebuild beside retention: a retention run that raised the feed's floor past the
rebuild while it seeded made ``rebuild`` raise ``FeedPositionCompacted``; run again it
worked, but with retention running all the time it could fail every time. Now the
rebuild starts over from the floor by itself (a few times at most), and a floor raised
past it every time raises ``ProjectionRebuildOutpaced`` naming why. The retention run
is forced at a named point (right after the seeding), never by timing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import FeedPositionCompacted, ProjectionRebuildOutpaced
from statekeeper.feed import ProjectionRunner
from statekeeper.feed import rebuilding as rebuilding_mod
from statekeeper.feed.seeding import seed_all
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ._shared import current

Opener = Callable[..., StateStore]
KEEP_ONE = RetentionPolicy.parse("* keep_last=1\n")


async def _written_and_compacted(store: StateStore, round_: int) -> None:
    """Another process: a0 written, then a retention run compacting it (the floor rises
    past the events removed, the ones just written among them)."""
    for i in range(3):
        await store.save("a0", {"round": round_, "i": i}, fsm_state=f"r{round_}-{i}")
    report = await apply_retention(store, KEEP_ONE)
    assert report.feed_through is not None


@pytest.mark.parametrize("every_time", [False, True], ids=["once", "every-time"])
async def test_a_rebuild_beside_retention_converges(
    feed_url: str,
    open_store: Opener,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    every_time: bool,
) -> None:
    store = open_store(feed_url)
    for i in range(8):
        await store.save(f"a{i % 3}", {"i": i}, fsm_state=f"s{i}")
    await apply_retention(store, KEEP_ONE)  # a trimmed feed: the rebuild seeds
    rounds: list[int] = []

    async def seeded_then_retention(*args: Any) -> int:
        seeded = await seed_all(*args)
        if every_time or not rounds:
            rounds.append(1)
            await _written_and_compacted(store, len(rounds))
        return seeded

    monkeypatch.setattr(rebuilding_mod, "seed_all", seeded_then_retention)
    async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
        if every_time:
            with pytest.raises(ProjectionRebuildOutpaced) as caught:
                await runner.rebuild("agent_states")
            assert isinstance(caught.value, FeedPositionCompacted)
            assert caught.value.attempts == len(rounds) == rebuilding_mod.ATTEMPTS
            assert "agent_states" in str(caught.value) and "retention" in str(caught.value)
            monkeypatch.undo()  # retention stops: the next rebuild finishes
            await runner.rebuild("agent_states")
        else:
            await runner.rebuild("agent_states")  # started over once by itself
            assert rounds == [1]
        got = await runner.query("SELECT agent_id, state, seq FROM agent_states ORDER BY 1")
        assert got == await current(store)
        (status,) = [s for s in await runner.status() if s.name == "agent_states"]
        assert status.state == "live"
        await store.save("a1", {"after": True}, fsm_state="later")  # following again
        await runner.catch_up(["agent_states"])
        got = await runner.query("SELECT agent_id, state, seq FROM agent_states ORDER BY 1")
        assert got == await current(store)
