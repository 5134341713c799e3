"""A consumer resumes from its own cursor after the agent holding the feed's newest
events was deleted. On PostgreSQL the feed's head is the largest position still stored:
a process opened after the delete saw a lower head and refused the consumer's cursor as
"beyond the feed's head: not a cursor of this store" (``InvalidArgument``), live or
catching up, until some other append moved the head past it — a projection runner
restarted then failed for nothing. A resume point is now checked against the last
position the feed handed out (the sequence's), and the subscription resumes: nothing
to catch up, then the next append, once."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import InvalidArgument
from statekeeper.feed import ProjectionRunner

from ..backends._services import fresh_url


@pytest.mark.parametrize("engine", ["memory", "sqlite", "postgresql", "redis"])
async def test_a_cursor_past_a_deleted_agent_resumes(tmp_path: Path, engine: str) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store:
            await store.save("keep", {"n": 0})
            for n in range(3):
                await store.save("gone", {"n": n})
            seen = [c async for c in store.subscribe(stop_at_head=True)]
            cursor = seen[-1].position
            assert seen[-1].agent_id == "gone"
            async with ProjectionRunner(store, tmp_path / "rm.db") as runner:
                await runner.catch_up()
            # the engine's own delete: no tombstone after the agent's positions (a
            # store's delete appends one: tests/feed/test_delete_tombstones.py), so
            # they are the feed's newest
            await store.backend.delete_agent("gone")
            async with contextlib.AsyncExitStack() as stack:
                reopened = store  # (a memory store is its process's)
                if engine != "memory":
                    # a process restarted after the delete
                    reopened = await stack.enter_async_context(StateStore(url))
                caught = reopened.subscribe(from_position=cursor, stop_at_head=True)
                assert [c async for c in caught] == []
                live = reopened.subscribe(from_position=cursor)
                first = asyncio.create_task(anext(live))
                await reopened.save("keep", {"n": 1})
                change = await asyncio.wait_for(first, 60)
                assert (change.agent_id, change.seq) == ("keep", 2)
                assert change.position > cursor
                async with ProjectionRunner(reopened, tmp_path / "rm.db") as runner:
                    await runner.catch_up()  # (refused, the runner failed, before)
                    rows = await runner.query("SELECT agent_id, seq FROM agent_states")
                    assert ("keep", 2) in rows


async def test_another_stores_cursor_is_still_refused(tmp_path: Path) -> None:
    with fresh_url("postgresql", tmp_path) as url:
        async with StateStore(url) as store:
            for n in range(3):
                await store.save("a", {"n": n})
            _, head = await store.feed_bounds()
            with pytest.raises(InvalidArgument, match="beyond the feed's head"):
                await anext(store.subscribe(from_position=head + 1))
