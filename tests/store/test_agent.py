"""``DurableAgent``: a state machine plus a data document, persisted transition by
transition, restored exactly after a restart."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable

import pytest

from statekeeper import (
    AgentState,
    AgentStateMachine,
    ConflictError,
    InvalidTransition,
    SerializationError,
    StatekeeperError,
    StateStore,
    StateTransition,
    SyncStateStore,
    TransitionRule,
    UnsavedChangesWarning,
)
from statekeeper.errors import MachineError, UnknownState
from statekeeper.machine.types import TransitionResult
from statekeeper.records import EventType

from ..conftest import FakeClock


async def test_new_agent_starts_in_the_machines_initial_state(store: StateStore) -> None:
    agent = await store.agent("a1", initial_data={"task": "summarise"})
    assert agent.state is AgentState.IDLE
    assert agent.seq == 1
    snap = await store.load("a1")
    assert (snap.fsm_state, snap.data) == ("idle", {"task": "summarise"})


async def test_transition_persists_state_and_data_in_one_event(
    store: StateStore, clock: FakeClock
) -> None:
    agent = await store.agent("a1")
    agent.data["task"] = "summarise"
    agent.data["messages"] = ["hello"]
    assert agent.dirty
    clock.advance(3)
    assert await agent.transition(StateTransition.START_PROCESSING, {"by": "test"}) is True
    assert not agent.dirty
    assert agent.seq == 2
    snap = await store.load("a1")
    assert (snap.seq, snap.fsm_state) == (2, "processing")
    assert snap.data == {"task": "summarise", "messages": ["hello"]}
    assert snap.state_entered_at == clock.now
    event = [e async for e in store.history("a1")][-1]
    assert event.type == EventType.TRANSITION
    assert event.fsm_state == "processing"
    assert event.info == {
        "event": "start_processing",
        "from": "idle",
        "to": "processing",
        "metadata": {"by": "test"},
    }
    assert sorted(op["path"] for op in event.ops) == ["/messages", "/task"]


async def test_refused_transition_raises_and_writes_nothing(store: StateStore) -> None:
    agent = await store.agent("a1")
    agent.data["x"] = 1
    with pytest.raises(InvalidTransition) as info:
        await agent.transition(StateTransition.COMPLETE)  # not from IDLE
    assert info.value.state is AgentState.IDLE
    assert info.value.event is StateTransition.COMPLETE
    assert "no rule" in str(info.value)
    assert agent.state is AgentState.IDLE
    assert await store.head("a1") == 1
    assert agent.dirty  # the data change is still pending, not dropped
    await agent.save()
    assert (await store.load("a1")).data == {"x": 1}


async def test_refused_transition_returns_false_when_not_strict(store: StateStore) -> None:
    agent = await store.agent("a1", strict=False)  # the bare machine's API
    agent.data["x"] = 1
    assert await agent.transition(StateTransition.COMPLETE) is False
    assert agent.state is AgentState.IDLE
    assert await store.head("a1") == 1
    assert agent.dirty
    await agent.save()


async def test_reopened_agent_is_restored_exactly(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    first = open_store(db_url)
    agent = await first.agent("a1")
    agent.data["steps"] = []
    for event in (
        StateTransition.START_PROCESSING,
        StateTransition.CALL_TOOL,
        StateTransition.RECEIVE_RESULT,
    ):
        agent.data["steps"].append(event.value)
        await agent.transition(event)
    await first.close()
    second = open_store(db_url)
    again = await second.agent("a1", AgentStateMachine())
    assert again.state is AgentState.PROCESSING
    assert again.data == {"steps": ["start_processing", "call_tool", "receive_result"]}
    assert again.seq == 4
    assert not again.dirty
    assert await again.transition(StateTransition.COMPLETE)
    assert (await second.load("a1")).fsm_state == "completed"


async def test_save_and_record(store: StateStore) -> None:
    agent = await store.agent("a1")
    assert await agent.save() is None  # nothing to write
    agent.data["n"] = 1
    assert (await agent.save()).last_seq == 2  # type: ignore[union-attr]
    result = await agent.record("tool_result", {"tool": "search", "ok": True})
    assert result.last_seq == 3
    events = [e async for e in agent.history()]
    assert [e.type for e in events] == [EventType.CREATED, EventType.PATCH, "tool_result"]
    assert events[2].info == {"tool": "search", "ok": True}


async def test_a_stale_agent_conflicts_and_its_machine_is_reverted(store: StateStore) -> None:
    mine = await store.agent("a1", AgentStateMachine())
    theirs = await store.agent("a1", AgentStateMachine())
    await theirs.transition(StateTransition.START_PROCESSING)
    mine.data["lost"] = True
    with pytest.raises(ConflictError):
        await mine.transition(StateTransition.START_PROCESSING)
    assert mine.state is AgentState.IDLE  # put back: the transition never became durable
    assert mine.machine.total_transitions == 0
    await mine.refresh()
    assert mine.state is AgentState.PROCESSING  # type: ignore[comparison-overlap]
    assert mine.data == {}
    assert await store.head("a1") == 2


async def test_transitions_fired_by_concurrent_tasks_are_all_stored_in_order(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # three tasks fire one agent while each write is in flight (it yields to the loop
    # first, as a real engine's does): each must be stored, or refused with the machine
    # left where the stream is; the machine must never end in a state never stored
    cycle = AgentStateMachine(
        rules=[
            TransitionRule("idle", "go", "busy"),
            TransitionRule("busy", "go", "busy2"),
            TransitionRule("busy2", "go", "idle"),
        ]
    )
    agent = await store.agent("a1", cycle)
    append = store.append

    async def in_flight(*args: object, **kwargs: object) -> object:
        for _ in range(5):
            await asyncio.sleep(0)  # (loop turns, not time: the other tasks run here)
        return await append(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append", in_flight)

    async def fire(i: int) -> bool:
        agent.data[f"k{i}"] = i
        return await agent.transition("go")

    assert await asyncio.gather(*(fire(i) for i in range(3))) == [True, True, True]
    stored = await store.load("a1")
    assert (stored.fsm_state, stored.seq) == ("idle", 4)
    assert stored.data == {"k0": 0, "k1": 1, "k2": 2}
    assert (agent.machine.state_value, agent.seq) == ("idle", 4)
    moves = [(e.info["from"], e.info["to"]) async for e in store.history("a1", after_seq=1)]
    assert moves == [("idle", "busy"), ("busy", "busy2"), ("busy2", "idle")]


async def test_an_agent_stored_in_a_state_its_new_machine_lacks_is_refused_naming_it(
    store: StateStore,
) -> None:
    # the machine's definition changed between runs ("busy" renamed "working") while
    # the agent sat in "busy": opening it is refused, naming the agent and the state,
    # and the machine that was refused is not bound to an agent that was never opened
    def lifecycle(busy: str) -> AgentStateMachine[str, str]:
        return AgentStateMachine(
            rules=[TransitionRule("idle", "go", busy), TransitionRule(busy, "done", "idle")]
        )

    old = await store.agent("a1", lifecycle("busy"))
    await old.transition("go")
    new = lifecycle("working")
    with pytest.raises(UnknownState) as refused:
        await store.agent("a1", new)
    assert "'busy'" in str(refused.value)
    assert "agent 'a1'" in str(refused.value) and refused.value.agent_id == "a1"
    assert new.fire("go") and new.state_value == "working"  # still a bare machine
    new.restore("idle")
    assert (await store.load("a1")).fsm_state == "busy"


async def test_unserializable_data_reverts_the_transition(store: StateStore) -> None:
    agent = await store.agent("a1")
    agent.data["bad"] = {"deep": [0, object()]}
    with pytest.raises(SerializationError) as info:
        await agent.transition(StateTransition.START_PROCESSING)
    assert info.value.path == "data.bad.deep[1]"
    assert agent.state is AgentState.IDLE
    assert await store.head("a1") == 1
    del agent.data["bad"]
    assert await agent.transition(StateTransition.START_PROCESSING)


async def test_retried_transition_with_a_key_is_stored_once(store: StateStore) -> None:
    agent = await store.agent("a1")
    # a worker that read the agent before the transition landed (and crashed before
    # learning the outcome) replays the step
    replay = await store.agent("a1", AgentStateMachine())
    assert await agent.transition(StateTransition.START_PROCESSING, idempotency_key="step-1")
    assert (replay.seq, replay.machine.state_value) == (1, "idle")
    assert await replay.transition(StateTransition.START_PROCESSING, idempotency_key="step-1")
    assert await store.head("a1") == 2
    assert replay.seq == 2 and replay.state is AgentState.PROCESSING


async def test_a_key_already_recorded_decides_even_when_the_data_differs(store: StateStore) -> None:
    """docs/store.md, "Idempotency": the key alone decides; the agent is brought back
    to the stored state, its pending change dropped."""
    first = await store.save("m/x", {"amount": 10}, idempotency_key="pay-1")
    again = await store.save("m/x", {"amount": 99999}, idempotency_key="pay-1")
    assert again.duplicate and (again.first_seq, again.last_seq) == (
        first.first_seq,
        first.last_seq,
    )
    agent = await store.agent("m/x")
    agent.data["amount"] = 500
    saved = await agent.save(idempotency_key="pay-1")
    assert saved is not None and saved.duplicate
    assert agent.data == {"amount": 10} and (await store.load("m/x")).data == {"amount": 10}
    assert await store.head("m/x") == first.last_seq


def test_sync_durable_agent() -> None:
    with SyncStateStore("memory://") as store:
        agent = store.agent("a1", initial_data={"n": 0})
        agent.data["n"] = 1
        assert agent.transition(StateTransition.START_PROCESSING)
        assert agent.state is AgentState.PROCESSING
        assert agent.seq == 2
        agent.data["n"] = 2
        saved = agent.save()
        assert saved is not None and saved.last_seq == 3
        assert agent.record("note", {"x": 1}).last_seq == 4
        assert [e.seq for e in agent.history()] == [1, 2, 3, 4]
        agent.data["n"] = 99
        agent.refresh()
        assert agent.data == {"n": 2}
        assert store.load("a1").fsm_state == "processing"


# -- a refused transition never drops a data change silently (issue 9.4) ----------------


async def _old_quick_start(url: str) -> None:
    """The README quick start as it was: correct on the first run only."""
    async with StateStore(url) as store:
        agent = await store.agent("support-42")
        agent.data.setdefault("messages", []).append({"role": "user", "content": "hi"})
        await agent.transition(StateTransition.START_PROCESSING)
        await agent.transition(StateTransition.CALL_TOOL, {"tool": "search"})


async def test_a_second_run_of_the_old_quick_start_is_not_silent(db_url: str) -> None:
    await _old_quick_start(db_url)
    with (
        pytest.warns(UnsavedChangesWarning, match="support-42") as warned,
        pytest.raises(InvalidTransition, match="start_processing"),
    ):
        await _old_quick_start(db_url)  # TOOL_CALL: START_PROCESSING is not allowed
    assert warned[0].message.agent_ids == ["support-42"]  # type: ignore[union-attr]
    async with StateStore(db_url) as store:
        assert (await store.load("support-42")).seq == 3  # nothing half-written


async def test_firing_a_durable_agents_machine_directly_is_refused(store: StateStore) -> None:
    """agent.machine.fire(...) moved the agent in memory and wrote nothing; a later
    save() stored its data but not its state, so a reload found the old state: a
    silently lost transition. It is now undone and refused with MachineError."""
    machine = AgentStateMachine()
    agent = await store.agent("direct", machine)
    with pytest.raises(MachineError, match=r"agent\.transition"):
        agent.machine.fire(StateTransition.START_PROCESSING)
    with pytest.raises(MachineError):
        await machine.transition(StateTransition.START_PROCESSING)
    assert agent.state is AgentState.IDLE
    assert machine.history == [] and machine.get_stats()["total_transitions"] == 0
    agent.data["k"] = 1
    await agent.save()
    assert (await store.load("direct")).fsm_state == "idle"
    # through the agent it moves and is written; so it is for another agent opened
    # later on the same machine object (the first one's listener stays on it)
    await agent.transition(StateTransition.START_PROCESSING)
    again = await store.agent("direct", machine)
    await again.transition(StateTransition.CALL_TOOL)
    assert (await store.load("direct")).fsm_state == "tool_call"
    with pytest.raises(MachineError):
        machine.fire(StateTransition.RECEIVE_RESULT)
    assert again.state is AgentState.TOOL_CALL


async def test_a_keyed_transition_retried_after_it_landed_is_not_fired_again(
    store: StateStore,
) -> None:
    """A caller that crashed (or lost the reply) after its keyed transition committed
    retries it with the same key, as with save() and update(): the retry raised
    InvalidTransition (the state had moved on), or, on a cycle, fired again — running
    the action a second time and making a second move. Now it returns True without
    firing, and the agent shows the stored state."""
    actions: list[str] = []

    def machine() -> AgentStateMachine[str, str]:
        return AgentStateMachine(
            rules=[
                TransitionRule("idle", "work", "busy", action=lambda: actions.append("work")),
                TransitionRule("busy", "done", "idle"),
            ],
            initial="idle",
        )

    first = await store.agent("k", machine())
    await first.transition("work", idempotency_key="w1")  # committed; the reply is lost
    await first.transition("done")
    retry = await store.agent("k", machine())  # the restarted caller
    retry.data["scratch"] = 1
    assert await retry.transition("work", idempotency_key="w1") is True
    assert actions == ["work"]  # not fired again: idle -> busy would have matched
    assert retry.state == "idle" and retry.data == {} and not retry.dirty
    assert await store.head("k") == 3
    assert await retry.transition("work", idempotency_key="w2") is True  # a new key fires
    assert actions == ["work", "work"] and retry.state == "busy"
    assert await retry.transition("work", idempotency_key="w1") is True  # refused otherwise
    assert retry.state == "busy" and await store.head("k") == 4


def test_firing_a_sync_agents_machine_directly_is_refused() -> None:
    store = SyncStateStore("memory://")
    try:
        agent = store.agent("direct")
        with pytest.raises(MachineError):
            agent.machine.fire(StateTransition.START_PROCESSING)
        assert agent.transition(StateTransition.START_PROCESSING)
        assert store.load("direct").fsm_state == "processing"
    finally:
        store.close()


async def test_restoring_a_durable_agents_machine_directly_is_refused(store: StateStore) -> None:
    """agent.machine.restore("done") moved the agent in memory with nothing written:
    agent.state said COMPLETED, a later save() stored the data with the old state, and a
    transition from there recorded a move "from" a state the stream never held. Like a
    direct fire, it is now refused (MachineError), before the machine moves; so is a
    revert() of a transition the agent recorded."""
    machine = AgentStateMachine()
    agent = await store.agent("restored", machine)
    await agent.transition(StateTransition.START_PROCESSING)
    with pytest.raises(MachineError, match=r"restore.*agent\.transition"):
        agent.machine.restore("completed")
    with pytest.raises(MachineError):
        machine.restore(AgentState.COMPLETED, entered_at=5.0)
    assert agent.state is AgentState.PROCESSING
    moved = machine.history[-1]  # the transition the agent recorded, undone in memory
    result = TransitionResult(AgentState.IDLE, moved.target, moved.event, {}, moved.timestamp, 0.0)
    with pytest.raises(MachineError):
        machine.revert(result)
    assert agent.state is AgentState.PROCESSING
    assert machine.get_stats()["total_transitions"] == 1
    agent.data["k"] = 1
    await agent.save()
    assert (await store.load("restored")).fsm_state == "processing"
    # the agent's own restores still work: a reload, a refused write undone
    await agent.refresh()
    await agent.transition(StateTransition.CALL_TOOL)
    assert (await store.load("restored")).fsm_state == "tool_call"
    assert (await store.agent("restored", machine)).state is AgentState.TOOL_CALL
    # a bare machine restores as it always did
    bare = AgentStateMachine()
    assert bare.restore("completed") is AgentState.COMPLETED


def test_restoring_a_sync_agents_machine_directly_is_refused() -> None:
    store = SyncStateStore("memory://")
    try:
        agent = store.agent("restored")
        with pytest.raises(MachineError):
            agent.machine.restore("completed")
        assert agent.state is AgentState.IDLE
        assert agent.transition(StateTransition.START_PROCESSING)
        assert store.load("restored").fsm_state == "processing"
    finally:
        store.close()


async def test_a_transition_fired_by_its_stored_string_says_which_event_it_means() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent("a")
        with pytest.raises(InvalidTransition) as info:
            await agent.transition("start_processing")
        assert "fire StateTransition.START_PROCESSING itself" in info.value.__notes__[0]
        assert (await store.load("a")).seq == 1  # nothing written


@pytest.mark.parametrize("strict", [True, False])
async def test_closing_with_unsaved_changes_warns(db_url: str, strict: bool) -> None:
    store = StateStore(db_url)
    agent = await store.agent("a1", strict=strict)
    agent.data["note"] = "not saved"
    if not strict:
        assert await agent.transition(StateTransition.COMPLETE) is False
    with pytest.warns(UnsavedChangesWarning, match="'a1'") as warned:
        await store.close()
    assert len(warned) == 1
    assert issubclass(UnsavedChangesWarning, StatekeeperError)


async def test_closing_with_everything_saved_is_quiet(db_url: str) -> None:
    store = StateStore(db_url)
    agent = await store.agent("a1")
    agent.data["note"] = "saved"
    await agent.save()
    other = await store.agent("a2")
    other.data["x"] = 1
    await other.refresh()  # dropped on purpose: nothing pending
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await store.close()


def test_sync_store_close_warns_about_unsaved_changes(db_url: str) -> None:
    store = SyncStateStore(db_url)
    agent = store.agent("a1")
    agent.data["note"] = "not saved"
    with pytest.raises(InvalidTransition):
        agent.transition(StateTransition.COMPLETE)
    with pytest.warns(UnsavedChangesWarning, match="'a1'"):
        store.close()


async def test_a_guard_refusal_raises_and_names_the_reason(store: StateStore) -> None:
    machine = AgentStateMachine(
        rules=[TransitionRule("idle", "go", "busy", guard=lambda: False)], initial="idle"
    )
    agent = await store.agent("a1", machine)
    with pytest.raises(InvalidTransition, match="guard"):
        await agent.transition("go")
    with pytest.raises(InvalidTransition, match="no rule"):
        await agent.transition("stop")
    assert await store.head("a1") == 1


def test_the_bare_machine_keeps_the_seeds_api() -> None:
    machine = AgentStateMachine()
    assert machine.fire(StateTransition.COMPLETE) is False


async def test_a_change_made_while_a_save_is_in_flight_stays_pending(
    open_store: Callable[..., StateStore],
) -> None:
    """What a write stores is the data as it was diffed: a change made to agent.data
    while the append is on its way is not marked as written (it used to be: the
    committed copy was taken after the append returned), and the next save writes it."""
    import asyncio

    from statekeeper.backends import MemoryBackend
    from statekeeper.records import AppendRequest, AppendResult

    from .conftest import CountingBackend

    class Gated(CountingBackend):
        gate: asyncio.Event | None = None
        entered = asyncio.Event()

        async def append(self, request: AppendRequest) -> AppendResult:
            if self.gate is not None:
                self.entered.set()
                await self.gate.wait()
            return await super().append(request)

    backend = Gated(MemoryBackend())
    store = open_store(backend)
    agent = await store.agent("a1", initial_data={"messages": []})
    backend.gate = asyncio.Event()
    agent.data["messages"].append("one")
    saving = asyncio.ensure_future(agent.save())
    await backend.entered.wait()  # the append is on its way
    agent.data["messages"].append("two")  # meanwhile
    backend.gate.set()
    assert (await saving).last_seq == 2  # type: ignore[union-attr]
    assert (await store.load("a1")).data == {"messages": ["one"]}
    assert agent.dirty
    assert (await agent.save()).last_seq == 3  # type: ignore[union-attr]
    assert (await store.load("a1")).data == {"messages": ["one", "two"]}
    assert not agent.dirty


async def test_saving_a_grown_history_copies_nothing_in_python(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DurableAgent finds its changes from the packed bytes of agent.data and keeps
    those bytes as what was written: no deep copy of the document through the codec
    and no Python diff of the history on a save (both O(size of the state))."""
    import importlib.machinery

    from statekeeper import patch
    from statekeeper.codec.formats import Format
    from statekeeper.store import change

    agent = await store.agent("a1", initial_data={"messages": [{"n": i} for i in range(50)]})
    copies = {"copy_loads": 0, "diff": 0}
    loads, diff = Format.loads, patch.diff

    # Codec.copy_loads is Format.loads(blob, "data") (counted there: a Codec compiled
    # with mypyc takes no patched methods, the interpreted Format does)
    def counted_loads(self: Format, data: bytes, root: str = "value") -> object:
        copies["copy_loads"] += root == "data"
        return loads(self, data, root)

    def counted_diff(*args: object, **kwargs: object) -> object:
        copies["diff"] += 1
        return diff(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Format, "loads", counted_loads)
    # a module compiled with mypyc (docs/benchmarks.md, "A compiled save path") calls
    # patch.diff directly, not through the module's attribute: the count is seen only
    # when the change detection runs as Python
    diff_seen = not str(change.__file__).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    monkeypatch.setattr(patch, "diff", counted_diff)
    for i in range(5):
        agent.data["messages"].append({"n": 50 + i})
        await agent.save()
    assert copies["copy_loads"] == 0
    if diff_seen:
        assert copies["diff"] == 0
    assert (await store.load("a1")).data == {"messages": [{"n": i} for i in range(55)]}
