"""Sync and async drivers, concurrency, history, clock, restore and definition errors."""

from __future__ import annotations

import asyncio
import logging
import warnings
from enum import StrEnum
from typing import Any

import pytest

from statekeeper.errors import (
    AsyncRequired,
    InvalidMachineDefinition,
    TransitionInProgress,
    UnknownEvent,
    UnknownState,
)
from statekeeper.machine import (
    AgentState,
    AgentStateMachine,
    StateTransition,
    TransitionContext,
    TransitionRule,
)


def ab(**kw: Any) -> AgentStateMachine[str, str]:
    return AgentStateMachine(
        rules=[TransitionRule("a", "go", "b"), TransitionRule("b", "go", "a")], **kw
    )


# ------------------------------------------------------------------ sync driver


def test_fire_and_send_sync() -> None:
    m = ab()
    assert m.fire("go") is True
    result = m.send_sync("go", {"k": 1})
    assert result is not None
    assert (result.source, result.target, result.metadata) == ("b", "a", {"k": 1})
    assert m.send_sync("nope") is None


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("guard", "guard"),
        ("action", "action"),
        ("exit", "on_exit hook"),
        ("enter", "on_enter hook"),
        ("callback", "callback"),
    ],
)
def test_fire_refuses_async_callables_before_changing_anything(where: str, expected: str) -> None:
    async def guard() -> bool:
        return True

    async def hook(*_: Any) -> None:
        return None

    rule = TransitionRule(
        "a",
        "go",
        "b",
        guard=guard if where == "guard" else None,
        action=hook if where == "action" else None,
    )
    m = AgentStateMachine(rules=[rule])
    if where == "exit":
        m.on_exit("a", hook)
    if where == "enter":
        m.on_enter("b", hook)
    if where == "callback":
        m.add_callback(hook)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        with pytest.raises(AsyncRequired) as info:
            m.fire("go")
    assert expected in str(info.value)
    assert info.value.state == "a" and info.value.event == "go"
    assert isinstance(info.value, TypeError)
    assert m.current_state == "a"
    assert m.history == []
    assert m.total_transitions == 0


def test_can_transition_with_async_guard_needs_the_async_variant() -> None:
    async def guard() -> bool:
        return True

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=guard)])
    with pytest.raises(AsyncRequired):
        m.can_transition("go")
    assert asyncio.run(m.can_transition_async("go")) is True
    assert m.current_state == "a"


def test_sync_lambda_returning_coroutine_is_detected_in_fire() -> None:
    async def later() -> bool:
        return True

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=lambda: later())])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AsyncRequired):
            m.fire("go")
    assert m.current_state == "a"


def test_callable_object_with_async_call_is_classified_async() -> None:
    class Check:
        async def __call__(self) -> bool:
            return True

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=Check())])
    with pytest.raises(AsyncRequired):
        m.fire("go")
    assert asyncio.run(m.transition("go")) is True


def test_same_algorithm_sync_and_async_give_identical_histories(clock) -> None:  # type: ignore[no-untyped-def]
    def run_sync() -> list[Any]:
        m = AgentStateMachine(clock=clock)
        for ev in StateTransition:
            clock.advance(1)
            m.fire(ev)
        return [(h.state, h.event, h.target, h.duration) for h in m.history]

    async def run_async() -> list[Any]:
        m = AgentStateMachine(clock=clock)
        for ev in StateTransition:
            clock.advance(1)
            await m.transition(ev)
        return [(h.state, h.event, h.target, h.duration) for h in m.history]

    assert run_sync() == asyncio.run(run_async())


# ------------------------------------------------------------------ concurrency


async def test_concurrent_tasks_are_serialized_while_an_action_awaits() -> None:
    gate = asyncio.Event()
    events: list[str] = []

    async def slow(ctx: TransitionContext[str, str]) -> None:
        events.append(f"start {ctx.source}")
        await gate.wait()
        events.append(f"end {ctx.source}")

    m = AgentStateMachine(
        rules=[TransitionRule("a", "go", "b", action=slow), TransitionRule("b", "go", "c")]
    )
    first = asyncio.create_task(m.transition("go"))
    await asyncio.sleep(0)
    second = asyncio.create_task(m.transition("go"))
    await asyncio.sleep(0)
    assert events == ["start a"] and m.current_state == "a"
    gate.set()
    assert await first is True
    assert await second is True  # ran from "b", after the first committed
    assert m.current_state == "c"
    assert [h.state for h in m.history] == ["a", "b"]


async def test_reentrant_transition_from_an_action_is_refused() -> None:
    async def action(ctx: TransitionContext[str, str]) -> None:
        await asyncio.sleep(0)
        await ctx.machine.transition("go")

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", action=action)])
    with pytest.raises(TransitionInProgress):
        await asyncio.wait_for(m.transition("go"), timeout=2)
    assert m.current_state == "a"


