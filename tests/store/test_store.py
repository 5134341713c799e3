"""StateStore: writing, reading, history, snapshots, time travel, listing, deleting."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from statekeeper import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    StateStore,
    StoreClosed,
)
from statekeeper.backends import MemoryBackend
from statekeeper.errors import PatchError
from statekeeper.records import AppendResult, EventType

from ..conftest import FakeClock
from .conftest import CountingBackend

# -- create / save / load ---------------------------------------------------------------


async def test_create_then_load(store: StateStore, clock: FakeClock) -> None:
    result = await store.create("a1", {"task": "summarise"}, fsm_state="idle")
    assert result == AppendResult("a1", 1, 1)
    snap = await store.load("a1")
    assert snap.agent_id == "a1"
    assert snap.seq == 1
    assert snap.fsm_state == "idle"
    assert snap.data == {"task": "summarise"}
    assert snap.schema_version == 1
    assert snap.created_at == snap.updated_at == snap.state_entered_at == clock.now
    assert await store.head("a1") == 1
    assert await store.get("a1") == snap


async def test_unknown_agent(store: StateStore) -> None:
    assert await store.get("nobody") is None
    assert await store.head("nobody") == 0
    with pytest.raises(AgentNotFound) as info:
        await store.load("nobody")
    assert info.value.agent_id == "nobody"
    assert isinstance(info.value, KeyError)
    assert [e async for e in store.history("nobody")] == []


async def test_create_twice_is_a_conflict(store: StateStore) -> None:
    await store.create("a1", {"n": 1})
    with pytest.raises(ConflictError) as info:
        await store.create("a1", {"n": 2})
    assert (info.value.expected_seq, info.value.current_seq) == (0, 1)
    assert (await store.load("a1")).data == {"n": 1}


async def test_save_creates_then_updates(store: StateStore, clock: FakeClock) -> None:
    created = clock.now
    assert await store.save("a1", {"n": 1}) == AppendResult("a1", 1, 1)
    clock.advance(5)
    assert await store.save("a1", {"n": 2}, fsm_state="processing") == AppendResult("a1", 2, 2)
    snap = await store.load("a1")
    assert (snap.seq, snap.data, snap.fsm_state) == (2, {"n": 2}, "processing")
    assert snap.created_at == created
    assert snap.updated_at == snap.state_entered_at == clock.now
    types = [e.type async for e in store.history("a1")]
    assert types == [EventType.CREATED, EventType.PATCH]


async def test_saves_store_json_patch_diffs(store: StateStore) -> None:
    await store.save("chat", {"messages": ["hello"], "turn": 1, "draft": "x"})
    await store.save("chat", {"messages": ["hello", "how can I help?"], "turn": 2})
    await store.save("chat", {"messages": ["hello", "how can I help?"], "turn": 2, "a/b": None})
    events = [e async for e in store.history("chat")]
    assert events[0].ops == [
        {"op": "replace", "path": "", "value": {"messages": ["hello"], "turn": 1, "draft": "x"}}
    ]
    assert sorted(events[1].ops, key=lambda op: op["path"]) == [
        {"op": "remove", "path": "/draft"},
        {"op": "add", "path": "/messages/-", "value": "how can I help?"},
        {"op": "replace", "path": "/turn", "value": 2},
    ]
    assert events[2].ops == [{"op": "add", "path": "/a~1b", "value": None}]
    assert (await store.load("chat")).data == {
        "messages": ["hello", "how can I help?"],
        "turn": 2,
        "a/b": None,
    }


async def test_a_growing_chat_stores_one_op_per_message(store: StateStore) -> None:
    messages: list[dict[str, str]] = []
    for i in range(30):
        messages.append({"role": "user" if i % 2 else "assistant", "content": f"m{i}" * 20})
        await store.save("chat", {"messages": messages})
    events = [e async for e in store.history("chat")]
    assert all(
        e.ops == [{"op": "add", "path": "/messages/-", "value": messages[e.seq - 1]}]
        for e in events[1:]
    )


async def test_loaded_data_is_the_callers_own_copy(store: StateStore) -> None:
    doc = {"messages": [{"content": "hi"}], "tags": ["a"]}
    await store.save("a1", doc)
    doc["messages"][0]["content"] = "changed by caller after save"  # type: ignore[index]
    doc["tags"].append("b")  # type: ignore[attr-defined]
    first = await store.load("a1")
    first.data["messages"].append("changed by caller after load")
    first.data["tags"].clear()
    again = await store.load("a1")
    assert again.data == {"messages": [{"content": "hi"}], "tags": ["a"]}


async def test_strict_json_types_survive(store: StateStore) -> None:
    doc = {"t": True, "one": 1, "onef": 1.0, "big": 2**63 - 1, "neg": -(2**63), "u": "é\u0000"}
    await store.save("a1", doc)
    await store.save("a1", {**doc, "t": 1, "one": True, "onef": 1})
    snap = await store.load("a1")
    assert snap.data == {**doc, "t": 1, "one": True, "onef": 1}
    assert [type(snap.data[k]) for k in ("t", "one", "onef")] == [int, bool, int]
    first = await store.load("a1", at_seq=1)
    assert [type(first.data[k]) for k in ("t", "one", "onef")] == [bool, int, float]


# -- append -------------------------------------------------------------------------------


async def test_append_records_info_ops_and_fsm(store: StateStore, clock: FakeClock) -> None:
    await store.create("a1", {"calls": []}, fsm_state="processing")
    clock.advance(2)
    result = await store.append(
        "a1",
        "tool_call",
        {"tool": "search", "args": {"q": "weather"}},
        ops=[{"op": "add", "path": "/calls/-", "value": "search"}],
        fsm_state="tool_call",
        actor="worker-7",
        idempotency_key="step-1",
        schema_version=2,
    )
    assert result == AppendResult("a1", 2, 2)
    event = [e async for e in store.history("a1")][-1]
    assert event.type == "tool_call"
    assert event.seq == 2
    assert event.timestamp == clock.now
    assert event.info == {"tool": "search", "args": {"q": "weather"}}
    assert event.ops == [{"op": "add", "path": "/calls/-", "value": "search"}]
    assert event.fsm_state == "tool_call"
    assert event.actor == "worker-7"
    assert event.idempotency_key == "step-1"
    assert event.schema_version == 2
    snap = await store.load("a1")
    assert (snap.data, snap.fsm_state, snap.schema_version) == (
        {"calls": ["search"]},
        "tool_call",
        2,
    )
    assert snap.state_entered_at == clock.now


async def test_info_only_event_changes_nothing(store: StateStore) -> None:
    await store.create("a1", {"n": 1}, fsm_state="idle")
    await store.append("a1", "note", {"text": "looked at it"})
    snap = await store.load("a1")
    assert (snap.seq, snap.data, snap.fsm_state) == (2, {"n": 1}, "idle")


async def test_append_needs_an_existing_agent(store: StateStore) -> None:
    with pytest.raises(AgentNotFound):
        await store.append("ghost", "note", {"x": 1})
    assert await store.get("ghost") is None


async def test_append_with_ops_that_do_not_apply_writes_nothing(store: StateStore) -> None:
    await store.create("a1", {"n": 1})
    with pytest.raises(PatchError):
        await store.append("a1", "edit", ops=[{"op": "remove", "path": "/missing"}])
    with pytest.raises(InvalidArgument) as info:  # malformed, not merely inapplicable
        await store.append("a1", "edit", ops=[{"op": "jump", "path": "/n"}])
    assert info.value.argument == "ops[0].op"
    assert await store.head("a1") == 1
    assert (await store.load("a1")).data == {"n": 1}


@pytest.mark.parametrize("reserved", ["ops", "fsm", "v", "actor", "key"])
async def test_append_refuses_reserved_info_keys(store: StateStore, reserved: str) -> None:
    await store.create("a1", {})
    with pytest.raises(ConfigurationError):
        await store.append("a1", "note", {reserved: 1})
    assert await store.head("a1") == 1


@pytest.mark.parametrize(
    ("agent_id", "kind"), [("", "note"), (None, "note"), ("a1", ""), ("a1", "snapshot")]
)
async def test_invalid_agent_id_or_event_type(
    store: StateStore, agent_id: object, kind: str
) -> None:
    await store.create("a1", {})
    with pytest.raises(ConfigurationError):
        await store.append(agent_id, kind, {})  # type: ignore[arg-type]
    assert await store.head("a1") == 1


# -- optimistic concurrency ---------------------------------------------------------------


async def test_expected_seq_conflict_carries_current_seq_and_writes_nothing(
    store: StateStore,
) -> None:
    await store.save("a1", {"n": 1})
    await store.save("a1", {"n": 2}, expected_seq=1)
    with pytest.raises(ConflictError) as info:
        await store.save("a1", {"n": 3}, expected_seq=1)
    assert (info.value.agent_id, info.value.expected_seq, info.value.current_seq) == ("a1", 1, 2)
    with pytest.raises(ConflictError):
        await store.append("a1", "note", {"x": 1}, expected_seq=5)
    assert await store.head("a1") == 2
    assert (await store.load("a1")).data == {"n": 2}
    assert len([e async for e in store.history("a1")]) == 2


async def test_conflict_from_another_writer(open_store: Callable[..., StateStore]) -> None:
    shared = MemoryBackend()
    mine = open_store(shared)
    theirs = open_store(shared)
    await mine.save("a1", {"n": 1})
    seen = await mine.load("a1")
    await theirs.save("a1", {"n": 2})
    with pytest.raises(ConflictError) as info:
        await mine.save("a1", {"n": 3}, expected_seq=seen.seq)
    assert info.value.current_seq == 2
    assert (await theirs.load("a1")).data == {"n": 2}


async def test_save_without_expected_seq_is_last_writer_wins_after_retry(
    open_store: Callable[..., StateStore],
) -> None:
    shared = CountingBackend(MemoryBackend())
    # ``mine`` trusts its cache, so its first attempt is built on a stale head and the
    # backend refuses it: the store must re-read and retry, not fail or overwrite.
    mine = open_store(shared, validate_cache=False)
    theirs = open_store(shared)
    await mine.save("a1", {"by": "mine", "n": 1})
    await theirs.save("a1", {"by": "theirs", "n": 2, "extra": True})
    appends_before = shared.calls["append"]
    result = await mine.save("a1", {"by": "mine", "n": 3})
    assert shared.calls["append"] - appends_before == 2  # refused once, then retried
    assert result == AppendResult("a1", 3, 3)
    assert (await theirs.load("a1")).data == {"by": "mine", "n": 3}
    events = [e async for e in theirs.history("a1")]
    assert [e.seq for e in events] == [1, 2, 3]  # both writes stay in the history
    assert {"op": "remove", "path": "/extra"} in events[2].ops


async def test_retries_are_bounded(open_store: Callable[..., StateStore]) -> None:
    shared = MemoryBackend()
    mine = open_store(shared, validate_cache=False, write_retries=0)
    theirs = open_store(shared)
    await mine.save("a1", {"n": 1})
    await theirs.save("a1", {"n": 2})
    with pytest.raises(ConflictError):
        await mine.save("a1", {"n": 3})
    assert (await theirs.load("a1")).data == {"n": 2}
    # the failed attempt dropped the stale cache: the next save succeeds
    assert await mine.save("a1", {"n": 3}) == AppendResult("a1", 3, 3)


# -- idempotency ---------------------------------------------------------------------------


async def test_idempotency_key_stores_a_retried_append_once(store: StateStore) -> None:
    await store.create("a1", {"steps": []})
    op = [{"op": "add", "path": "/steps/-", "value": "charge card"}]
    first = await store.append("a1", "step", {"n": 1}, ops=op, idempotency_key="pay-42")
    retry = await store.append("a1", "step", {"n": 1}, ops=op, idempotency_key="pay-42")
    assert first == AppendResult("a1", 2, 2)
    assert retry == AppendResult("a1", 2, 2, duplicate=True)
    assert (await store.load("a1")).data == {"steps": ["charge card"]}
    assert await store.head("a1") == 2


async def test_idempotent_retry_after_other_writes(store: StateStore) -> None:
    await store.create("a1", {"n": 0})
    await store.save("a1", {"n": 1}, idempotency_key="k1")
    await store.save("a1", {"n": 2})
    # the retry's expected seq is stale: the key wins over the conflict
    retry = await store.save("a1", {"n": 1}, expected_seq=1, idempotency_key="k1")
    assert retry == AppendResult("a1", 2, 2, duplicate=True)
    # without expected seq, the key is checked before anything is written
    retry = await store.save("a1", {"n": 1}, idempotency_key="k1")
    assert retry == AppendResult("a1", 2, 2, duplicate=True)
    snap = await store.load("a1")
    assert (snap.seq, snap.data) == (3, {"n": 2})


async def test_idempotency_survives_reopening_the_store(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    first = open_store(db_url)
    await first.create("a1", {"n": 0}, idempotency_key="create-a1")
    await first.save("a1", {"n": 1}, idempotency_key="step-1")
    await first.close()
    again = open_store(db_url)
    assert await again.create("a1", {"n": 0}, idempotency_key="create-a1") == AppendResult(
        "a1", 1, 1, duplicate=True
    )
    assert await again.save("a1", {"n": 1}, idempotency_key="step-1") == AppendResult(
        "a1", 2, 2, duplicate=True
    )
    assert await again.head("a1") == 2
    assert (await again.load("a1")).data == {"n": 1}


# -- snapshots -----------------------------------------------------------------------------


async def test_snapshot_every_n_events(url: str, open_store: Callable[..., StateStore]) -> None:
    store = open_store(url, snapshot_every=5)
    for i in range(12):
        await store.save("a1", {"n": i})
    assert store.stats().snapshots_written == 2
    latest = await store.backend.latest_snapshot("a1")
    assert latest is not None and latest.seq == 10
    below = await store.backend.latest_snapshot("a1", 9)
    assert below is not None and below.seq == 5
    assert await store.backend.latest_snapshot("a1", 4) is None


async def test_load_is_snapshot_plus_tail(open_store: Callable[..., StateStore]) -> None:
    backend = CountingBackend(MemoryBackend())
    writer = open_store(backend, snapshot_every=10)
    for i in range(57):
        await writer.save("a1", {"n": i, "items": list(range(i % 7))})
    reader = open_store(backend, snapshot_every=10)  # empty cache
    backend.events_read = 0
    snap = await reader.load("a1")
    assert snap.seq == 57
    assert snap.data == {"n": 56, "items": list(range(56 % 7))}
    assert backend.events_read == 7  # the snapshot at 50, then events 51..57
    assert reader.stats().loads_from_backend == 1


async def test_snapshot_plus_tail_equals_full_replay(
    url: str, open_store: Callable[..., StateStore], clock: FakeClock
) -> None:
    with_snaps = open_store(url, snapshot_every=3, clock=clock)
    plain = open_store("memory://", snapshot_every=10_000, clock=clock)
    messages: list[str] = []
    for i in range(25):
        messages = [*messages, f"m{i}"]
        if i % 4 == 3:
            messages = messages[1:]  # not only appends: the list also loses its head
        doc = {"messages": messages, "meta": {"turn": i, "odd": i % 2 == 1}}
        for s in (with_snaps, plain):
            await s.save("a1", doc, fsm_state=f"s{i % 3}")
        clock.advance()
    for seq in range(1, 26):
        a = await with_snaps.load("a1", at_seq=seq)
        b = await plain.load("a1", at_seq=seq)
        assert (a.data, a.fsm_state, a.updated_at) == (b.data, b.fsm_state, b.updated_at)


async def test_manual_snapshot(store: StateStore) -> None:
    await store.save("a1", {"n": 1})
    await store.save("a1", {"n": 2})
    assert await store.snapshot("a1") == 2
    raw = await store.backend.latest_snapshot("a1")
    assert raw is not None and raw.seq == 2
    with pytest.raises(AgentNotFound):
        await store.snapshot("ghost")


# -- time travel --------------------------------------------------------------------------


async def test_load_at_seq(store: StateStore) -> None:
    for i in range(1, 13):
        await store.save("a1", {"n": i, "trail": list(range(i))}, fsm_state=f"s{i}")
    for seq in range(1, 13):
        old = await store.load("a1", at_seq=seq)
        assert (old.seq, old.data["n"], old.fsm_state) == (seq, seq, f"s{seq}")
        assert old.data["trail"] == list(range(seq))
    assert (await store.load("a1")).seq == 12  # latest is unaffected
    for bad in (0, 13, -1):
        with pytest.raises(ConfigurationError):
            await store.load("a1", at_seq=bad)
    with pytest.raises(ConfigurationError):
        await store.load("a1", at_seq=1, at_time=1.0)
    with pytest.raises(AgentNotFound):
        await store.load("ghost", at_seq=1)


async def test_load_at_time(store: StateStore, clock: FakeClock) -> None:
    stamps = []
    for i in range(1, 9):
        clock.advance(10)
        stamps.append(clock.now)
        await store.save("a1", {"n": i})
    with pytest.raises(AgentNotFound):
        await store.load("a1", at_time=stamps[0] - 0.001)
    for i, t in enumerate(stamps, start=1):
        assert (await store.load("a1", at_time=t)).data == {"n": i}
        assert (await store.load("a1", at_time=t + 9.99)).data == {"n": i}
    assert (await store.load("a1", at_time=stamps[-1] + 1e6)).seq == 8


# -- history ---------------------------------------------------------------------------------


async def test_history_pages_through_long_streams(open_store: Callable[..., StateStore]) -> None:
    backend = CountingBackend(MemoryBackend())
    store = open_store(backend, snapshot_every=500)
    await store.create("a1", {"n": 0})
    for i in range(1, 2600):
        await store.append("a1", "tick", {"i": i})
    backend.calls["read"] = 0
    events = [e async for e in store.history("a1")]
    assert [e.seq for e in events] == list(range(1, 2601))
    assert [e.info.get("i") for e in events[1:]] == list(range(1, 2600))
    assert backend.calls["read"] == 3  # pages of 1000, not one giant read
    tail = [e.seq async for e in store.history("a1", after_seq=2400, to_seq=2450)]
    assert tail == list(range(2401, 2451))
    middle = [e.seq async for e in store.history("a1", after_seq=999, to_seq=2001)]
    assert middle == list(range(1000, 2002))


# -- listing and deleting ---------------------------------------------------------------------


async def test_list_iter_count_agents(open_store: Callable[..., StateStore]) -> None:
    store = open_store("memory://")
    ids = [f"agent-{i:05d}" for i in range(1005)]
    for agent_id in reversed(ids):
        await store.create(agent_id, {})
    await store.append("agent-00003", "note", {})
    assert await store.count_agents() == 1005
    page = await store.list_agents(limit=3)
    assert [(i.agent_id, i.head_seq) for i in page] == [
        ("agent-00000", 1),
        ("agent-00001", 1),
        ("agent-00002", 1),
    ]
    page = await store.list_agents(after="agent-00002", limit=2)
    assert [(i.agent_id, i.head_seq) for i in page] == [("agent-00003", 2), ("agent-00004", 1)]
    assert [i.agent_id async for i in store.iter_agents()] == ids


async def test_delete(store: StateStore) -> None:
    await store.save("a1", {"n": 1}, idempotency_key="k")
    for i in range(7):
        await store.save("a1", {"n": i})
    await store.save("a2", {"keep": True})
    assert await store.delete("a1") is True
    assert await store.get("a1") is None
    with pytest.raises(AgentNotFound):
        await store.load("a1")
    assert [e async for e in store.history("a1")] == []
    assert await store.count_agents() == 1
    assert await store.delete("a1") is False
    # a new stream under the same id starts over, with its keys forgotten
    assert await store.save("a1", {"n": 0}, idempotency_key="k") == AppendResult("a1", 1, 1)
    assert (await store.load("a1")).data == {"n": 0}
    assert (await store.load("a2")).data == {"keep": True}


# -- lifecycle ------------------------------------------------------------------------------


async def test_closed_store_refuses_calls(url: str) -> None:
    store = StateStore(url)
    await store.save("a1", {"n": 1})
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreClosed):
        await store.save("a1", {"n": 2})
    with pytest.raises(StoreClosed):
        await store.load("a1")
    with pytest.raises(StoreClosed):
        await store.get("a1")


async def test_context_manager_and_health(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'cm.db'}") as store:
        await store.save("a1", {"n": 1})
        health = await store.health()
        assert health.ok and health.backend == "sqlite"
    async with StateStore(f"sqlite:///{tmp_path / 'cm.db'}") as again:
        assert (await again.load("a1")).data == {"n": 1}


async def test_default_url_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATEKEEPER_URL", f"sqlite:///{tmp_path / 'env.db'}")
    async with StateStore() as store:
        await store.save("a1", {"n": 1})
    assert (tmp_path / "env.db").exists()


@pytest.mark.parametrize(
    "options",
    [
        {"snapshot_every": 0},
        {"durability": "eventually"},
        {"durability": "async", "flush_size": 0},
        {"durability": "async", "flush_interval": 0},
        {"cache_size": -1},
        {"write_retries": -1},
    ],
)
def test_bad_options_are_refused_before_anything_is_written(
    options: dict[str, object], tmp_path: Path
) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(ConfigurationError):
        StateStore(f"sqlite:///{path}", **options)  # type: ignore[arg-type]
    assert not path.exists()
