"""The seed's default lifecycle and the seed-compatible API."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from statekeeper.errors import InvalidTransition
from statekeeper.machine import (
    DEFAULT_RULES,
    AgentState,
    AgentStateMachine,
    StateHistory,
    StateTransition,
    TransitionRule,
    default_rules,
)

S = AgentState
T = StateTransition

# The seed's table, verbatim.
SEED_TABLE = [
    (S.IDLE, T.START_PROCESSING, S.PROCESSING),
    (S.PROCESSING, T.AWAIT_INPUT, S.WAITING),
    (S.PROCESSING, T.CALL_TOOL, S.TOOL_CALL),
    (S.PROCESSING, T.COMPLETE, S.COMPLETED),
    (S.PROCESSING, T.FAIL, S.ERROR),
    (S.WAITING, T.RECEIVE_RESULT, S.PROCESSING),
    (S.TOOL_CALL, T.RECEIVE_RESULT, S.PROCESSING),
    (S.TOOL_CALL, T.FAIL, S.ERROR),
    (S.ERROR, T.RECOVER, S.IDLE),
    (S.ERROR, T.RESET, S.IDLE),
    (S.COMPLETED, T.RESET, S.IDLE),
]
ALLOWED = {(src, ev): dst for src, ev, dst in SEED_TABLE}
DISALLOWED = [pair for pair in itertools.product(S, T) if pair not in ALLOWED]


def test_enum_values_match_the_seed() -> None:
    assert [s.value for s in S] == [
        "idle",
        "processing",
        "waiting",
        "tool_call",
        "error",
        "completed",
    ]
    assert [t.value for t in T] == [
        "start_processing",
        "await_input",
        "call_tool",
        "receive_result",
        "complete",
        "fail",
        "recover",
        "reset",
    ]


def test_default_machine_has_exactly_the_seed_table() -> None:
    m = AgentStateMachine()
    assert m.current_state is S.IDLE
    assert m.initial is S.IDLE
    assert m.states == tuple(S)
    assert [(r.from_state, r.event, r.to_state) for r in m.rules] == SEED_TABLE
    assert all(r.guard is None and r.action is None for r in m.rules)
    assert len(DEFAULT_RULES) == 11
    assert default_rules() == list(DEFAULT_RULES)
    assert default_rules() is not default_rules()


@pytest.mark.parametrize(("source", "event", "target"), SEED_TABLE)
async def test_every_seed_transition_is_allowed(
    source: AgentState, event: StateTransition, target: AgentState
) -> None:
    m = AgentStateMachine()
    m.restore(source.value)
    assert m.can_transition(event)
    assert await m.transition(event) is True
    assert m.current_state is target
    assert len(m.history) == 1


@pytest.mark.parametrize(("source", "event", "target"), SEED_TABLE)
def test_every_seed_transition_is_allowed_sync(
    source: AgentState, event: StateTransition, target: AgentState
) -> None:
    m = AgentStateMachine()
    m.restore(source)
    assert m.fire(event) is True
    assert m.current_state is target


@pytest.mark.parametrize(("source", "event"), DISALLOWED)
async def test_every_other_pair_is_refused_and_changes_nothing(
    source: AgentState, event: StateTransition
) -> None:
    m = AgentStateMachine()
    m.restore(source)
    assert not m.can_transition(event)
    assert await m.transition(event) is False
    assert m.fire(event) is False
    assert m.current_state is source
    assert m.history == []
    assert m.get_stats()["total_transitions"] == 0
    assert m.get_stats()["rejected_transitions"] == 2


@pytest.mark.parametrize(("source", "event"), DISALLOWED[::5])
def test_strict_default_machine_raises_no_rule(source: AgentState, event: StateTransition) -> None:
    m = AgentStateMachine(strict=True)
    m.restore(source)
    with pytest.raises(InvalidTransition) as info:
        m.fire(event)
    assert info.value.state is source
    assert info.value.event is event
    assert info.value.reason == "no rule"
    assert m.current_state is source


def test_default_lifecycle_validates_clean() -> None:
    report = AgentStateMachine().validate()
    assert report.ok
    assert report.unreachable == ()
    assert report.dead_ends == ()


async def test_seed_happy_path_with_tool_call(clock) -> None:  # type: ignore[no-untyped-def]
    m = AgentStateMachine(clock=clock)
    path = [
        (T.START_PROCESSING, S.PROCESSING),
        (T.CALL_TOOL, S.TOOL_CALL),
        (T.RECEIVE_RESULT, S.PROCESSING),
        (T.COMPLETE, S.COMPLETED),
        (T.RESET, S.IDLE),
    ]
    for i, (event, expected) in enumerate(path):
        clock.advance(i + 1)
        assert await m.transition(event, {"step": i})
        assert m.current_state is expected
    hist = m.history
    assert [h.state for h in hist] == [S.IDLE, S.PROCESSING, S.TOOL_CALL, S.PROCESSING, S.COMPLETED]
    assert [h.duration for h in hist] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [h.metadata for h in hist] == [{"step": i} for i in range(5)]
    assert [h.event for h in hist] == [e for e, _ in path]
    assert [h.target for h in hist] == [s for _, s in path]
    assert hist[0] == StateHistory(
        S.IDLE, 1000.0, 1.0, {"step": 0}, T.START_PROCESSING, S.PROCESSING
    )


def test_seed_stats_keys_and_values(clock) -> None:  # type: ignore[no-untyped-def]
    m = AgentStateMachine(clock=clock)
    empty = m.get_stats()
    assert empty["current_state"] == "idle"
    assert empty["state_counts"] == {}
    assert empty["total_transitions"] == 0
    assert empty["total_duration"] == 0
    assert empty["avg_state_duration"] == 0
    clock.advance(2)
    m.fire(T.START_PROCESSING)
    clock.advance(4)
    m.fire(T.FAIL)
    clock.advance(6)
    m.fire(T.RECOVER)
    clock.advance(1.5)
    stats = m.get_stats()
    assert {
        "current_state",
        "state_counts",
        "total_transitions",
        "total_duration",
        "avg_state_duration",
    } <= stats.keys()
    assert stats["current_state"] == "idle"
    assert stats["state_counts"] == {"idle": 1, "processing": 1, "error": 1}
    assert stats["total_transitions"] == 3
    assert stats["total_duration"] == 12.0
    assert stats["avg_state_duration"] == 4.0
    assert stats["state_durations"] == {"idle": 2.0, "processing": 4.0, "error": 6.0}
    assert stats["current_state_duration"] == 1.5
    assert stats["history_length"] == 3


def test_state_data_and_duration(clock) -> None:  # type: ignore[no-untyped-def]
    m = AgentStateMachine(clock=clock)
    assert m.get_state_data("missing") is None
    assert m.get_state_data("missing", 7) == 7
    m.set_state_data("task", {"id": 1})
    assert m.get_state_data("task") == {"id": 1}
    assert m.state_data == {"task": {"id": 1}}
    clock.advance(3.25)
    assert m.get_state_duration() == 3.25
    assert m.state_entry_time == 1000.0
    m.fire(T.START_PROCESSING)
    assert m.get_state_duration() == 0.0
    assert m.state_entry_time == 1003.25


async def test_seed_style_async_callbacks_receive_old_new_event() -> None:
    m = AgentStateMachine()
    seen: list[tuple[AgentState, AgentState, StateTransition]] = []

    async def on_change(old: AgentState, new: AgentState, event: StateTransition) -> None:
        await asyncio.sleep(0)
        seen.append((old, new, event))

    m.transition_callbacks.append(on_change)  # the seed's attribute still works
    await m.transition(T.START_PROCESSING)
    assert seen == [(S.IDLE, S.PROCESSING, T.START_PROCESSING)]


def test_extending_the_default_lifecycle() -> None:
    m = AgentStateMachine()
    m.add_state("paused")  # type: ignore[arg-type]
    m.add_transition(TransitionRule(S.PROCESSING, "pause", "paused"))  # type: ignore[arg-type]
    m.add_transition(TransitionRule("paused", "resume", S.PROCESSING))  # type: ignore[arg-type]
    m.fire(T.START_PROCESSING)
    assert m.fire("pause")  # type: ignore[arg-type]
    assert m.state_value == "paused"
    assert m.fire("resume")  # type: ignore[arg-type]
    assert m.current_state is S.PROCESSING
    assert m.validate().ok


def test_custom_rules_with_defaults_flag_extend_the_lifecycle() -> None:
    extra = TransitionRule(S.WAITING, T.FAIL, S.ERROR)
    m = AgentStateMachine(rules=[extra], defaults=True)
    assert len(m.rules) == 12
    m.restore("waiting")
    assert m.fire(T.FAIL)
    assert m.current_state is S.ERROR


def test_an_event_fired_by_its_stored_string_is_refused_with_a_hint() -> None:
    """``fire("start_processing")`` on the default lifecycle matches no rule (the rules
    name ``StateTransition.START_PROCESSING``): the refusal said only "no rule" from a
    state that has that very rule; it now says which event the string stands for."""
    m = AgentStateMachine(strict=True)
    with pytest.raises(InvalidTransition, match="no rule") as info:
        m.fire("start_processing")
    assert info.value.__notes__ == [
        "'start_processing' is the stored value of the event "
        "StateTransition.START_PROCESSING: fire StateTransition.START_PROCESSING itself"
    ]
    assert m.current_state is AgentState.IDLE
    with pytest.raises(InvalidTransition) as unknown:  # a string of no event: no hint
        m.fire("launch")
    assert not getattr(unknown.value, "__notes__", None)
    assert m.fire(StateTransition.START_PROCESSING)
