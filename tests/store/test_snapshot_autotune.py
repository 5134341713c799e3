"""``snapshot_every="auto"`` applies Young's optimal interval from the snapshot cost,
replay cost per event and cold loads per append it measures (issue 16). No timing
here: the measurements are fed in, or the store's clock reads are replaced."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeeper import StateStore
from statekeeper.observability.analysis.checkpoint import optimal_snapshot_interval
from statekeeper.store import autotune, reads, snapshots
from statekeeper.store.autotune import (
    MAX_EVENTS,
    MIN_EVENTS,
    AutoInterval,
    expected_cost,
    optimal_events,
)

seconds = st.floats(min_value=1e-7, max_value=1.0, allow_nan=False, allow_infinity=False)
gaps = st.floats(min_value=1.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(seconds, seconds, gaps)
def test_young_optimum_minimises_the_expected_cost(c: float, r: float, e: float) -> None:
    k = optimal_events(c, r, e)
    best = expected_cost(k, c, r, e)
    # no whole interval around the continuous optimum costs less
    k_real = math.sqrt(2 * c * e / r)
    for n in {1, 2, *range(max(1, int(k_real) - 3), int(k_real) + 4), 2 * k + 1}:
        assert best <= expected_cost(n, c, r, e) * (1 + 1e-12)
    # ... and the analysis function gives the same interval
    assert optimal_snapshot_interval(c, r, e) == k


@given(seconds, seconds, gaps)
def test_daly_is_within_a_few_percent_of_the_optimum_while_snapshots_are_cheap(
    c: float, r: float, e: float
) -> None:
    young = optimal_events(c, r, e)
    if c > 0.01 * r * e or young < 20:  # Daly's correction matters: not this claim
        return
    daly = optimal_events(c, r, e, "daly")
    assert expected_cost(daly, c, r, e) <= 1.05 * expected_cost(young, c, r, e)


def test_the_interval_follows_the_measurements() -> None:
    tuner = AutoInterval()
    assert tuner.events is None  # nothing measured: the store keeps its byte rule
    tuner.snapshotted(0.002)  # C = 2 ms
    assert tuner.events is None  # no replay measured yet
    tuner.appends = 50
    tuner.replayed(0.0004, 20)  # r = 20 us per event: the cold load at a start
    assert tuner.events is None  # how often cold loads come is not known yet
    tuner.appends += 100
    tuner.replayed(0.0004, 20)  # the next one, 100 appends later
    assert tuner.events == optimal_events(0.002, 20e-6, 100)  # sqrt(2*2e-3*100/2e-5) = 141
    assert tuner.events == 141
    # cold loads every 10 appends from now on: the interval shrinks toward sqrt(2000)
    for _ in range(40):
        tuner.appends += 10
        tuner.replayed(0.0002, 10)
    assert tuner.gap == pytest.approx(10, rel=1e-3)
    assert tuner.events == optimal_events(0.002, 20e-6, tuner.events_between()) == 45
    # snapshots got 4x dearer: the interval doubles
    for _ in range(40):
        tuner.snapshotted(0.008)
    assert tuner.events == 89
    # no cold load for 100_000 appends: bounded by MAX_EVENTS
    tuner.appends += 100_000
    tuner.snapshotted(0.008)
    assert tuner.events == MAX_EVENTS
    # replay got very dear: bounded by MIN_EVENTS
    for _ in range(60):
        tuner.appends += 1
        tuner.replayed(10.0, 1)
    assert tuner.events == MIN_EVENTS


class StepClock:
    """``thread_time`` for the store's modules: advances by what the test says."""

    def __init__(self) -> None:
        self.now = 0.0
        self.step = 0.0

    def __call__(self) -> float:
        self.now += self.step
        self.step = 0.0
        return self.now


