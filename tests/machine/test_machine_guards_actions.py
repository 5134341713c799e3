"""Guards, actions, strict mode and custom state/event types."""

from __future__ import annotations

import asyncio
from enum import Enum, IntEnum
from typing import Any

import pytest

from statekeeper.errors import InvalidTransition
from statekeeper.machine import AgentStateMachine, TransitionContext, TransitionRule


class Door(Enum):
    OPEN = "open"
    CLOSED = "closed"
    LOCKED = "locked"


class Act(Enum):
    CLOSE = "close"
    OPEN = "open"
    LOCK = "lock"
    UNLOCK = "unlock"


def door(**kw: Any) -> AgentStateMachine[Door, Act]:
    return AgentStateMachine(
        states=Door,
        rules=[
            TransitionRule(Door.OPEN, Act.CLOSE, Door.CLOSED),
            TransitionRule(Door.CLOSED, Act.OPEN, Door.OPEN),
            TransitionRule(Door.CLOSED, Act.LOCK, Door.LOCKED),
            TransitionRule(Door.LOCKED, Act.UNLOCK, Door.CLOSED),
        ],
        initial=Door.OPEN,
        **kw,
    )


def test_enum_states_and_events() -> None:
    m = door()
    assert m.states == (Door.OPEN, Door.CLOSED, Door.LOCKED)
    assert m.events == (Act.CLOSE, Act.OPEN, Act.LOCK, Act.UNLOCK)
    assert m.available_events() == (Act.CLOSE,)
    assert m.fire(Act.CLOSE)
    assert set(m.available_events()) == {Act.OPEN, Act.LOCK}
    assert m.state_value == "closed"


def test_plain_string_states_and_default_initial_is_first_state() -> None:
    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b"), TransitionRule("b", "go", "a")])
    assert m.states == ("a", "b")
    assert m.current_state == "a"
    assert m.fire("go") and m.current_state == "b"
    assert m.fire("go") and m.current_state == "a"
    assert not m.fire("stop")


def test_hashable_non_string_states() -> None:
    class Level(IntEnum):
        LOW = 1
        HIGH = 2

    m = AgentStateMachine(  # type: ignore[var-annotated]
        rules=[TransitionRule(Level.LOW, ("raise", 1), Level.HIGH), TransitionRule(0, "x", 1)],
        initial=Level.LOW,
    )
    assert m.state_value == "1"
    assert m.fire(("raise", 1))
    assert m.state_value == "2"
    assert m.state_for("2") is Level.HIGH
    assert m.event_for("('raise', 1)") == ("raise", 1)


def test_sync_guard_with_context_sees_machine_event_source_target_metadata() -> None:
    seen: list[TransitionContext[Door, Act]] = []

    def guard(ctx: TransitionContext[Door, Act]) -> bool:
        seen.append(ctx)
        return bool(ctx.metadata.get("ok"))

    m = AgentStateMachine(
        rules=[TransitionRule(Door.OPEN, Act.CLOSE, Door.CLOSED, guard=guard)],
        initial=Door.OPEN,
    )
    assert m.fire(Act.CLOSE, {"ok": False}) is False
    assert m.current_state is Door.OPEN
    assert m.fire(Act.CLOSE, {"ok": True}) is True
    ctx = seen[-1]
    assert ctx.machine is m
    assert (ctx.event, ctx.source, ctx.target) == (Act.CLOSE, Door.OPEN, Door.CLOSED)
    assert ctx.metadata == {"ok": True}


def test_zero_arg_guard_like_the_seed() -> None:
    allowed = [False]
    m = AgentStateMachine(
        rules=[TransitionRule("a", "go", "b", guard=lambda: allowed[0])],
    )
    assert not m.can_transition("go")
    assert not m.fire("go")
    allowed[0] = True
    assert m.can_transition("go")
    assert m.fire("go")


def test_only_required_positional_parameters_receive_the_context() -> None:
    got: list[Any] = []

    def optional(ctx: Any = None) -> bool:
        got.append(("optional", ctx))
        return True

    def star(*args: Any) -> bool:
        got.append(("star", type(args[0]).__name__))
        return True

    rules = []
    for name, answer in [("a", False), ("b", True)]:
        # the loop-closure idiom: a defaulted parameter is not the context
        rules.append(TransitionRule("start", "pick", name, guard=lambda answer=answer: answer))
    m = AgentStateMachine(
        rules=[
            *rules,
            TransitionRule("b", "go", "c", guard=optional),
            TransitionRule("c", "go", "d", guard=star),
        ]
    )
    assert m.fire("pick") and m.current_state == "b"
    m.fire("go")
    m.fire("go")
    assert got == [("optional", None), ("star", "TransitionContext")]


async def test_async_guard() -> None:
    async def guard(ctx: TransitionContext[str, str]) -> bool:
        await asyncio.sleep(0)
        return ctx.metadata.get("user") == "admin"

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=guard)])
    assert not await m.transition("go", {"user": "bob"})
    assert m.current_state == "a"
    assert not await m.can_transition_async("go")
    assert m.current_state == "a"
    assert await m.transition("go", {"user": "admin"})
    assert m.current_state == "b"


