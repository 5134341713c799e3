"""The default snapshot policy (``snapshot_every="bounded"``): a snapshot once the replay
a load would do from the last one costs as much as decoding that snapshot plus a fixed
allowance, so a default-configured load never replays more than that bound — while an
agent saved a few dozen times with small changes writes no snapshot, and the save keeps
its flat path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper import StateStore
from statekeeper.records import RawEvent
from statekeeper.store.snapshots import BOUNDED_LOAD_COST, COST_MAX_EVENTS, EVENT_COST

from .test_snapshot_cost import MESSAGES, rule_positions, tail_positions, whole_and_tails
from .test_snapshot_cost import _snapshot_bytes as _snapshots


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'bounded.db'}?synchronous=OFF"


async def test_a_default_store_bounds_the_replay_of_every_cold_load(tmp_path: Path) -> None:
    url = _url(tmp_path)
    async with StateStore(url) as writer:
        cold = StateStore(url, cache_size=0)
        try:
            worst = 0
            for n in range(1, len(MESSAGES) + 1):
                await writer.save("chat", {"messages": MESSAGES[:n]})
                assert (await cold.load("chat")).data == {"messages": MESSAGES[:n]}
                snap = await writer.backend.latest_snapshot("chat")
                after = snap.seq if snap is not None else 0
                events: list[RawEvent] = await writer.backend.read("chat", after, None)
                replay = sum(len(e.payload) for e in events) + EVENT_COST * len(events)
                stored = len(snap.payload) if snap is not None else 0
                # what a load at this head replays costs less than decoding its snapshot
                # plus the allowance (and is fewer than 100 events)
                assert replay < stored + BOUNDED_LOAD_COST, (n, after)
                assert len(events) < COST_MAX_EVENTS
                worst = max(worst, len(events))
            # the bound is tighter than every 100th event for this chat
            assert worst < 70
        finally:
            await cold.close()


async def test_the_default_policys_snapshot_positions(tmp_path: Path) -> None:
    async with StateStore(_url(tmp_path)) as store:
        assert store.snapshot_every == "bounded"
        assert store._writes.flat is not None  # the save's flat path is kept
        for n in range(1, len(MESSAGES) + 1):
            await store.save("chat", {"messages": MESSAGES[:n]})
        stored, tails = await whole_and_tails(store, "chat")
        events = await store.backend.read("chat", 0, None)
    # the rule, worked out from the stored sizes (the flat save and the general save
    # must both apply it); tail snapshots between (store/tails.py) do not move it
    expected = rule_positions(events, stored, BOUNDED_LOAD_COST, 0)
    assert sorted(stored) == expected
    assert len(expected) >= 2
    assert tails == tail_positions(expected, len(events))


async def test_an_agent_saved_a_few_dozen_times_writes_no_snapshot(tmp_path: Path) -> None:
    # the write side of the default: a short chat (bench_hotpath.py's workloads: up to 51
    # saves from 10 messages) pays no snapshot, as under every=100
    async with StateStore(_url(tmp_path)) as store:
        for n in range(10, 61):
            await store.save("chat", {"messages": MESSAGES[:n]})
        assert await store.backend.latest_snapshot("chat") is None


async def test_cost_and_numbers_still_choose_their_own_rule(tmp_path: Path) -> None:
    opts: dict[str, Any] = {"snapshot_every": 100}
    async with StateStore(_url(tmp_path), **opts) as store:
        for n in range(1, 101):
            await store.save("chat", {"messages": MESSAGES[:n]})
        assert sorted(await _snapshots(store, "chat")) == [100]
