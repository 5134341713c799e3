"""The seed's mathematics: known answers on small fixed histories, and properties."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.errors import InvalidArgument
from statekeeper.observability.analysis import (
    daly_interval,
    daly_wall_time,
    entropy,
    estimate,
    normalized_entropy,
    optimal_snapshot_interval,
    young_interval,
    young_overhead,
)
from statekeeper.observability.analysis.history import (
    entropy_windows,
    moves,
    namespace,
    state_distribution,
    transition_matrices,
)
from statekeeper.observability.analysis.markov import wilson_interval

from ..conftest import FakeClock

# -- known answers -----------------------------------------------------------------


def test_matrix_of_a_hand_counted_history() -> None:
    # a→b ×3, a→c ×1, b→a ×2, c→a ×1, c→c ×1
    pairs = [("a", "b")] * 3 + [("a", "c"), ("b", "a"), ("b", "a"), ("c", "a"), ("c", "c")]
    m = estimate(pairs)
    assert m.states == ("a", "b", "c")
    assert m.counts == ((0, 3, 1), (2, 0, 0), (1, 0, 1))
    assert m.matrix == ((0.0, 0.75, 0.25), (1.0, 0.0, 0.0), (0.5, 0.0, 0.5))
    assert m.transitions == 8 and m.exits("a") == 4
    # stationary: π = πP by hand: πa = πb + πc/2, πb = 3πa/4, πc = πa/4 + πc/2 → πc = πa/2
    # πa (1 + 3/4 + 1/2) = 1 → πa = 4/9, πb = 3/9, πc = 2/9
    assert m.irreducible
    assert m.stationary == pytest.approx((4 / 9, 3 / 9, 2 / 9), abs=1e-12)
    assert m.row_entropy("a") == pytest.approx(-(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)))
    assert m.row_entropy("b") == 0.0 and m.row_entropy("c") == 1.0
    expected_rate = 4 / 9 * m.row_entropy("a") + 2 / 9 * 1.0
    assert m.entropy_rate == pytest.approx(expected_rate)
    # Wilson 95 % interval of 3/4, by the formula: centre (p + z²/2n)/(1 + z²/n)
    lo, hi = m.intervals[0][1]
    assert (lo, hi) == pytest.approx((0.3006, 0.9544), abs=1e-4)


def test_wilson_interval_known_values() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)


def test_a_state_never_left_is_absorbing_and_the_chain_reducible() -> None:
    m = estimate([("idle", "busy"), ("busy", "done"), ("busy", "idle")], states=["spare"])
    assert m.absorbing == ("done", "spare")
    assert m.probability("done", "done") == 1.0 and m.intervals[m.index("done")][
        m.index("done")
    ] == (1.0, 1.0)
    assert not m.irreducible
    # all the mass ends in the absorbing states
    # (uniform start: 'spare' keeps its quarter, the other three quarters end in 'done')
    assert m.stationary == pytest.approx((0.0, 0.75, 0.0, 0.25), abs=1e-12)
    with pytest.raises(InvalidArgument, match="'nope' is not a state"):
        m.probability("nope", "idle")


def test_a_slow_transient_loop_leaves_no_mass_in_the_stationary_distribution() -> None:
    # one agent that went round a tool-call loop 999 times, then completed: in the
    # long run every agent is completed (it used to report completed 0.72, processing
    # 0.14 and tool_call 0.14, which is not stationary: πP ≠ π)
    loop = [("processing", "tool_call"), ("tool_call", "processing")] * 999
    m = estimate([("idle", "processing"), *loop, ("processing", "completed")])
    assert not m.irreducible
    assert m.stationary == pytest.approx((1.0, 0.0, 0.0, 0.0), abs=1e-9)
    assert m.stationary_entropy == pytest.approx(0.0, abs=1e-9)


def test_mass_splits_between_closed_classes_by_absorption() -> None:
    # from 'start' half goes to the absorbing 'fail', half to the cycle ok1 <-> ok2
    pairs = [("start", "fail"), ("start", "ok1"), ("ok1", "ok2"), ("ok2", "ok1")]
    m = estimate(pairs)
    assert m.states == ("fail", "ok1", "ok2", "start")
    # uniform start: fail 1/4 + 1/8 from start; the cycle 1/2 + 1/8, split evenly
    assert m.stationary == pytest.approx((3 / 8, 5 / 16, 5 / 16, 0.0), abs=1e-12)


def test_a_periodic_chain_has_the_uniform_stationary_distribution() -> None:
    m = estimate([("a", "b"), ("b", "a")] * 3)
    assert m.stationary == pytest.approx((0.5, 0.5))
    assert m.entropy_rate == 0.0 and m.stationary_entropy == 1.0


def test_entropy_known_values_and_bad_input() -> None:
    assert entropy([0.25] * 4) == 2.0
    assert entropy({"a": 1.0}) == 0.0
    assert normalized_entropy([0.5, 0.5, 0.0, 0.0]) == 0.5
    assert normalized_entropy([1.0]) == 0.0
    with pytest.raises(InvalidArgument, match="sum to 1"):
        entropy([0.5, 0.2])
    with pytest.raises(InvalidArgument, match=r"in \[0, 1\]"):
        entropy([1.5, -0.5])


def test_young_and_daly_anchor_values() -> None:
    minute, hour = 60.0, 3600.0
    assert young_interval(5 * minute, 24 * hour) / minute == pytest.approx(120.0)
    assert daly_interval(5 * minute, 24 * hour) / minute == pytest.approx(116.7, abs=0.05)
    assert daly_interval(5 * minute, 6 * hour) / minute == pytest.approx(56.7, abs=0.05)
    assert daly_interval(5 * minute, 15 * minute) / minute == pytest.approx(9.1, abs=0.05)
    assert daly_interval(10, 4) == 4.0  # δ >= 2M: checkpoint every M
    with pytest.raises(InvalidArgument, match="cost must be a positive number"):
        young_interval(0, 10)
    with pytest.raises(InvalidArgument, match="mtbf must be finite"):
        daly_interval(1, math.inf)


def test_optimal_snapshot_interval_in_events() -> None:
    # C = 2 ms, r = 10 µs/event, E = 10 000 events per cold load: k = sqrt(2CE/r) = 2000
    assert optimal_snapshot_interval(0.002, 0.00001, 10_000) == 2000
    assert optimal_snapshot_interval(0.002, 0.00001, 10_000, formula="daly") == pytest.approx(
        round(daly_interval(0.002, 0.1) / 0.00001)
    )
    assert optimal_snapshot_interval(1e-9, 1.0, 1.0) == 1  # never below one event
    with pytest.raises(InvalidArgument, match="formula"):
        optimal_snapshot_interval(1, 1, 1, formula="nope")  # type: ignore[arg-type]


# -- properties ----------------------------------------------------------------------

states = st.sampled_from(["a", "b", "c", "d", "e"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(states, states), min_size=1, max_size=60))
def test_rows_sum_to_one_and_entropy_is_bounded(pairs: list[tuple[str, str]]) -> None:
    m = estimate(pairs)
    k = len(m.states)
    for i, row in enumerate(m.matrix):
        assert sum(row) == pytest.approx(1.0)
        for j, p in enumerate(row):
            lo, hi = m.intervals[i][j]
            assert 0.0 <= lo <= p <= hi <= 1.0
        assert 0.0 <= m.row_entropy(m.states[i]) <= math.log2(k) + 1e-9
    assert sum(m.stationary) == pytest.approx(1.0)
    assert all(p >= 0 for p in m.stationary)
    for j in range(k):  # πP = π, reducible chains too
        assert sum(m.stationary[i] * m.matrix[i][j] for i in range(k)) == pytest.approx(
            m.stationary[j], abs=1e-9
        )
    assert 0.0 <= m.entropy_rate <= math.log2(k) + 1e-9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12).filter(lambda xs: sum(xs) > 0))
def test_entropy_lies_between_zero_and_log_k(weights: list[float]) -> None:
    total = sum(weights)
    probs = [w / total for w in weights]
    if abs(sum(probs) - 1.0) > 1e-9:
        return
    h = entropy(probs)
    assert -1e-12 <= h <= math.log2(len(probs)) + 1e-9
    assert 0.0 <= normalized_entropy(probs) <= 1.0 + 1e-9


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-3, 1e4), st.floats(1.0, 1e7))
def test_young_interval_minimises_its_overhead(cost: float, mtbf: float) -> None:
    best = young_interval(cost, mtbf)
    at_best = young_overhead(best, cost, mtbf)
    for factor in (0.5, 0.9, 0.99, 1.01, 1.1, 2.0):
        assert at_best <= young_overhead(best * factor, cost, mtbf) + 1e-12


@settings(max_examples=150, deadline=None)
@given(st.floats(1.0, 600.0), st.floats(3600.0, 1e6))
def test_daly_interval_is_near_the_minimum_of_his_wall_time(cost: float, mtbf: float) -> None:
    """For δ well below M, Daly's τ is within 0.1 % of the exact optimum of T_w(τ)."""
    tau = daly_interval(cost, mtbf)
    wall = daly_wall_time(tau, cost, mtbf, work=1e6)
    lo, hi = tau / 4, tau * 4  # golden-section search of the exact minimum
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if daly_wall_time(a, cost, mtbf, work=1e6) < daly_wall_time(b, cost, mtbf, work=1e6):
            hi = b
        else:
            lo = a
    exact = daly_wall_time((lo + hi) / 2, cost, mtbf, work=1e6)
    assert wall <= exact * 1.001
    assert wall >= exact * (1 - 1e-9)


