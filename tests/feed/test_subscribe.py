"""``store.subscribe``: the change feed as users see it, on every engine with one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.errors import (
    CapabilityUnsupported,
    FeedPositionCompacted,
    IntegrityError,
    InvalidArgument,
)
from statekeeper.records import FeedEvent

Opener = Callable[..., StateStore]


async def _catch_up(store: StateStore, **kwargs: object) -> list[FeedEvent]:
    return [e async for e in store.subscribe(stop_at_head=True, **kwargs)]  # type: ignore[arg-type]


async def test_every_event_of_the_store_in_commit_order(feed_url: str, open_store: Opener) -> None:
    store = open_store(feed_url)
    await store.save("ops/a", {"n": 1}, fsm_state="idle")
    await store.save("ops/b", {"n": 1})
    await store.append("ops/a", "tool_call", {"tool": "search", "duration": 0.2})
    await store.save("ops/a", {"n": 2}, fsm_state="busy")
    seen = await _catch_up(store)
    assert [(e.agent_id, e.seq, e.type) for e in seen] == [
        ("ops/a", 1, "created"),
        ("ops/b", 1, "created"),
        ("ops/a", 2, "tool_call"),
        ("ops/a", 3, "patch"),
    ]
    positions = [e.position for e in seen]
    assert positions == sorted(set(positions))
    # the events are the verified, decoded ones history() gives
    assert [e.event for e in seen if e.agent_id == "ops/a"] == [
        e async for e in store.history("ops/a")
    ]
    assert seen[2].event.info == {"tool": "search", "duration": 0.2}
    assert seen[3].event.fsm_state == "busy"
    # resuming after a position gives exactly what follows it
    assert await _catch_up(store, from_position=positions[1]) == seen[2:]


async def test_filters_by_namespace_prefix_and_type(feed_url: str, open_store: Opener) -> None:
    store = open_store(feed_url)
    for agent in ("billing/1", "billing/2", "bill/3", "support/1"):
        await store.save(agent, {"x": 1})
        await store.append(agent, "tool_call", {"tool": "t"})
    ids = [e.agent_id for e in await _catch_up(store, namespace="billing")]
    assert ids == ["billing/1", "billing/1", "billing/2", "billing/2"]  # not bill/3
    assert {e.agent_id for e in await _catch_up(store, agent_prefix="bill")} == {
        "billing/1",
        "billing/2",
        "bill/3",
    }
    calls = await _catch_up(store, event_types={"tool_call"}, agent_prefix="support/")
    assert [(e.agent_id, e.type) for e in calls] == [("support/1", "tool_call")]
    # the cursor moves past filtered-out events: resuming from it re-reads none of them
    sub = store.subscribe(namespace="support", stop_at_head=True)
    assert len([e async for e in sub]) == 2
    assert sub.position == (await store.feed_bounds())[1]


async def test_catch_up_then_live_without_gap_or_duplicate(
    feed_url: str, open_store: Opener
) -> None:
    writer = open_store(feed_url)
    reader = open_store(feed_url) if not feed_url.startswith("memory") else writer
    for i in range(30):
        await writer.save(f"agent-{i % 4}", {"i": i})
    sub = reader.subscribe(batch_size=7)
    got: list[FeedEvent] = []

    async def write_more() -> None:
        for i in range(30, 60):
            await writer.save(f"agent-{i % 4}", {"i": i})

    async def read(n: int) -> None:
        async for event in sub:
            got.append(event)
            if len(got) == n:
                return

    # the writes race the reader's switch from catch-up to live
    await asyncio.wait_for(asyncio.gather(read(60), write_more()), 120)
    assert len({e.position for e in got}) == 60
    assert [e.position for e in got] == sorted(e.position for e in got)
    per_agent = {a: [e.seq for e in got if e.agent_id == a] for a in {e.agent_id for e in got}}
    assert all(seqs == list(range(1, 16)) for seqs in per_agent.values())


async def test_a_compacted_position_is_a_typed_error(feed_url: str, open_store: Opener) -> None:
    store = open_store(feed_url)
    for i in range(5):
        await store.save("a", {"i": i})
    seen = await _catch_up(store)
    await store.trim_feed(seen[2].position)
    with pytest.raises(FeedPositionCompacted) as info:
        await _catch_up(store, from_position=seen[0].position)
    assert (info.value.position, info.value.floor) == (seen[0].position, seen[2].position)
    assert "rebuild" in str(info.value) and "snapshot" in str(info.value)
    # from the floor on, the feed is whole; the agent's events are all still there
    assert await _catch_up(store, from_position=seen[2].position) == seen[3:]
    assert (await store.load("a")).data == {"i": 4}
    assert len([e async for e in store.history("a")]) == 5


async def test_a_subscriber_falling_behind_a_trim_is_told(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        for i in range(6):
            await store.save("a", {"i": i})
        sub = store.subscribe(batch_size=2)
        first = await anext(sub)
        await anext(sub)  # the page of two is used up
        await store.trim_feed(first.position + 3)
        with pytest.raises(FeedPositionCompacted):
            await anext(sub)


async def test_a_trim_beyond_the_head_is_refused_and_hides_nothing(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        for i in range(3):
            await store.save("a", {"i": i})
        floor, head = await store.feed_bounds()
        with pytest.raises(InvalidArgument, match="beyond the feed's head") as bad:
            await store.trim_feed(head + 5)
        assert bad.value.argument == "through"
        assert await store.feed_bounds() == (floor, head)
        await store.save("a", {"i": 3})  # the next event is still delivered
        event = await anext(store.subscribe(from_position=head))
        assert (event.agent_id, event.position > head) == ("a", True)


async def test_bad_arguments_are_refused_before_reading(open_store: Opener) -> None:
    store = open_store("memory://")
    with pytest.raises(InvalidArgument):
        store.subscribe(-1)
    for namespace in ("", "a//b", "a/", "/a"):
        with pytest.raises(InvalidArgument):
            store.subscribe(namespace=namespace)
    with pytest.raises(InvalidArgument):
        store.subscribe(event_types="patch")
    with pytest.raises(InvalidArgument):
        store.subscribe(batch_size=0)
    with pytest.raises(InvalidArgument):
        await store.trim_feed(-3)


async def test_engines_without_a_feed_refuse_it(tmp_path: Path, open_store: Opener) -> None:
    from statekeeper.backends.memory import MemoryBackend
    from statekeeper.backends.tiered import TieredBackend

    tiered = TieredBackend(MemoryBackend(), cold=MemoryBackend(), idle_after=60)
    store = open_store(tiered)
    with pytest.raises(CapabilityUnsupported) as info:
        store.subscribe()
    assert info.value.capability == "change feed"


async def test_a_damaged_event_fails_verification_in_the_feed(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "s.db"
    async with StateStore(f"sqlite:///{path}") as store:
        await store.save("a", {"secret": 1})
    with sqlite3.connect(path) as db:
        db.execute("UPDATE sk_events SET payload = x'00' || payload WHERE seq = 1")
    async with StateStore(f"sqlite:///{path}") as store:
        with pytest.raises(IntegrityError):
            await _catch_up(store)


def test_the_sync_face_iterates_the_same_feed(tmp_path: Path) -> None:
    store = SyncStateStore(f"sqlite:///{tmp_path / 's.db'}")
    try:
        store.save("a", {"x": 1})
        store.save("b", {"x": 2})
        seen = [(e.agent_id, e.seq) for e in store.subscribe(stop_at_head=True)]
        assert seen == [("a", 1), ("b", 1)]
        live = store.subscribe(from_position=store.feed_bounds()[1])
        store.save("c", {"x": 3})
        assert next(live).agent_id == "c"
    finally:
        store.close()


async def test_an_instrumented_store_still_follows_its_feed(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from statekeeper.observability import instrument

    async with StateStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        instrument(store, registry=CollectorRegistry(), tracing=False)
        await store.save("a", {"x": 1})
        assert [e.agent_id for e in await _catch_up(store)] == ["a"]
        await store.trim_feed(1)
        assert await store.feed_bounds() == (1, 1)


async def test_a_forgotten_agent_is_a_gap_not_a_stall(tmp_path: Path) -> None:
    from statekeeper.codec.datakeys import MemoryKeyVault
    from statekeeper.codec.keys import Keyring
    from statekeeper.governance.shredding import forget

    keyring = Keyring({"k1": bytes(range(32))}, data_keys=MemoryKeyVault())
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", keyring=keyring) as store:
        await store.save("acme/alice", {"email": "alice@example.com"})
        await store.save("acme/bob", {"n": 1})
        await forget(store, "acme/alice")
        await store.save("acme/carol", {"n": 2})
        seen = await _catch_up(store)
        # its events passed over; its tombstone at the forget's position
        assert [(e.agent_id, e.deleted) for e in seen] == [
            ("acme/bob", False),
            ("acme/alice", True),
            ("acme/carol", False),
        ]
