"""A rebuild interrupted (a crash, Ctrl-C, a failing progress callback) and the feed
then trimmed past where it stood — retention, or ``trim_feed(await runner.consumed())``
run by a process that did not know of it. Was: every later ``rebuild`` resumed from the
stored rebuild position and raised ``FeedPositionCompacted`` ("rebuild the read
model..."), ``since_floor=True`` and ``from_states=True`` included, as did ``run`` and
``catch_up``: the projection was stuck half-built for good, its only way out the
read-model file edited by hand. Now such a rebuild starts over as on a trimmed feed:
from the agents' states when the projection can seed, ``ProjectionNeedsHistory`` when
it cannot, from the floor with ``since_floor=True``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ProjectionNeedsHistory
from statekeeper.feed import ProjectionRunner

Opener = Callable[..., StateStore]


class _Interrupted(Exception):
    pass


def _stop_after(position: int) -> Callable[[int, int], None]:
    def progress(done: int, target: int) -> None:
        if done >= position:
            raise _Interrupted

    return progress


async def test_a_rebuild_trimmed_past_starts_over(
    feed_url: str, open_store: Opener, tmp_path: Path
) -> None:
    store = open_store(feed_url)
    for i in range(12):
        await store.save(f"a{i % 2}", {"i": i}, fsm_state=f"s{i % 3}")
        await store.append(f"a{i % 2}", "tool_call", {"tool": "t", "duration": 0.5})
    live, fresh = tmp_path / "live.db", tmp_path / "fresh.db"
    async with ProjectionRunner(store, live) as runner:
        await runner.catch_up()
        expected = await runner.query("SELECT agent_id, state, seq FROM agent_states ORDER BY 1")
    async with ProjectionRunner(store, fresh, batch_size=2) as runner:
        await runner.catch_up()
        for name in ("transitions", "agent_states"):
            with pytest.raises(_Interrupted):
                await runner.rebuild(name, progress=_stop_after(4))
        states = {s.name: (s.state, s.position) for s in await runner.status()}
        assert states["transitions"][0] == states["agent_states"][0] == "rebuilding"
        assert states["transitions"][1] < 10
        _, head = await store.feed_bounds()
        await store.trim_feed(10)  # past both rebuilds

        # a projection made from events: told what to do, nothing changed ...
        with pytest.raises(ProjectionNeedsHistory):
            await runner.rebuild("transitions")
        # ... and rebuilt from what the feed still holds when asked to
        await runner.rebuild("transitions", since_floor=True)
        # one that can seed: from the agents' states, the same model as the live one
        await runner.rebuild("agent_states")
        assert runner.seeded == 2
        got = await runner.query("SELECT agent_id, state, seq FROM agent_states ORDER BY 1")
        assert got == expected
        states = {s.name: (s.state, s.position) for s in await runner.status()}
        assert states["transitions"] == ("live", head)
        assert states["agent_states"] == ("live", head)
        await runner.catch_up()  # following again