@settings(max_examples=150, deadline=None)
@given(st.floats(1e-5, 1e-1), st.floats(1e-6, 1e-3), st.floats(10.0, 1e6))
def test_snapshot_interval_minimises_cost_per_event(c: float, r: float, e: float) -> None:
    k = optimal_snapshot_interval(c, r, e)

    def cost(n: int) -> float:
        return c / n + r * n / (2 * e)

    assert cost(k) <= min(cost(max(1, k - 1)), cost(k + 1)) + 1e-15


# -- from a store's history ---------------------------------------------------------


async def _history_store() -> StateStore:
    """Two namespaces, each agent's moves at known times (clock in steps of 10 s)."""
    store = StateStore("memory://", witness=False, clock=FakeClock(0.0, step=10.0))
    paths = {
        "team:a1": ["idle", "processing", "tool_call", "processing", "completed"],
        "team:a2": ["idle", "processing", "completed"],
        "solo/b1": ["idle", "processing", "error", "idle"],
    }
    for agent_id, path in paths.items():
        await store.create(agent_id, {}, fsm_state=path[0])
        for state in path[1:]:
            await store.append(agent_id, "transition", {"to": state}, fsm_state=state)
        await store.save(agent_id, {"note": "data only, no move"})
    return store


async def test_matrix_from_recorded_history() -> None:
    store = await _history_store()
    try:
        (m,) = (await transition_matrices(store)).values()
        assert m.count("idle", "processing") == 3
        assert m.count("processing", "completed") == 2
        assert m.count("processing", "tool_call") == 1
        assert m.count("processing", "error") == 1
        assert m.exits("processing") == 4 and m.transitions == 9
        assert m.probability("processing", "completed") == 0.5
        grouped = await transition_matrices(store, group_by="namespace")
        assert sorted(grouped) == ["solo", "team"]
        assert grouped["solo"].transitions == 3 and grouped["team"].transitions == 6
        by_first = await transition_matrices(store, group_by=lambda a: a[-1])
        assert sorted(by_first) == ["1", "2"]
        found = [mv async for mv in moves(store, agents=["team:a2"])]
        assert [(mv.source, mv.target, mv.dwell) for mv in found] == [
            ("idle", "processing", 10.0),
            ("processing", "completed", 10.0),
        ]
        # a time window: only moves at or after t=60 and before t=100
        windowed = [mv async for mv in moves(store, since=60.0, until=100.0)]
        assert all(60.0 <= mv.at < 100.0 for mv in windowed) and windowed
        assert await state_distribution(store) == {"completed": 2, "idle": 1}
        with pytest.raises(InvalidArgument, match="group_by"):
            await transition_matrices(store, group_by="machine")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="until is before since"):
            [mv async for mv in moves(store, since=5.0, until=1.0)]
    finally:
        await store.close()


