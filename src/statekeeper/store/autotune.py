"""``snapshot_every="auto"``: the snapshot interval of Young (1974) and Daly (2006),
from the store's own measurements.

A snapshot every ``k`` events costs, per appended event, ``C/k`` for writing it and
``λ·r·k/2`` for the replay a cold load (a recovery) does on average after it, with
``C`` the seconds one snapshot costs, ``r`` the seconds a load spends per event it
replays and ``λ = 1/E`` the cold loads per append. The sum is smallest at Young's

    k* = sqrt(2·C·E / r)

and Daly's higher-order form, in replay-seconds (``δ = C``, ``M = r·E``), is
``τ = sqrt(2δM)·[1 + sqrt(δ/2M)/3 + (δ/2M)/9] − δ`` for ``δ < 2M`` (else ``M``),
``k = τ/r``. :class:`AutoInterval` measures the three quantities where they happen,
never per save: ``C`` when a snapshot is encoded (two clock reads, only then), ``r`` when
a cold load replays events (two clock reads per cold load) and ``E`` from counts (the
appends between cold loads; no clock). ``C`` and ``r`` are smoothed (EWMA), ``E`` is
the smoothed gap between cold loads or, when longer, the gap since the last one; ``k``
is recomputed when a measurement arrives and bounded by :data:`MIN_EVENTS` and
:data:`MAX_EVENTS`. Until ``C``, ``r`` and one whole gap between two cold loads have
been measured (a single cold load — the one after a start — says nothing of how often
they come) the policy has no answer (None) and the store keeps to its byte rule, which
bounds a load at about twice a snapshot decode (see :mod:`.snapshots`).

The measurements outlive the process: every snapshot an ``"auto"`` store writes
carries them (``[C, r, E]``, :meth:`AutoInterval.carried`, in the snapshot's body,
before its data), and the first snapshot a new process decodes — its first cold load
of any agent, which every first save or load of an agent is — hands them to its
:class:`AutoInterval` (:meth:`AutoInterval.resume`) for the quantities it has not
measured itself yet. So a restarted process applies the interval learned before from
its first load on, instead of the byte rule, and keeps adapting from there. The
snapshot is the place because it costs no write of its own (it is written anyway, in
the same append as its event), is read by every cold load, and every engine stores it
the same way (a store of any engine, or a version that does not know the key, ignores
it). What it cannot carry over is the gap since the last cold load: the first cold
loads of the new process start counting again.

``C`` is the CPU time of encoding the snapshot, not of writing it. Measured
(``docs/benchmarks.md``, "snapshot_every="auto": the write's share of C"): on SQLite
with a 40 KB state a snapshot costs the process about twice its encode time (~0.94 ms
against ~0.47 ms), the rest being the engine storing its bytes. Counting that share
would need the append's cost with and without the snapshot — a clock pair around
every append, the per-save cost the write path avoids (``docs/benchmarks.md``,
"Observability overhead") — while leaving it out costs little: ``C`` low by a factor
``f`` makes ``k`` low by ``sqrt(f)``, and the expected cost at ``k*/sqrt(f)`` is
``(sqrt(f) + 1/sqrt(f))/2`` of the optimum — 1.06x for ``f = 2``. ``r`` is CPU time
in the same way (the replay's decode and fold, not the read's I/O wait).
"""

from __future__ import annotations

import math
from typing import Literal

__all__ = ["MAX_EVENTS", "MIN_EVENTS", "AutoInterval", "expected_cost", "optimal_events"]

#: the fewest / most events between two snapshots ``"auto"`` chooses
MIN_EVENTS = 2
MAX_EVENTS = 1000
#: weight of a new measurement in the moving averages
ALPHA = 0.25


def expected_cost(k: float, cost: float, replay: float, events_between: float) -> float:
    """Seconds per appended event of snapshotting every ``k`` events:
    ``C/k + r·k/(2E)``."""
    return cost / k + replay * k / (2 * events_between)


