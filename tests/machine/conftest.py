"""Shared fixtures for the state machine tests."""

from __future__ import annotations

import pytest


class FakeClock:
    """A manual clock: returns ``now``; ``advance(dt)`` moves it forward."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
