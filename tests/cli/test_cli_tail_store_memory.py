"""``statekeeper tail`` of the whole store keeps only the ``-n`` newest events while it
reads the agents: it held every agent's last ``-n`` events at once (10 per agent,
10^6 agents: ten million events in memory before one line was printed; trialscale)."""

from __future__ import annotations

import tracemalloc

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.cli.tail import newest_events

from ..conftest import FakeClock

AGENTS, EVENTS, BLOB = 120, 10, 20_000  # 1,200 events read: ~8 MB traced if all are held


async def _store(clock: FakeClock) -> StateStore:
    store = StateStore(MemoryBackend(), clock=clock, cache_size=0)
    for i in range(AGENTS):
        for j in range(EVENTS):
            clock.now = 1000.0 + j * AGENTS + i  # agents interleaved in time
            await store.save(f"a{i:03d}", {"blob": f"{i}.{j}." + "x" * BLOB})
    return store


async def test_only_the_newest_events_are_held() -> None:
    store = await _store(FakeClock(1000.0))
    async with store:
        heads = {i.agent_id: (i.head_seq, i.created_at) async for i in store.iter_agents()}
        tracemalloc.start()
        try:
            recent = await newest_events(store, heads, 3, [])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # the last three events of the store: the last round's last three agents
    assert [(e.agent_id, e.seq) for e in recent] == [("a117", 10), ("a118", 10), ("a119", 10)]
    # one agent's events and the three kept (~0.5 MB), not the 1,200 read (~8 MB)
    assert peak < 2_000_000, peak


async def test_order_and_count_as_before() -> None:
    clock = FakeClock(1000.0)
    store = await _store(clock)
    async with store:
        heads = {i.agent_id: (i.head_seq, i.created_at) async for i in store.iter_agents()}
        recent = await newest_events(store, heads, 25, [])
        none = await newest_events(store, heads, 0, [])
    times = [e.timestamp for e in recent]
    assert len(recent) == 25 and times == sorted(times) and none == []
    assert times[-1] == 1000.0 + (EVENTS - 1) * AGENTS + AGENTS - 1