def test_reentrant_fire_from_a_guard_is_refused() -> None:
    def guard(ctx: TransitionContext[str, str]) -> bool:
        ctx.machine.fire("other")
        return True

    m = AgentStateMachine(
        rules=[TransitionRule("a", "go", "b", guard=guard), TransitionRule("a", "other", "b")]
    )
    with pytest.raises(TransitionInProgress):
        m.fire("go")
    assert m.current_state == "a"
    assert m.fire("other")


async def test_cancelling_a_transition_mid_action_leaves_the_machine_usable() -> None:
    async def forever() -> None:
        await asyncio.sleep(3600)

    m = AgentStateMachine(
        rules=[TransitionRule("a", "go", "b", action=forever), TransitionRule("a", "skip", "b")]
    )
    task = asyncio.create_task(m.transition("go"))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(m.transition("skip"))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.wait_for(waiter, timeout=2) is True
    assert m.current_state == "b"


async def test_restore_during_a_pending_transition_is_refused() -> None:
    gate = asyncio.Event()

    async def slow() -> None:
        await gate.wait()

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", action=slow)])
    task = asyncio.create_task(m.transition("go"))
    await asyncio.sleep(0)
    with pytest.raises(TransitionInProgress):
        m.restore("b")
    gate.set()
    assert await task


# ------------------------------------------------------------- history & clock


def test_history_is_bounded_but_stats_stay_exact(clock) -> None:  # type: ignore[no-untyped-def]
    m = ab(clock=clock, history_limit=5)
    for _ in range(12):
        clock.advance(1)
        m.fire("go")
    assert m.history_limit == 5
    assert len(m.history) == 5
    assert [h.timestamp for h in m.history] == [1007.0, 1008.0, 1009.0, 1010.0, 1011.0]
    stats = m.get_stats()
    assert stats["total_transitions"] == 12
    assert stats["state_counts"] == {"a": 6, "b": 6}
    assert stats["total_duration"] == 12.0
    assert stats["history_length"] == 5


def test_history_can_be_disabled_or_unbounded() -> None:
    off = ab(history_limit=0)
    off.fire("go")
    assert off.history == [] and off.total_transitions == 1
    unbounded = ab(history_limit=None)
    for _ in range(1500):
        unbounded.fire("go")
    assert len(unbounded.history) == 1500
    default = ab()
    for _ in range(1500):
        default.fire("go")
    assert len(default.state_history) == 1000


def test_injected_clock_is_used_for_every_timestamp(clock) -> None:  # type: ignore[no-untyped-def]
    m = ab(clock=clock)
    assert m.state_entry_time == 1000.0
    clock.advance(0.25)
    m.fire("go")
    clock.advance(0.5)
    m.fire("go")
    h1, h2 = m.history
    assert (h1.timestamp, h1.duration) == (1000.0, 0.25)
    assert (h2.timestamp, h2.duration) == (1000.25, 0.5)
    assert m.state_entry_time == 1000.75
    assert m.clock is clock


def test_metadata_default_is_an_empty_read_only_mapping() -> None:
    m = ab()
    m.fire("go")
    [h] = m.history
    assert h.metadata == {}
    with pytest.raises(TypeError):
        h.metadata["x"] = 1  # type: ignore[index]


# ------------------------------------------------------------------ restore API


def test_restore_state_value_and_entered_at(clock) -> None:  # type: ignore[no-untyped-def]
    m = AgentStateMachine(clock=clock)
    hooks: list[str] = []
    m.on_enter(AgentState.WAITING, lambda: hooks.append("enter"))
    m.on_exit(AgentState.IDLE, lambda: hooks.append("exit"))
    m.add_listener(lambda r: hooks.append("listener"))
    assert m.restore("waiting", entered_at=900.0) is AgentState.WAITING
    assert m.current_state is AgentState.WAITING
    assert m.state_value == "waiting"
    assert m.state_entry_time == 900.0
    assert m.get_state_duration() == 100.0
    assert hooks == []  # no hooks, actions or listeners
    assert m.history == [] and m.total_transitions == 0
    assert m.available_events() == (StateTransition.RECEIVE_RESULT,)
    assert m.fire(StateTransition.RECEIVE_RESULT)
    m.restore(AgentState.ERROR)
    assert m.state_entry_time == 1000.0


def test_restore_unknown_value_raises_unknown_state() -> None:
    m = AgentStateMachine()
    with pytest.raises(UnknownState, match="sleeping"):
        m.restore("sleeping")
    with pytest.raises(UnknownState):
        m.state_for("IDLE")  # names are not values
    assert m.current_state is AgentState.IDLE


