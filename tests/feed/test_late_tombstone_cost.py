"""What telling late tombstones apart costs a replay: the positions of the re-created
agents' first events are asked once a page, never once an agent (on SQLite and Redis,
whose feeds have no index by agent, each ask reads the feed back from its head: one an
agent made a replay grow with the number of re-created agents squared)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore


async def test_a_replay_asks_the_first_events_positions_once_a_page_not_once_an_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = 60
    async with StateStore(f"sqlite:///{tmp_path / 'a.db'}") as store:
        for n in range(agents):
            await store.save(f"a{n}", {"n": n})
            await store.delete(f"a{n}")
        for n in range(agents):
            await store.save(f"a{n}", {"again": True})
        backend: Any = store.backend
        single: list[tuple[str, int]] = []
        batches: list[int] = []
        one, many = backend.feed_position, backend.feed_positions

        async def feed_position(agent_id: str, seq: int) -> int | None:
            single.append((agent_id, seq))
            found: int | None = await one(agent_id, seq)
            return found

        async def feed_positions(wanted: Any) -> dict[tuple[str, int], int]:
            batches.append(len(wanted))
            found: dict[tuple[str, int], int] = await many(wanted)
            return found

        monkeypatch.setattr(backend, "feed_position", feed_position)
        monkeypatch.setattr(backend, "feed_positions", feed_positions)
        seen = [event async for event in store.subscribe(stop_at_head=True)]
    # every tombstone precedes its agent's new stream: each handed out (none is late),
    # and the new streams' events (a delete took the old stream's out of the feed)
    assert sum(1 for e in seen if e.deleted) == agents
    assert sum(1 for e in seen if not e.deleted) == agents
    assert single == []
    assert sum(batches) == agents
    assert len(batches) < agents / 4  # (a page's tombstones in one ask)
