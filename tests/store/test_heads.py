"""``StateStore.head_state`` / ``stored_size``: the head without folding the data.

The head must say exactly what a full load says (seq, FSM state, when it was entered),
whatever mix of transitions, plain saves and snapshots the stream holds."""

from __future__ import annotations

import random
from collections.abc import Callable

from statekeeper import StateStore, StateTransition
from statekeeper.security import Keyring, generate_key


async def _expect_same(store: StateStore, agent_id: str) -> None:
    snap = await store.get(agent_id)
    head = await store.head_state(agent_id)
    assert snap is not None and head is not None
    assert (head.seq, head.fsm_state, head.state_entered_at, head.updated_at) == (
        snap.seq,
        snap.fsm_state,
        snap.state_entered_at,
        snap.updated_at,
    )


async def test_head_state_matches_a_full_load(store: StateStore) -> None:
    """Transitions, then many saves that do not move the machine (past a snapshot)."""
    assert await store.head_state("ghost") is None
    agent = await store.agent("a", initial_data={"n": 0})
    await _expect_same(store, "a")
    await agent.transition(StateTransition.START_PROCESSING)
    await _expect_same(store, "a")
    for i in range(12):  # crosses snapshot_every=5 twice without a transition
        agent.data["n"] = i
        await agent.save()
        await _expect_same(store, "a")
    await agent.transition(StateTransition.COMPLETE)
    await _expect_same(store, "a")


async def test_head_state_random_streams(store: StateStore) -> None:
    rng = random.Random(10)
    agent = await store.agent("r", initial_data={})
    cycle = [StateTransition.START_PROCESSING, StateTransition.COMPLETE, StateTransition.RESET]
    step = 0
    for i in range(60):
        if rng.random() < 0.3:
            await agent.transition(cycle[step % 3])
            step += 1
        else:
            agent.data[f"k{i % 7}"] = i
            await agent.save()
        await _expect_same(store, "r")


async def test_head_state_of_an_agent_without_a_machine(store: StateStore) -> None:
    await store.save("plain", {"x": 1})
    await store.save("plain", {"x": 2})
    head = await store.head_state("plain")
    assert head is not None and head.seq == 2 and head.fsm_state is None


async def test_head_state_under_a_key(url: str, open_store: Callable[..., StateStore]) -> None:
    keyring = Keyring({"k1": generate_key()}, active="k1")
    store = open_store(url, keyring=keyring, snapshot_every=3)
    agent = await store.agent("enc", initial_data={"secret": "s"})
    await agent.transition(StateTransition.START_PROCESSING)
    for i in range(4):
        agent.data["i"] = i
        await agent.save()
    await _expect_same(store, "enc")


async def test_stored_size_counts_every_event(store: StateStore) -> None:
    for i in range(7):
        await store.save("s", {"i": i, "pad": "x" * 100})
    size = await store.stored_size("s")
    assert size.events == 7
    raw = await store.backend.read("s")
    assert size.event_bytes == sum(len(e.payload) for e in raw) > 100
    snap = await store.backend.latest_snapshot("s")
    assert snap is not None  # snapshot_every=5
    assert size.snapshot_bytes == len(snap.payload) > 100
    assert size.total == size.event_bytes + size.snapshot_bytes
    empty = await store.stored_size("ghost")
    assert (empty.events, empty.total) == (0, 0)
