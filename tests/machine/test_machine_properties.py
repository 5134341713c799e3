"""Property tests: no event sequence corrupts a machine, and it agrees with a dict model."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.errors import InvalidTransition
from statekeeper.machine import (
    AgentState,
    AgentStateMachine,
    StateTransition,
    TransitionRule,
)

from ..conftest import FakeClock

SEED_TABLE = {
    (AgentState.IDLE, StateTransition.START_PROCESSING): AgentState.PROCESSING,
    (AgentState.PROCESSING, StateTransition.AWAIT_INPUT): AgentState.WAITING,
    (AgentState.PROCESSING, StateTransition.CALL_TOOL): AgentState.TOOL_CALL,
    (AgentState.PROCESSING, StateTransition.COMPLETE): AgentState.COMPLETED,
    (AgentState.PROCESSING, StateTransition.FAIL): AgentState.ERROR,
    (AgentState.WAITING, StateTransition.RECEIVE_RESULT): AgentState.PROCESSING,
    (AgentState.TOOL_CALL, StateTransition.RECEIVE_RESULT): AgentState.PROCESSING,
    (AgentState.TOOL_CALL, StateTransition.FAIL): AgentState.ERROR,
    (AgentState.ERROR, StateTransition.RECOVER): AgentState.IDLE,
    (AgentState.ERROR, StateTransition.RESET): AgentState.IDLE,
    (AgentState.COMPLETED, StateTransition.RESET): AgentState.IDLE,
}


events = st.one_of(st.sampled_from(list(StateTransition)), st.sampled_from(["bogus", 42]))
steps = st.lists(st.tuples(events, st.integers(0, 5)), max_size=60)
limits = st.one_of(st.none(), st.integers(0, 8))


@settings(max_examples=200, deadline=None)
@given(steps=steps, limit=limits, use_async=st.booleans())
def test_default_machine_matches_reference_model_and_stays_consistent(
    steps: list[tuple[Any, int]], limit: int | None, use_async: bool
) -> None:
    clock = FakeClock(0.0)
    m = AgentStateMachine(clock=clock, history_limit=limit)
    model_state = AgentState.IDLE
    successes = 0
    entered = 0.0
    total_duration = 0.0
    durations: list[float] = []

    async def drive(event: Any) -> bool:
        return await m.transition(event, {"n": successes})

    for event, advance in steps:
        clock.now += advance
        before = m.current_state
        moved = asyncio.run(drive(event)) if use_async else m.fire(event, {"n": successes})
        expected = SEED_TABLE.get((model_state, event))
        assert moved == (expected is not None)
        if expected is None:
            assert m.current_state is before  # failed transitions change nothing
        else:
            successes += 1
            durations.append(clock.now - entered)
            total_duration += clock.now - entered
            entered = clock.now
            model_state = expected
        assert m.current_state is model_state
        assert m.current_state in m.states
        assert m.state_entry_time == entered
        assert m.total_transitions == successes
        expected_len = successes if limit is None else min(successes, limit)
        assert len(m.history) == expected_len

    stats = m.get_stats()
    assert stats["total_transitions"] == successes
    assert sum(stats["state_counts"].values()) == successes
    assert stats["total_duration"] == total_duration
    assert stats["current_state"] == model_state.value
    assert stats["rejected_transitions"] == len(steps) - successes
    if m.history:
        kept = m.history
        assert [h.duration for h in kept] == durations[-len(kept) :]
        # history is a chain: each entry's target is the next entry's state
        for a, b in itertools.pairwise(kept):
            assert a.target == b.state
            assert a.timestamp + a.duration == b.timestamp
        assert kept[-1].target == m.current_state


# ----------------------------------------------- random machines vs a dict model

STATE_POOL = ["s0", "s1", "s2", "s3", 4, 5]
EVENT_POOL = ["e0", "e1", "e2", 3]

rule_specs = st.lists(
    st.tuples(
        st.sampled_from(STATE_POOL),
        st.sampled_from(EVENT_POOL),
        st.sampled_from(STATE_POOL),
        st.one_of(st.none(), st.booleans()),  # None: no guard; else the guard's answer
    ),
    max_size=25,
)


def build(
    specs: list[tuple[Any, Any, Any, bool | None]], strict: bool
) -> tuple[AgentStateMachine[Any, Any], dict[tuple[Any, Any], list[tuple[Any, bool | None]]]]:
    model: dict[tuple[Any, Any], list[tuple[Any, bool | None]]] = {}
    rules = []
    for src, ev, dst, guard in specs:
        options = model.setdefault((src, ev), [])
        if any(g is None for _, g in options):
            continue  # would be shadowed: the machine rejects such a rule
        options.append((dst, guard))
        rules.append(
            TransitionRule(src, ev, dst, guard=None if guard is None else (lambda g=guard: g))
        )
    m = AgentStateMachine(states=STATE_POOL, rules=rules, initial="s0", strict=strict)
    return m, model


def model_step(
    model: dict[tuple[Any, Any], list[tuple[Any, bool | None]]], state: Any, event: Any
) -> tuple[Any, str | None]:
    options = model.get((state, event))
    if not options:
        return state, "no rule"
    for dst, guard in options:
        if guard is None or guard:
            return dst, None
    return state, "guard rejected"


@settings(max_examples=200, deadline=None)
@given(specs=rule_specs, seq=st.lists(st.sampled_from([*EVENT_POOL, "zz"]), max_size=40))
def test_random_machines_agree_with_first_passing_rule_model(
    specs: list[tuple[Any, Any, Any, bool | None]], seq: list[Any]
) -> None:
    lenient, model = build(specs, strict=False)
    strict, _ = build(specs, strict=True)
    state: Any = "s0"
    for event in seq:
        nxt, refusal = model_step(model, state, event)
        assert lenient.can_transition(event) == (refusal is None)
        assert lenient.fire(event) == (refusal is None)
        if refusal is None:
            assert strict.fire(event) is True
        else:
            try:
                strict.fire(event)
            except InvalidTransition as exc:
                assert exc.reason == refusal
                assert exc.state == state and exc.event == event
            else:
                raise AssertionError("strict machine accepted a refused event")
        state = nxt
        assert lenient.current_state == state
        assert strict.current_state == state
    assert lenient.total_transitions == strict.total_transitions
    assert [h.state for h in lenient.history] == [h.state for h in strict.history]