def optimal_events(
    cost: float,
    replay: float,
    events_between: float,
    formula: Literal["young", "daly"] = "young",
) -> int:
    """The whole number of events between snapshots that minimises
    :func:`expected_cost` (``"young"``), or Daly's interval in events (``"daly"``);
    at least 1. All three quantities must be positive."""
    if formula == "daly":
        m = replay * events_between
        if cost >= 2 * m:
            return max(1, round(m / replay))
        x = cost / (2 * m)
        tau = math.sqrt(2 * cost * m) * (1 + math.sqrt(x) / 3 + x / 9) - cost
        return max(1, round(tau / replay))
    k = math.sqrt(2 * cost * events_between / replay)
    low, high = max(1, math.floor(k)), max(1, math.ceil(k))
    return min((low, high), key=lambda n: (expected_cost(n, cost, replay, events_between), n))


class AutoInterval:
    """The measurements of one store and the interval they give (module docstring)."""

    def __init__(self, formula: Literal["young", "daly"] = "young") -> None:
        self.formula: Literal["young", "daly"] = formula
        #: smoothed seconds to encode one snapshot (C), per replayed event (r)
        self.snapshot_cost: float | None = None
        self.replay_cost: float | None = None
        #: appends counted so far, and at the last cold load
        self.appends = 0
        self._appends_at_load = 0
        #: smoothed appends between cold loads (E); None before the second cold load
        self.gap: float | None = None
        self.cold_loads = 0
        #: the current interval (None: not measured yet)
        self.events: int | None = None

    def snapshotted(self, seconds: float) -> None:
        """A snapshot took ``seconds`` to encode."""
        self.snapshot_cost = _ewma(self.snapshot_cost, seconds)
        self._update()

    def replayed(self, seconds: float, events: int) -> None:
        """A cold load replayed ``events`` events after its snapshot in ``seconds``."""
        if self.cold_loads:  # a whole gap between two cold loads
            self.gap = _ewma(self.gap, float(max(1, self.appends - self._appends_at_load)))
        self.cold_loads += 1
        self._appends_at_load = self.appends
        if events > 0:
            self.replay_cost = _ewma(self.replay_cost, seconds / events)
        self._update()

    def carried(self) -> list[float | None] | None:
        """``[C, r, E]`` for a snapshot to carry (None when nothing is measured yet;
        an unmeasured quantity is None)."""
        c, r, e = self.snapshot_cost, self.replay_cost, self.events_between()
        if c is None and r is None and e is None:
            return None
        return [c, r, e]

    def resume(self, carried: object) -> None:
        """Take what a stored snapshot ``carried`` (:meth:`carried`, written by an
        earlier process of this store) for every quantity not measured here yet; a
        value that is not a positive number is ignored."""
        if type(carried) is not list or len(carried) != 3:
            return
        if self.snapshot_cost is not None and self.replay_cost is not None and self.gap:
            return  # everything measured here already
        c, r, e = (v if _positive(v) else None for v in carried)
        if self.snapshot_cost is None and c is not None:
            self.snapshot_cost = float(c)
        if self.replay_cost is None and r is not None:
            self.replay_cost = float(r)
        if self.gap is None and e is not None:
            self.gap = float(e)
        self._update()

    def events_between(self) -> float | None:
        """E: the appends per cold load — the smoothed gap, or the current one when
        it is already longer (cold loads became rarer); None before a whole gap between
        two cold loads was seen."""
        if self.gap is None:
            return None
        return max(self.gap, float(self.appends - self._appends_at_load))

    def _update(self) -> None:
        c, r, e = self.snapshot_cost, self.replay_cost, self.events_between()
        if c is None or r is None or e is None or c <= 0 or r <= 0:
            return
        k = optimal_events(c, r, e, self.formula)
        self.events = min(MAX_EVENTS, max(MIN_EVENTS, k))


def _positive(value: object) -> bool:
    return type(value) in (int, float) and 0 < value < math.inf  # type: ignore[operator]


def _ewma(old: float | None, new: float) -> float:
    return new if old is None else old + ALPHA * (new - old)