def test_namespace_of_an_agent_id() -> None:
    assert namespace("team:a1") == "team"
    assert namespace("solo/b1") == "solo"
    assert namespace("a:b/c") == "a" and namespace("x/y:z") == "x"
    assert namespace("plain") == ""


async def test_entropy_shift_when_behaviour_changes() -> None:
    """Agents that always went idle→busy, then start spreading over four states: the
    entropy of where they move jumps from 0 to 2 bits between windows."""
    t = [0.0]
    store = StateStore("memory://", witness=False, clock=lambda: t[0])
    try:
        for i in range(8):
            t[0] = 10.0 + i
            await store.create(f"a{i}", {}, fsm_state="idle")
            await store.append(f"a{i}", "transition", fsm_state="busy")
        for i, state in enumerate(["w", "x", "y", "z"] * 2):
            t[0] = 110.0 + i
            await store.append(f"a{i}", "transition", fsm_state=state)
        windows = await entropy_windows(store, 100.0)
        assert [(w.moves, w.entropy) for w in windows] == [(8, 0.0), (8, 2.0)]
        assert windows[0].start == 10.0
        with pytest.raises(InvalidArgument, match="window"):
            await entropy_windows(store, 0)
    finally:
        await store.close()


def test_estimate_refuses_what_is_not_a_move() -> None:
    with pytest.raises(InvalidArgument, match="a move is a"):
        estimate([("a", "b", "c")])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="states must be strings"):
        estimate([("a", 1)])  # type: ignore[list-item]
    empty: Any = estimate([])
    assert empty.states == () and empty.stationary == ()


