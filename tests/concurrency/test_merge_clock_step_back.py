"""An edit is never ordered before the version it edits (trialtime): a node whose
wall clock stepped back (or a new process whose HybridClock never observed the stored
stamp) stamped its next edit below the version it edited, and last-write-wins then
gave the field to a concurrent edit that its own earlier edit had beaten."""

from __future__ import annotations

from statekeeper.concurrency import HybridClock
from statekeeper.concurrency.merge import LastWriteWins, Merger, Version


def _clock(node: str, wall: float) -> HybridClock:
    return HybridClock(node, wall=lambda: wall)


def test_an_edit_after_a_clock_step_back_stays_after_its_own_version() -> None:
    base = Version({"x": 0}).edited({"x": 0}, "A", stamp=_clock("A", 1000.0).now())
    ours = base.edited({"x": "a1"}, "A", stamp=_clock("A", 2000.0).now())
    theirs = base.edited({"x": "b"}, "B", stamp=_clock("B", 1500.0).now())  # concurrent
    merger = Merger(default=LastWriteWins())
    assert merger.merge(ours, theirs, base).data == {"x": "a1"}
    # A's process restarts with its wall clock a quarter of an hour behind, edits again
    again = ours.edited({"x": "a2"}, "A", stamp=_clock("A", 1100.0).now())
    assert ours.stamp is not None and again.stamp is not None
    assert again.stamp > ours.stamp and again.stamp.node == "A"
    assert merger.merge(again, theirs, base).data == {"x": "a2"}  # was {"x": "b"}
    # a clock that is not behind is taken as it is
    later = again.edited({"x": "a3"}, "A", stamp=(now := _clock("A", 3000.0).now()))
    assert later.stamp == now
