"""A size-bounded LRU cache with O(1) get, put and eviction, and hit/miss counters."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["CacheStats", "LRUCache"]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of an :class:`LRUCache` since it was created."""

    size: int
    max_size: int
    hits: int
    misses: int
    evictions: int

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before the first lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class LRUCache(Generic[K, V]):
    """Least-recently-used cache. ``max_size=0`` disables caching entirely."""

    __slots__ = ("_data", "dropped", "evictions", "hits", "max_size", "misses")

    def __init__(self, max_size: int) -> None:
        if max_size < 0:
            raise ValueError("max_size must be >= 0")
        self.max_size = max_size
        self._data: OrderedDict[K, V] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        #: True once an entry was discarded or cleared (evictions are counted apart):
        #: until then, with no eviction either, every key ever put is still here
        self.dropped = False

    def get(self, key: K) -> V | None:
        """Return the value and mark it most recently used, or None (a miss)."""
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def peek(self, key: K) -> V | None:
        """Return the value without touching recency or counters."""
        return self._data.get(key)

    def put(self, key: K, value: V) -> None:
        """Insert or replace; evicts the least recently used entry when over the limit."""
        if self.max_size == 0:
            return
        data = self._data
        data[key] = value
        data.move_to_end(key)
        if len(data) > self.max_size:
            data.popitem(last=False)
            self.evictions += 1

    def discard(self, key: K) -> None:
        """Remove ``key`` if present."""
        if self._data.pop(key, None) is not None:
            self.dropped = True

    def clear(self) -> None:
        """Drop every entry (counters are kept)."""
        if self._data:
            self.dropped = True
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        return CacheStats(len(self._data), self.max_size, self.hits, self.misses, self.evictions)