def test_state_for_and_event_for_round_trip() -> None:
    m = AgentStateMachine()
    for state in AgentState:
        assert m.state_for(state.value) is state
        assert m.state_for(state) is state
    for event in StateTransition:
        assert m.event_for(event.value) is event
        assert m.event_for(event) is event
        assert m.event_value(event) == event.value
    with pytest.raises(UnknownEvent):
        m.event_for("explode")


def test_str_enum_values_resolve_to_members() -> None:
    class Phase(StrEnum):
        PLAN = "plan"
        ACT = "act"

    m = AgentStateMachine(rules=[TransitionRule(Phase.PLAN, "go", Phase.ACT)])
    assert m.state_for("act") is Phase.ACT
    m.restore("act")
    assert m.current_state is Phase.ACT


def test_state_value_round_trips_through_restore_for_all_states() -> None:
    m = AgentStateMachine()
    other = AgentStateMachine()
    for state in AgentState:
        m.restore(state)
        other.restore(m.state_value)
        assert other.current_state is m.current_state


# ----------------------------------------------------------- definition errors


def test_unknown_state_in_rule_is_a_definition_error() -> None:
    with pytest.raises(InvalidMachineDefinition, match="unknown state"):
        AgentStateMachine(states=["a", "b"], rules=[TransitionRule("a", "go", "c")])
    m = AgentStateMachine()
    with pytest.raises(InvalidMachineDefinition):
        m.add_transition(TransitionRule(AgentState.IDLE, StateTransition.FAIL, "nowhere"))  # type: ignore[arg-type]


def test_rule_shadowed_by_unguarded_rule_is_rejected() -> None:
    m = AgentStateMachine()
    with pytest.raises(InvalidMachineDefinition, match="never fire"):
        m.add_transition(
            TransitionRule(AgentState.IDLE, StateTransition.START_PROCESSING, AgentState.ERROR)
        )
    assert len(m.rules) == 11


def test_other_definition_errors() -> None:
    with pytest.raises(InvalidMachineDefinition, match="initial"):
        AgentStateMachine(states=["a"], rules=[], initial="zzz")
    with pytest.raises(InvalidMachineDefinition, match="at least one state"):
        AgentStateMachine(states=[], rules=[])
    with pytest.raises(InvalidMachineDefinition, match="share the stored value"):
        AgentStateMachine(states=["1", 1], rules=[])
    with pytest.raises(InvalidMachineDefinition, match="not callable"):
        AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=True)])  # type: ignore[arg-type]
    with pytest.raises(InvalidMachineDefinition, match="TransitionRule"):
        AgentStateMachine(rules=[("a", "go", "b")])  # type: ignore[list-item]
    with pytest.raises(InvalidMachineDefinition):
        AgentStateMachine(history_limit=-1)
    with pytest.raises(InvalidMachineDefinition):
        AgentStateMachine().on_enter("nowhere", lambda: None)  # type: ignore[arg-type]
    with pytest.raises(InvalidMachineDefinition):
        AgentStateMachine(final_states=["nowhere"])  # type: ignore[list-item]


def test_introspection() -> None:
    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b"), TransitionRule("a", "x", "c")])
    assert m.rules_from("a") == m.rules
    assert m.rules_from("b") == ()
    with pytest.raises(UnknownState):
        m.rules_from("zz")
    assert m.available_events() == ("go", "x")
    assert "state='a'" in repr(m)
    assert m.listeners == ()
    assert not m.is_final
    m2 = AgentStateMachine(rules=[TransitionRule("a", "go", "b")], final_states=["b"])
    m2.fire("go")
    assert m2.is_final and m2.final_states == ("b",)


async def test_sync_fire_while_an_async_transition_is_suspended_is_refused() -> None:
    gate = asyncio.Event()

    async def slow() -> None:
        await gate.wait()

    m = AgentStateMachine(
        rules=[TransitionRule("a", "go", "b", action=slow), TransitionRule("a", "alt", "c")]
    )
    task = asyncio.create_task(m.transition("go"))
    await asyncio.sleep(0)
    with pytest.raises(TransitionInProgress) as info:
        m.fire("alt")
    assert info.value.event == "alt"
    gate.set()
    assert await task
    assert m.current_state == "b"


async def test_send_returns_none_when_refused_and_result_when_moved() -> None:
    m = ab()
    assert await m.send("nope") is None
    result = await m.send("go", {"x": 1})
    assert result is not None and result.target == "b" and result.metadata == {"x": 1}


def test_debug_log_of_transitions_and_refusals(caplog: pytest.LogCaptureFixture) -> None:
    m = ab(name="agent-7")
    with caplog.at_level(logging.DEBUG, logger="statekeeper.machine"):
        m.fire("go")
        m.fire("nope")
    messages = [r.getMessage() for r in caplog.records if r.name == "statekeeper.machine"]
    assert messages == ["agent-7: a -[go]-> b", "agent-7: 'nope' refused in state 'b': no rule"]
