"""Hooks, listeners, callbacks: order, sync/async, and error handling."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from statekeeper.errors import CallbackError
from statekeeper.machine import (
    AgentStateMachine,
    CallbackFailure,
    TransitionContext,
    TransitionResult,
    TransitionRule,
)


def ab(**kw: Any) -> AgentStateMachine[str, str]:
    return AgentStateMachine(
        rules=[TransitionRule("a", "go", "b"), TransitionRule("b", "go", "a")], **kw
    )


async def test_full_order_exit_action_enter_listeners_callbacks() -> None:
    order: list[str] = []

    async def aexit() -> None:
        order.append("exit a (async)")

    def action(ctx: TransitionContext[str, str]) -> None:
        order.append(f"action, state still {ctx.machine.current_state}")

    def guard() -> bool:
        order.append("guard")
        return True

    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b", guard=guard, action=action)])
    m.on_exit("a", lambda: order.append("exit a"))
    m.on_exit("a", aexit)
    m.on_enter("b", lambda ctx: order.append(f"enter b, state now {ctx.machine.current_state}"))
    m.add_listener(lambda r: order.append(f"listener {r.source}->{r.target}"))
    m.add_callback(lambda old, new, ev: order.append(f"callback {old}->{new} on {ev}"))

    async def acb(old: str, new: str, ev: str) -> None:
        order.append("async callback")

    m.add_callback(acb)
    assert await m.transition("go")
    assert order == [
        "guard",
        "exit a",
        "exit a (async)",
        "action, state still a",
        "enter b, state now b",
        "listener a->b",
        "callback a->b on go",
        "async callback",
    ]


def test_hooks_as_decorators_and_self_transition_runs_exit_and_enter() -> None:
    m = AgentStateMachine(rules=[TransitionRule("a", "again", "a")])
    order: list[str] = []

    @m.on_exit("a")
    def left() -> None:
        order.append("exit")

    @m.on_enter("a")
    def entered() -> None:
        order.append("enter")

    assert left.__name__ == "left" and entered.__name__ == "entered"
    m.fire("again")
    assert order == ["exit", "enter"]


def test_exit_hook_error_aborts_transition() -> None:
    m = ab()

    def bad_exit() -> None:
        raise ValueError("cannot leave")

    m.on_exit("a", bad_exit)
    with pytest.raises(ValueError, match="cannot leave") as info:
        m.fire("go")
    assert any("on_exit" in note for note in info.value.__notes__)
    assert m.current_state == "a"
    assert m.history == []


def test_callback_errors_are_collected_logged_and_do_not_stop_other_callbacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = ab()
    ran: list[str] = []

    def broken(old: str, new: str, event: str) -> None:
        raise KeyError("missing")

    m.add_callback(broken)
    m.add_callback(lambda *a: ran.append("second"))
    with caplog.at_level(logging.ERROR, logger="statekeeper.machine"):
        assert m.fire("go") is True  # the transition stands
    assert m.current_state == "b"
    assert ran == ["second"]
    [failure] = list(m.callback_errors)
    assert isinstance(failure, CallbackFailure)
    assert failure.phase == "callback"
    assert failure.callback.endswith("broken")
    assert (failure.source, failure.target, failure.event) == ("a", "b", "go")
    assert isinstance(failure.error, KeyError)
    assert any("the transition stands" in n for n in failure.error.__notes__)
    [record] = [r for r in caplog.records if r.name == "statekeeper.machine"]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.callback.endswith("broken")  # type: ignore[attr-defined]
    assert record.event == "go"  # type: ignore[attr-defined]
    assert record.state == "b"  # type: ignore[attr-defined]
    assert record.source == "a"  # type: ignore[attr-defined]
    assert "broken" in record.getMessage()
    assert m.get_stats()["callback_errors"] == 1


async def test_async_callback_error_is_in_the_result() -> None:
    m = ab()

    async def broken(old: str, new: str, event: str) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("webhook down")

    m.add_callback(broken)
    result = await m.send("go")
    assert result is not None
    assert not result.ok
    [failure] = result.callback_errors
    assert isinstance(failure.error, RuntimeError)
    assert m.current_state == "b"
    assert list(m.callback_errors) == [failure]


def test_enter_hook_error_is_collected_and_listeners_still_run() -> None:
    m = ab()
    results: list[TransitionResult[str, str]] = []

    def bad_enter() -> None:
        raise RuntimeError("enter failed")

    m.on_enter("b", bad_enter)
    m.add_listener(results.append)
    assert m.fire("go")
    assert m.current_state == "b"
    [result] = results
    assert [f.phase for f in result.callback_errors] == ["enter"]


def test_raise_callback_errors_raises_after_all_callbacks_ran() -> None:
    m = ab(raise_callback_errors=True)
    ran: list[str] = []

    def first(*_: Any) -> None:
        raise ValueError("one")

    def second(*_: Any) -> None:
        raise TypeError("two")

    m.add_callback(first)
    m.add_callback(second)
    m.add_callback(lambda *_: ran.append("third"))
    with pytest.raises(CallbackError) as info:
        m.fire("go")
    assert ran == ["third"]
    assert [type(e) for e in info.value.errors] == [ValueError, TypeError]
    assert info.value.__cause__ is info.value.errors[0]
    assert m.current_state == "b"  # the transition happened
    assert len(m.history) == 1


def test_callback_errors_are_bounded() -> None:
    m = ab(callback_error_limit=3)

    def broken(*_: Any) -> None:
        raise RuntimeError

    m.add_callback(broken)
    for _ in range(10):
        m.fire("go")
    assert len(m.callback_errors) == 3
    assert m.get_stats()["callback_errors"] == 10


def test_listener_gets_result_before_callbacks_and_its_errors_propagate() -> None:
    m = ab()
    callbacks: list[str] = []
    m.add_callback(lambda *a: callbacks.append("cb"))

    def listener(result: TransitionResult[str, str]) -> None:
        raise OSError("disk full")

    m.add_listener(listener)
    with pytest.raises(OSError, match="disk full"):
        m.fire("go")
    # the state had changed before listeners ran; callbacks were skipped
    assert m.current_state == "b"
    assert callbacks == []
    m.remove_listener(listener)
    assert m.fire("go")
    assert callbacks == ["cb"]


def test_listener_result_fields(clock) -> None:  # type: ignore[no-untyped-def]
    m = ab(clock=clock)
    got: list[TransitionResult[str, str]] = []
    m.add_listener(got.append)
    clock.advance(2.5)
    m.fire("go", {"why": "test"})
    [r] = got
    assert (r.source, r.target, r.event) == ("a", "b", "go")
    assert r.metadata == {"why": "test"}
    assert r.timestamp == 1002.5
    assert r.duration == 2.5
    assert r.ok


def test_listeners_must_be_sync() -> None:
    async def listener(result: Any) -> None: ...

    with pytest.raises(TypeError):
        ab().add_listener(listener)


def test_transition_callbacks_list_mutations_are_seen() -> None:
    m = ab()
    seen: list[str] = []

    def cb(*_: Any) -> None:
        seen.append("cb")

    m.transition_callbacks.append(cb)
    m.fire("go")
    m.transition_callbacks.remove(cb)
    m.fire("go")
    m.transition_callbacks += [cb]
    m.fire("go")
    m.transition_callbacks = []
    m.fire("go")
    assert m.add_callback(cb) is cb
    m.fire("go")
    m.remove_callback(cb)
    m.fire("go")
    assert seen == ["cb", "cb", "cb"]


def test_fire_from_a_callback_runs_a_nested_transition() -> None:
    m = AgentStateMachine(rules=[TransitionRule("a", "go", "b"), TransitionRule("b", "next", "c")])
    m.on_enter("b", lambda ctx: ctx.machine.fire("next"))
    assert m.fire("go")
    assert m.current_state == "c"
    assert [h.state for h in m.history] == ["a", "b"]