def test_the_wilson_interval_of_a_certain_outcome_reaches_one() -> None:
    """Six moves out of six: the upper bound is exactly 1 (not 1 - 1 ulp) and holds p."""
    from statekeeper.observability.analysis.markov import wilson_interval

    for n in range(1, 50):
        lo, hi = wilson_interval(n, n)
        assert lo <= 1.0 == hi
        lo, hi = wilson_interval(0, n)
        assert lo == 0.0 <= hi


async def test_entropy_windows_are_bounded() -> None:
    """Before: ``--window 1`` over a year of moves built ~31 million windows (objects),
    with no cap. More than ``max_windows`` is refused now, typed, naming the count,
    the cap and the smallest window that fits (which then works)."""
    t = [0.0]
    store = StateStore("memory://", witness=False, clock=lambda: t[0])
    try:
        await store.create("a", {}, fsm_state="idle")
        await store.append("a", "transition", fsm_state="busy")  # a move at 0
        t[0] = 20_000.0
        await store.append("a", "transition", fsm_state="idle")  # and one at 20000
        with pytest.raises(InvalidArgument, match="20001 windows") as caught:
            await entropy_windows(store, 1.0)
        said = str(caught.value)
        assert "at most 10000" in said and "at least 3 s" in said, said
        with pytest.raises(InvalidArgument, match="at most 100:"):
            await entropy_windows(store, 1.0, max_windows=100)
        assert len(await entropy_windows(store, 3.0)) <= 10_000
        assert len(await entropy_windows(store, 200.0)) == 101
    finally:
        await store.close()
