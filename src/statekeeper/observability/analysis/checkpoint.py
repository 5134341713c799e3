"""The optimal checkpoint interval: Young (1974) and Daly (2006).

With checkpoint cost ``C`` (seconds to write one) and mean time between failures
``M``, a job that checkpoints every ``T`` seconds of work spends ``C/T`` of its time
checkpointing and loses ``T/2`` of work per failure on average, ``T/(2M)`` of its
time. The sum ``C/T + T/(2M)`` is smallest at Young's interval

    T_young = sqrt(2·C·M)

Daly's higher-order estimate (also counting failures during checkpoints and restarts):

    τ = sqrt(2δM)·[1 + (1/3)·sqrt(δ/(2M)) + (1/9)·(δ/(2M))] − δ     if δ < 2M
    τ = M                                                           otherwise

which approximately minimises his expected wall-clock time for ``T_s`` seconds of work
with restart cost ``R`` (:func:`daly_wall_time`):

    T_w(τ) = M·e^(R/M)·(e^((τ+δ)/M) − 1)·T_s/τ

**For a statekeeper store** the "work lost" at a failure is the replay a cold load does
from the last snapshot. With snapshot cost ``C`` seconds, replay cost ``r`` seconds per
event and ``E`` events appended between cold loads (the failure rate, in events), a
snapshot every ``k`` events costs ``C/k + r·k/(2E)`` per event, smallest at
``k = sqrt(2·C·E/r)`` — Young's formula with time measured in replay seconds
(``M = r·E``, ``T = r·k``); :func:`optimal_snapshot_interval` applies either formula so.

>>> round(young_interval(300, 24 * 3600) / 60, 1)   # C = 5 min, M = 24 h
120.0
>>> round(daly_interval(300, 24 * 3600) / 60, 1)
116.7
>>> round(daly_interval(300, 6 * 3600) / 60, 1), round(daly_interval(300, 15 * 60) / 60, 1)
(56.7, 9.1)
"""

from __future__ import annotations

import math
from typing import Literal

from ...errors import InvalidArgument
from ...store.autotune import optimal_events

__all__ = [
    "daly_interval",
    "daly_wall_time",
    "optimal_snapshot_interval",
    "young_interval",
    "young_overhead",
]


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidArgument(name, f"{name} must be a positive number, not {value!r}")
    if not math.isfinite(value):
        raise InvalidArgument(name, f"{name} must be finite, not {value!r}")
    return float(value)


def young_interval(cost: float, mtbf: float) -> float:
    """Young's optimal interval ``sqrt(2·C·M)`` between checkpoints."""
    return math.sqrt(2 * _positive("cost", cost) * _positive("mtbf", mtbf))


def young_overhead(interval: float, cost: float, mtbf: float) -> float:
    """The fraction of time lost, ``C/T + T/(2M)``, that Young's interval minimises."""
    interval = _positive("interval", interval)
    return _positive("cost", cost) / interval + interval / (2 * _positive("mtbf", mtbf))


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly's higher-order optimal interval (see the module documentation)."""
    delta, m = _positive("cost", cost), _positive("mtbf", mtbf)
    if delta >= 2 * m:
        return m
    x = delta / (2 * m)
    return math.sqrt(2 * delta * m) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def daly_wall_time(
    interval: float, cost: float, mtbf: float, work: float = 1.0, restart: float = 0.0
) -> float:
    """Daly's expected wall-clock time to finish ``work`` seconds of computation that
    checkpoints every ``interval`` seconds (cost ``cost``), restart cost ``restart``,
    exponential failures with mean ``mtbf``."""
    tau, delta, m = (
        _positive("interval", interval),
        _positive("cost", cost),
        _positive("mtbf", mtbf),
    )
    if restart < 0:
        raise InvalidArgument("restart", f"restart must be >= 0, not {restart!r}")
    return m * math.exp(restart / m) * math.expm1((tau + delta) / m) * _positive("work", work) / tau


def optimal_snapshot_interval(
    snapshot_cost: float,
    replay_cost: float,
    events_between_failures: float,
    *,
    formula: Literal["young", "daly"] = "young",
) -> int:
    """Events between snapshots minimising ``C/k + r·k/(2E)`` per event.

    Args:
        snapshot_cost: seconds one snapshot adds to the append that carries it (C).
        replay_cost: seconds a load spends per event replayed after the snapshot (r).
        events_between_failures: events appended per cold load — a restart, a cache
            miss or eviction, a load by another process (E).
        formula: ``"young"`` or ``"daly"`` (Daly's in replay-seconds units).

    >>> optimal_snapshot_interval(0.002, 0.00001, 10_000)   # sqrt(2·0.002·1e4/1e-5)
    2000
    """
    c = _positive("snapshot_cost", snapshot_cost)
    r = _positive("replay_cost", replay_cost)
    e = _positive("events_between_failures", events_between_failures)
    if formula in ("young", "daly"):  # what snapshot_every="auto" applies
        return optimal_events(c, r, e, formula)
    raise InvalidArgument("formula", f"formula must be 'young' or 'daly', not {formula!r}")