async def test_async_zero_arg_guard() -> None:
    async def guard() -> bool:
        return True

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=guard)])
    assert await m.can_transition_async("go")
    assert await m.transition("go")


async def test_sync_callable_returning_an_awaitable_is_awaited() -> None:
    async def really() -> bool:
        return False

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=lambda: really())])
    assert await m.transition("go") is False


def test_first_rule_whose_guard_passes_wins_in_registration_order() -> None:
    calls: list[str] = []

    def small(ctx: TransitionContext[str, str]) -> bool:
        calls.append("small")
        return ctx.metadata["size"] < 10  # type: ignore[no-any-return]

    def medium(ctx: TransitionContext[str, str]) -> bool:
        calls.append("medium")
        return ctx.metadata["size"] < 100  # type: ignore[no-any-return]

    m = AgentStateMachine(
        rules=[
            TransitionRule("in", "route", "fast", guard=small),
            TransitionRule("in", "route", "normal", guard=medium),
            TransitionRule("in", "route", "slow"),  # fallback: no guard
        ],
        initial="in",
    )
    assert m.fire("route", {"size": 5}) and m.current_state == "fast"
    assert calls == ["small"]
    m.restore("in")
    calls.clear()
    assert m.fire("route", {"size": 50}) and m.current_state == "normal"
    assert calls == ["small", "medium"]
    m.restore("in")
    assert m.fire("route", {"size": 500}) and m.current_state == "slow"


def test_all_guards_rejecting_refuses_and_strict_says_guard_rejected() -> None:
    rules = [
        TransitionRule("a", "go", "b", guard=lambda: False),
        TransitionRule("a", "go", "c", guard=lambda: 0),
    ]
    m = AgentStateMachine(rules=rules)
    assert m.fire("go") is False
    assert m.get_stats()["rejected_transitions"] == 1
    strict = AgentStateMachine(rules=rules, strict=True)
    with pytest.raises(InvalidTransition) as info:
        strict.fire("go")
    assert (info.value.state, info.value.event, info.value.reason) == ("a", "go", "guard rejected")
    assert strict.current_state == "a"
    assert strict.history == []


async def test_strict_async_no_rule() -> None:
    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b")], strict=True)
    with pytest.raises(InvalidTransition) as info:
        await m.transition("nope")
    assert info.value.reason == "no rule"
    assert not m.can_transition("nope")  # can_transition never raises for refusal


def test_strict_can_be_toggled_on_an_existing_machine() -> None:
    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b")])
    assert m.fire("nope") is False
    m.strict = True
    with pytest.raises(InvalidTransition):
        m.fire("nope")


def test_truthy_guard_results_are_accepted() -> None:
    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=lambda: [1])])
    assert m.fire("go")


def test_sync_action_with_and_without_context() -> None:
    log: list[Any] = []
    m = AgentStateMachine(
        rules=[
            TransitionRule("a", "go", "b", action=lambda: log.append("zero-arg")),
            TransitionRule("b", "go", "a", action=lambda ctx: log.append(ctx.target)),
        ]
    )
    m.fire("go")
    m.fire("go")
    assert log == ["zero-arg", "a"]


async def test_async_action_runs_before_the_state_changes() -> None:
    states_during_action: list[str] = []
    m: AgentStateMachine[str, str]

    async def action(ctx: TransitionContext[str, str]) -> None:
        await asyncio.sleep(0)
        states_during_action.append(ctx.machine.current_state)

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", action=action)])
    assert await m.transition("go")
    assert states_during_action == ["a"]
    assert m.current_state == "b"


async def test_guard_error_aborts_and_propagates_the_original_exception() -> None:
    def guard() -> bool:
        raise LookupError("quota service down")

    m = AgentStateMachine(
        rules=[TransitionRule("a", "go", "b", guard=guard), TransitionRule("a", "skip", "b")]
    )
    with pytest.raises(LookupError, match="quota service down") as info:
        await m.transition("go")
    assert any("guard" in note for note in info.value.__notes__)
    assert m.current_state == "a"
    assert m.history == []
    assert m.total_transitions == 0
    with pytest.raises(LookupError):
        m.fire("go")
    assert m.fire("skip")  # the machine is not left busy


@pytest.mark.parametrize("use_async", [False, True])
async def test_action_error_aborts_with_state_history_and_stats_unchanged(use_async: bool) -> None:
    async def async_boom() -> None:
        raise RuntimeError("tool crashed")

    def sync_boom() -> None:
        raise RuntimeError("tool crashed")

    m = AgentStateMachine(
        rules=[
            TransitionRule("a", "go", "b", action=async_boom if use_async else sync_boom),
            TransitionRule("a", "skip", "b"),
        ]
    )
    calls: list[Any] = []
    m.add_callback(lambda *a: calls.append(a))
    m.add_listener(calls.append)
    with pytest.raises(RuntimeError, match="tool crashed") as info:
        await m.transition("go")
    assert any("action" in note and "state unchanged" in note for note in info.value.__notes__)
    assert m.current_state == "a"
    assert m.history == []
    assert m.get_stats()["total_transitions"] == 0
    assert calls == []
    # the machine still works afterwards
    assert await m.transition("skip")
    assert m.current_state == "b"