class PairClock:
    """``thread_time`` of which every second reading is ``cost`` after the first."""

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.cost * (self.calls // 2)


@pytest.fixture
def work_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[StepClock]:
    clock = StepClock()
    monkeypatch.setattr(snapshots, "thread_time", clock)
    monkeypatch.setattr(reads, "thread_time", clock)
    yield clock


async def test_an_auto_store_measures_itself_and_snapshots_at_young_interval(
    tmp_path: Path, work_clock: StepClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    # every snapshot encode "costs" 3 ms, every replayed event 30 us (deterministic).
    # The encode's cost comes from its own clock (snapshots is compiled: its methods
    # call each other directly, so a patched SnapshotPolicy.encode would not be seen):
    # the snapshot policy reads the clock twice per encode, before and after.
    monkeypatch.setattr(snapshots, "thread_time", PairClock(0.003))
    apply_events = reads.ReadPath.apply_events

    def dear_replay(self: reads.ReadPath, record: object, events: list[object]) -> None:
        work_clock.step += 30e-6 * len(events)
        apply_events(self, record, events)  # type: ignore[arg-type]

    monkeypatch.setattr(reads.ReadPath, "apply_events", dear_replay)
    async with StateStore(url, snapshot_every="auto", witness=False, cache_size=0) as store:
        tuner = store._snapshots.tuner
        assert tuner is not None and store.snapshot_events == snapshots.AUTO_MAX_EVENTS
        # cache off: every save of an existing agent is a cold load first (λ = 1)
        for n in range(300):
            await store.save("a", {"n": n})
        assert tuner.cold_loads >= 299 and tuner.gap == pytest.approx(1.0)
        assert tuner.snapshot_cost == pytest.approx(0.003)
        assert tuner.replay_cost == pytest.approx(30e-6)
        k = optimal_events(0.003, 30e-6, 1.0)  # sqrt(2*3e-3/3e-5) = 14
        assert k == 14 and store.snapshot_events == k
        seqs = sorted([s.seq async for s in _snapshots(store, "a")])
        gaps = {b - a for a, b in zip(seqs[-10:], seqs[-9:], strict=False)}
        assert gaps == {k}


async def test_a_new_process_continues_with_the_learned_interval(
    tmp_path: Path, work_clock: StepClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What "auto" measured outlives the store object: a second store on the same file
    (a restarted process) applies the learned interval from its first load on, where
    it would otherwise start over with the byte rule until it has measured a snapshot,
    two cold loads and the gap between them again."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    encode = snapshots.SnapshotPolicy.encode
    apply_events = reads.ReadPath.apply_events

    def dear_encode(self: snapshots.SnapshotPolicy, record: object) -> object:
        work_clock.step = 0.003
        return encode(self, record)  # type: ignore[arg-type]

    def dear_replay(self: reads.ReadPath, record: object, events: list[object]) -> None:
        work_clock.step += 30e-6 * len(events)
        apply_events(self, record, events)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshots.SnapshotPolicy, "encode", dear_encode)
    monkeypatch.setattr(reads.ReadPath, "apply_events", dear_replay)
    async with StateStore(url, snapshot_every="auto", witness=False, cache_size=0) as store:
        for n in range(100):
            await store.save("a", {"n": n})
        assert store.snapshot_events == 14
        last = max([s.seq async for s in _snapshots(store, "a")])
    async with StateStore(url, snapshot_every="auto", witness=False, cache_size=0) as again:
        assert again.snapshot_events == snapshots.AUTO_MAX_EVENTS  # nothing read yet
        await again.load("a")
        assert again.snapshot_events == 14
        tuner = again._snapshots.tuner
        assert tuner is not None and tuner.gap == pytest.approx(1.0)
        assert tuner.snapshot_cost == pytest.approx(0.003)
        for n in range(60):
            await again.save("a", {"n": 1000 + n})
        seqs = sorted([s.seq async for s in _snapshots(again, "a") if s.seq > last])
        assert seqs[0] == last + 14
        assert {b - a for a, b in itertools.pairwise(seqs)} == {14}, seqs


def test_carried_measurements_fill_only_what_is_not_measured() -> None:
    tuner = AutoInterval()
    assert tuner.carried() is None
    tuner.resume([0.003, "x", None])  # junk is ignored
    assert (tuner.snapshot_cost, tuner.replay_cost, tuner.gap) == (0.003, None, None)
    assert tuner.events is None
    tuner.resume([1.0, 30e-6, 1.0])  # C was measured here: kept
    assert (tuner.snapshot_cost, tuner.replay_cost, tuner.gap) == (0.003, 30e-6, 1.0)
    assert tuner.events == optimal_events(0.003, 30e-6, 1.0)
    assert tuner.carried() == [0.003, 30e-6, 1.0]
    for junk in (None, [], [1, 2], {"C": 1}, [True, -1.0, float("inf")]):
        fresh = AutoInterval()
        fresh.resume(junk)
        assert fresh.carried() is None


async def _snapshots(store: StateStore, agent_id: str):  # type: ignore[no-untyped-def]
    below = None
    while True:
        raw = await store.backend.latest_snapshot(agent_id, below)
        if raw is None:
            return
        yield raw
        below = raw.seq - 1
        if below < 1:
            return


def test_bounds_are_sane() -> None:
    assert 1 <= MIN_EVENTS < snapshots.AUTO_MAX_EVENTS < MAX_EVENTS
    assert autotune.ALPHA > 0
