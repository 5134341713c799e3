"""Hybrid logical clock: the clock behind every last-write-wins decision.

A wall clock alone cannot order writes from several machines: clocks drift, step back
(NTP) and tie. A *hybrid logical clock* (Kulkarni et al., 2014) stamps each write with
``(wall, logical, node)``:

* ``wall`` — milliseconds since the epoch, never less than the largest wall time this
  clock has seen (its own or a remote stamp's), so stamps never go backwards;
* ``logical`` — a counter that orders stamps within one millisecond, and across
  machines whose clocks lag behind a stamp they received;
* ``node`` — the id of the writer, the final tie-break, so two different writers never
  produce equal stamps.

Stamps compare as tuples in that order: a total order that respects causality (a stamp
made after observing another is greater) and stays within a bounded distance of real
time. "Last write wins" in :mod:`statekeeper.concurrency` means *greatest stamp wins*.

That distance is bounded by ``max_drift`` (60 s by default): :meth:`HybridClock.observe`
refuses a remote stamp further ahead of this node's wall clock than that with
:class:`~statekeeper.errors.ClockDriftExceeded`, and the clock does not move. Without the
bound, one stamp from a replica whose clock is wrong (a year ahead) would lift every later
stamp of this clock past it, and every later real edit would silently lose its
last-write-wins race to it. Refusing, not clamping: a clamped stamp would be smaller than
the stamp it observed, breaking the causality every merge relies on; the refused stamp's
data can still be merged, it only does not move this clock.

>>> clock = HybridClock("node-a", wall=lambda: 1.0)
>>> first, second = clock.now(), clock.now()
>>> first, second
(Timestamp(wall=1000, logical=0, node='node-a'), Timestamp(wall=1000, logical=1, node='node-a'))
>>> clock.observe(Timestamp(5000, 3, "node-b"))  # a stamp from a clock ahead of ours
Timestamp(wall=5000, logical=4, node='node-a')
>>> try:  # a stamp an hour ahead: a broken clock, refused
...     clock.observe(Timestamp(3_600_000, 0, "node-c"))
... except ClockDriftExceeded as exc:
...     print(exc.remote, exc.ahead_ms, exc.max_drift_ms)
node-c 3599000 60000
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ClockDriftExceeded, ConfigurationError, FutureStampRefused, InvalidArgument

__all__ = ["DEFAULT_MAX_DRIFT", "HybridClock", "Timestamp", "ahead_of_now", "refuse_future"]

#: seconds a remote stamp may be ahead of this node's wall clock (NTP keeps real clocks
#: well under a second apart; a minute leaves room for a laptop waking from sleep)
DEFAULT_MAX_DRIFT = 60.0


@dataclass(frozen=True, order=True, slots=True)
class Timestamp:
    """One hybrid-logical-clock stamp; totally ordered by ``(wall, logical, node)``."""

    wall: int
    logical: int
    node: str

    def __post_init__(self) -> None:
        # what from_json reads back: a stamp made of anything else (a float wall in
        # seconds or ms, a negative one) was stored, and then every reader of the CRDT
        # or version holding it failed — every later merge of that agent too
        for name, unit in (("wall", " (milliseconds since the epoch)"), ("logical", "")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidArgument(
                    name, f"a timestamp's {name} must be an int >= 0{unit}, not {value!r}"
                )
        if not isinstance(self.node, str):
            raise InvalidArgument(
                "node", f"a timestamp's node must be a str, not {type(self.node).__name__}"
            )

    def to_json(self) -> list[Any]:
        """``[wall, logical, node]``."""
        return [self.wall, self.logical, self.node]

    @classmethod
    def from_json(cls, value: Any) -> Timestamp:
        """Read ``[wall, logical, node]`` (raises ``ConfigurationError`` if malformed)."""
        if (
            not isinstance(value, list | tuple)
            or len(value) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value[:2])
            or not isinstance(value[2], str)
            or value[0] < 0
            or value[1] < 0
        ):
            raise ConfigurationError(f"not a timestamp [wall, logical, node]: {value!r}")
        return cls(int(value[0]), int(value[1]), value[2])


def ahead_of_now(
    stamp: Timestamp,
    max_drift: float | None = DEFAULT_MAX_DRIFT,
    wall: Callable[[], float] = time.time,
) -> tuple[int, int] | None:
    """``(ahead_ms, max_drift_ms)`` when ``stamp`` is more than ``max_drift`` seconds
    ahead of ``wall`` (None: it is not, or ``max_drift`` is None): the bound
    :meth:`HybridClock.observe` applies to the stamps it takes, for stamps that arrive
    in data (a last-writer-wins entry merged from a replica)."""
    if max_drift is None:
        return None
    limit = int(max_drift * 1000)
    ahead = stamp.wall - int(wall() * 1000)
    return (ahead, limit) if ahead > limit else None


def refuse_future(
    key: str | None, stamp: Timestamp, max_drift: float | None, stored: bool = False
) -> None:
    """Raise :class:`~statekeeper.errors.FutureStampRefused` for a last-writer-wins
    entry (``key``) whose ``stamp`` is over ``max_drift`` seconds ahead of now."""
    found = ahead_of_now(stamp, max_drift)
    if found is not None:
        raise FutureStampRefused(key, stamp.to_json(), *found, stored=stored)


class HybridClock:
    """A hybrid logical clock for one node (one writer: a process, a replica).

    Thread-safe: the threads of a process may share one clock (each stamp is read
    and advanced under a lock, so no two calls return the same stamp).

    Args:
        node: this writer's id, the tie-break between equal ``(wall, logical)``.
        wall: the physical clock, seconds since the epoch.
        max_drift: seconds a remote stamp may be ahead of ``wall`` before
            :meth:`observe` refuses it (:class:`~statekeeper.errors.ClockDriftExceeded`);
            ``None`` for no bound.
    """

    def __init__(
        self,
        node: str,
        *,
        wall: Callable[[], float] = time.time,
        max_drift: float | None = DEFAULT_MAX_DRIFT,
    ) -> None:
        if not isinstance(node, str) or not node:
            raise ConfigurationError("a clock needs a non-empty node id")
        if max_drift is not None and (
            not isinstance(max_drift, int | float)
            or isinstance(max_drift, bool)
            or not math.isfinite(max_drift)
            or max_drift < 0
        ):
            raise InvalidArgument(
                "max_drift", f"max_drift must be seconds >= 0 or None, not {max_drift!r}"
            )
        self.node = node
        self.max_drift = max_drift
        self._wall = wall
        self._last = Timestamp(0, 0, node)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("node", "max_drift", "_wall", "_last")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _physical(self) -> int:
        return int(self._wall() * 1000)

    def now(self) -> Timestamp:
        """A stamp for a local write: greater than every stamp made or observed so far."""
        with self._lock:
            physical = self._physical()
            last = self._last
            if physical > last.wall:
                stamp = Timestamp(physical, 0, self.node)
            else:
                stamp = Timestamp(last.wall, last.logical + 1, self.node)
            self._last = stamp
            return stamp

    def observe(self, remote: Timestamp) -> Timestamp:
        """Merge a stamp received from another node; returns the stamp of that event,
        greater than both ``remote`` and everything this clock made before.

        Raises :class:`~statekeeper.errors.ClockDriftExceeded` (the clock unchanged) if
        ``remote`` is more than ``max_drift`` seconds ahead of this node's wall clock."""
        with self._lock:
            return self._observe(remote)

    def _observe(self, remote: Timestamp) -> Timestamp:
        physical = self._physical()
        if self.max_drift is not None:
            ahead = remote.wall - physical
            limit = int(self.max_drift * 1000)
            if ahead > limit:
                raise ClockDriftExceeded(remote.node, ahead, limit)
        last = self._last
        wall = max(physical, last.wall, remote.wall)
        if wall == last.wall and wall == remote.wall:
            logical = max(last.logical, remote.logical) + 1
        elif wall == last.wall:
            logical = last.logical + 1
        elif wall == remote.wall:
            logical = remote.logical + 1
        else:
            logical = 0
        self._last = Timestamp(wall, logical, self.node)
        return self._last

    @property
    def last(self) -> Timestamp:
        """The greatest stamp this clock has made."""
        return self._last
