"""Vector clocks: detect whether two versions are ordered or concurrent.

Each replica (a process, a device holding an offline copy of an agent) keeps a
counter; a version's clock maps replica ids to how many of that replica's updates it
includes. A replica's updates are made one after the other: writers that edit at the
same time (two tasks of one process) need an id each, or one's update is taken for
part of the other's past and dropped by a merge (docs/concurrency.md). Comparing two
clocks tells the causal relation of the versions:

* ``BEFORE`` — every counter ``<=`` and one ``<``: the other version already includes
  this one (fast-forward to it);
* ``AFTER`` — the reverse;
* ``EQUAL`` — the same history;
* ``CONCURRENT`` — each has an update the other lacks: neither may simply replace the
  other, a merge strategy must reconcile them (:mod:`statekeeper.concurrency.merge`).

>>> a = VectorClock().increment("laptop")
>>> b = a.increment("server")
>>> a.compare(b), b.compare(a)
(<Ordering.BEFORE: 'before'>, <Ordering.AFTER: 'after'>)
>>> c = a.increment("laptop")
>>> b.compare(c)
<Ordering.CONCURRENT: 'concurrent'>
>>> b.merge(c).to_json()
{'laptop': 2, 'server': 1}
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import ConfigurationError

__all__ = ["Ordering", "VectorClock"]


class Ordering(enum.Enum):
    """How one version relates causally to another."""

    BEFORE = "before"
    AFTER = "after"
    EQUAL = "equal"
    CONCURRENT = "concurrent"


class VectorClock(Mapping[str, int]):
    """An immutable vector clock: replica id → number of its updates included.

    Missing replicas count 0 (and zero counters are not stored), so clocks that differ
    only by explicit zeros are equal.
    """

    __slots__ = ("_counts",)

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        clean: dict[str, int] = {}
        for node, count in (counts or {}).items():
            if not isinstance(node, str):
                raise ConfigurationError(f"vector clock node ids are strings, not {node!r}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigurationError(f"vector clock counter of {node!r} must be an int >= 0")
            if count:
                clean[node] = count
        self._counts = dict(sorted(clean.items()))

    # -- Mapping -----------------------------------------------------------------

    def __getitem__(self, node: str) -> int:
        return self._counts[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, node: str, default: int = 0) -> int:  # type: ignore[override]
        """The counter of ``node`` (0 when absent)."""
        return self._counts.get(node, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, VectorClock):
            return self._counts == other._counts
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._counts.items()))

    def __repr__(self) -> str:
        return f"VectorClock({self._counts!r})"

    # -- the clock -----------------------------------------------------------------

    def increment(self, node: str, by: int = 1) -> VectorClock:
        """This clock with ``node``'s counter raised by ``by`` (a local update)."""
        if by < 1:
            raise ConfigurationError("a vector clock only moves forward (by >= 1)")
        counts = dict(self._counts)
        counts[node] = counts.get(node, 0) + by
        return VectorClock(counts)

    def merge(self, other: VectorClock) -> VectorClock:
        """The least clock that includes both histories (pointwise maximum)."""
        counts = dict(self._counts)
        for node, count in other._counts.items():
            if count > counts.get(node, 0):
                counts[node] = count
        return VectorClock(counts)

    def compare(self, other: VectorClock) -> Ordering:
        """The causal relation of this clock's version to ``other``'s."""
        less = greater = False
        for node in self._counts.keys() | other._counts.keys():
            mine, theirs = self.get(node), other.get(node)
            if mine < theirs:
                less = True
            elif mine > theirs:
                greater = True
            if less and greater:
                return Ordering.CONCURRENT
        if less:
            return Ordering.BEFORE
        if greater:
            return Ordering.AFTER
        return Ordering.EQUAL

    def __le__(self, other: VectorClock) -> bool:
        """``a <= b``: b's history includes a's (happened-before or equal)."""
        return self.compare(other) in (Ordering.BEFORE, Ordering.EQUAL)

    def __lt__(self, other: VectorClock) -> bool:
        """``a < b``: a happened before b."""
        return self.compare(other) is Ordering.BEFORE

    def __ge__(self, other: VectorClock) -> bool:
        return other <= self

    def __gt__(self, other: VectorClock) -> bool:
        return other < self

    def concurrent_with(self, other: VectorClock) -> bool:
        """True when neither history includes the other."""
        return self.compare(other) is Ordering.CONCURRENT

    # -- JSON ----------------------------------------------------------------------

    def to_json(self) -> dict[str, int]:
        """``{node: counter}`` (zero counters omitted)."""
        return dict(self._counts)

    @classmethod
    def from_json(cls, value: Any) -> VectorClock:
        """Read ``{node: counter}``; raises ``ConfigurationError`` if malformed."""
        if not isinstance(value, dict):
            raise ConfigurationError(f"a vector clock is an object of counters, not {value!r}")
        return cls(value)
