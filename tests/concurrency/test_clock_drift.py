"""A hybrid logical clock bounds how far ahead a remote stamp may be: one stamp from a
replica with a broken clock must not lift every later local stamp past real time."""

from __future__ import annotations

import pickle

import pytest

from statekeeper.concurrency import HybridClock, LastWriteWins, Merger, Timestamp, Version
from statekeeper.errors import ClockDriftExceeded, InvalidArgument

HOUR_MS = 3_600_000


def test_a_stamp_far_ahead_is_refused_and_the_clock_does_not_move() -> None:
    now = [1_000.0]
    clock = HybridClock("laptop", wall=lambda: now[0])
    before = clock.now()
    bad = Timestamp(1_000_000 + HOUR_MS, 0, "broken-replica")
    with pytest.raises(ClockDriftExceeded) as caught:
        clock.observe(bad)
    err = caught.value
    assert isinstance(err, InvalidArgument) and err.argument == "remote"
    assert err.remote == "broken-replica" and err.ahead_ms == HOUR_MS
    assert err.max_drift_ms == 60_000
    assert "'broken-replica'" in str(err) and "3600.000 s ahead" in str(err)
    assert clock.last == before  # not moved
    # a later real edit is stamped from real time, and wins against an older edit
    now[0] = 1_001.0
    later = clock.now()
    assert later.wall == 1_001_000
    base = Version({"title": "t"})
    older = Version({"title": "older"}, stamp=Timestamp(1_000_500, 0, "server"))
    newer = Version({"title": "newer"}, stamp=later)
    assert Merger(default=LastWriteWins()).merge(newer, older, base).data == {"title": "newer"}


def test_stamps_within_the_drift_are_observed_and_the_bound_is_configurable() -> None:
    clock = HybridClock("n", wall=lambda: 100.0)
    inside = Timestamp(100_000 + 60_000, 5, "m")  # exactly the default drift: taken
    assert clock.observe(inside) > inside
    strict = HybridClock("n", wall=lambda: 100.0, max_drift=0.5)
    with pytest.raises(ClockDriftExceeded) as caught:
        strict.observe(Timestamp(100_501, 0, "m"))
    assert caught.value.max_drift_ms == 500 and caught.value.ahead_ms == 501
    unbounded = HybridClock("n", wall=lambda: 100.0, max_drift=None)
    far = Timestamp(100_000 + 10 * HOUR_MS, 0, "m")
    assert unbounded.observe(far) > far
    # stamps behind this clock are never refused
    assert HybridClock("n", wall=lambda: 100.0).observe(Timestamp(1, 0, "m")).wall == 100_000


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "60", True])
def test_a_max_drift_that_cannot_be_used_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidArgument) as caught:
        HybridClock("n", max_drift=bad)  # type: ignore[arg-type]
    assert caught.value.argument == "max_drift"


def test_the_drift_error_crosses_a_process_with_its_fields() -> None:
    err = ClockDriftExceeded("b", 5_000, 1_000)
    back = pickle.loads(pickle.dumps(err))
    assert (back.remote, back.ahead_ms, back.max_drift_ms, str(back)) == (
        "b",
        5_000,
        1_000,
        str(err),
    )
