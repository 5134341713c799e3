"""Prometheus metrics of statekeeper stores and backends (``prometheus-client``).

Names follow the Prometheus conventions: base units (seconds, bytes) with the unit as
suffix, counters ending in ``_total``. Labels never name an agent (an agent id is
unbounded cardinality): ``store`` (the name given to :func:`~.instrumentation.instrument`),
``backend`` (the engine), ``operation`` / ``call`` and ``error``.

On the hot path a store records into plain per-store tallies (:class:`Tally`: a list
append per observation, sorted into the buckets in batches; no lock — a store lives on
one event loop);
one :class:`RegistryCollector` per registry turns every live store's tallies into
Prometheus families when scraped, together with what a store counts anyway (cache
hits/misses/evictions, appends, snapshots, loads from the backend, commits) and its
write-behind buffer's depth and age — the live RPO of ``async`` durability. The
overhead on the write path is measured by ``benchmarks/bench_observability*.py``
(``docs/benchmarks.md``, "Observability overhead").
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.registry import Collector

from ..store.observing import FOLD_AT as _FOLD_AT

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = [
    "BATCH_BUCKETS",
    "LATENCY_BUCKETS",
    "REPLAY_BUCKETS",
    "SIZE_BUCKETS",
    "RegistryCollector",
    "StoreTallies",
    "Tally",
    "write_buffer",
]

#: seconds; finer than the client's default (5 ms ... 10 s): an embedded SQLite append
#: takes tens of microseconds, a PostgreSQL one a millisecond or more
LATENCY_BUCKETS = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: appends per shared commit (group commit and write-behind flushes)
BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)
#: events folded on top of a snapshot by a load from the backend
REPLAY_BUCKETS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0)
#: stored snapshot sizes (bytes): 256 B ... 64 MiB
SIZE_BUCKETS = tuple(float(256 * 4**i) for i in range(10))


#: observations a :class:`Tally` keeps before sorting them into its buckets (defined
#: beside the store's seams, which append to a tally's ``pending`` list themselves)
FOLD_AT = _FOLD_AT


class Tally:
    """A histogram's buckets, sum and count for one label set (no lock: one loop).

    An observation is appended to a list; every :data:`FOLD_AT` of them (and before
    anything is read) the list is sorted and cut at the bucket bounds. Measured under
    callgrind: ~0.8k instructions per observation, append and fold together, against
    ~2.0k for a bisect and two additions per observation (``prometheus_client``'s
    ``Histogram.observe``, which also takes a lock, costs more still). A store's
    latency observations are two per save: ``docs/benchmarks.md``, "Observability
    overhead".
    """

    __slots__ = ("_counts", "_sum", "bounds", "pending")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self._sum = 0.0
        #: observations not yet in the buckets (appended to directly by the store's
        #: observer: :meth:`~.instrumentation.Instrumentation.done`)
        self.pending: list[float] = []

    def observe(self, value: float) -> None:
        pending = self.pending
        pending.append(value)
        if len(pending) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Sort the pending observations into the buckets."""
        pending = self.pending
        if not pending:
            return
        pending.sort()
        self._sum += sum(pending)
        counts, low = self._counts, 0
        for i, bound in enumerate(self.bounds):
            high = bisect_right(pending, bound, low)  # values <= bound: the "le" bucket
            counts[i] += high - low
            low = high
        counts[-1] += len(pending) - low
        pending.clear()

    @property
    def counts(self) -> list[int]:
        """Observations per bucket (not cumulative; the last is above every bound)."""
        self.fold()
        return self._counts

    @property
    def sum(self) -> float:
        self.fold()
        return self._sum

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs as Prometheus exposes them."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out


class StoreTallies:
    """Everything one instrumented store measured (see :class:`RegistryCollector`)."""

    def __init__(self, store: StateStore, name: str) -> None:
        self.store_ref = weakref.ref(store)
        self.name = name
        self.backend = store.backend.name
        self.operations: dict[str, Tally] = {}
        self.calls: dict[str, Tally] = {}
        self.operation_errors: dict[tuple[str, str], int] = {}
        self.call_errors: dict[tuple[str, str], int] = {}
        self.conflicts = 0
        #: the store's own count of writes made again, when instrumented
        self._retries_base = _store_retries(store)
        self.fencing_rejections = 0
        self.integrity_failures = 0
        self.batch_size = Tally(BATCH_BUCKETS)
        self.replay_length = Tally(REPLAY_BUCKETS)
        self.snapshot_size = Tally(SIZE_BUCKETS)

    @property
    def retries(self) -> int:
        """Writes the store made again after a conflict since it was instrumented:
        counted by its write loop where it writes again, so exact in every durability
        mode (a shared commit that failed as a whole is one retry per caller; a
        write-behind flush that conflicts is a failure, not a retry)."""
        store = self.store_ref()
        if store is None:
            return 0
        return _store_retries(store) - self._retries_base

    @property
    def backend_conflicts(self) -> int:
        return sum(n for (call, error), n in self.call_errors.items() if error == "conflict")

    def operation(self, name: str) -> Tally:
        found = self.operations.get(name)
        if found is None:
            found = self.operations[name] = Tally(LATENCY_BUCKETS)
        return found

    def call(self, name: str) -> Tally:
        found = self.calls.get(name)
        if found is None:
            found = self.calls[name] = Tally(LATENCY_BUCKETS)
        return found


def _store_retries(store: StateStore) -> int:
    retries: int = getattr(getattr(store, "_writes", None), "retries", 0)
    return retries


def write_buffer(store: StateStore) -> tuple[int, float | None]:
    """``(depth, oldest)``: appends acknowledged but not yet stored by the store's
    write-behind buffer, and the event timestamp of the oldest of them (None when the
    buffer is empty or the store has none). ``now - oldest`` is what a crash would lose
    at most, in time: the live RPO."""
    behind = getattr(getattr(store, "_writes", None), "behind", None)
    if behind is None:
        return 0, None
    pending = [*getattr(behind, "_in_flight", ()), *getattr(behind, "_buffer", ())]
    if not pending:
        return 0, None
    return len(pending), min(r.events[0].timestamp for r in pending)


_LABELS = ("store", "backend")


class RegistryCollector(Collector):
    """The statekeeper families of one registry, merged over every store instrumented
    on it. Stores are held weakly: a dropped store stops reporting."""

    _by_registry: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, RegistryCollector]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self) -> None:
        self._stores: dict[int, StoreTallies] = {}

    @classmethod
    def attach(cls, registry: CollectorRegistry, tallies: StoreTallies) -> None:
        collector = cls._by_registry.get(registry)
        if collector is None:
            collector = cls._by_registry[registry] = cls()
            registry.register(collector)
        for other in collector._live():
            if other.name == tallies.name:
                from ..errors import ConfigurationError

                raise ConfigurationError(
                    f"a store named {tallies.name!r} is instrumented on this registry"
                    " already: give instrument() another name="
                )
        collector._stores[id(tallies)] = tallies

    @classmethod
    def detach(cls, registry: CollectorRegistry, tallies: StoreTallies) -> None:
        collector = cls._by_registry.get(registry)
        if collector is not None:
            collector._stores.pop(id(tallies), None)

    def _live(self) -> list[StoreTallies]:
        live = [t for t in self._stores.values() if t.store_ref() is not None]
        if len(live) != len(self._stores):
            self._stores = {id(t): t for t in live}
        return live

    def describe(self) -> list[Any]:
        return []  # families come and go with stores: no up-front name checks

    def collect(self) -> Iterator[Any]:
        stores = self._live()
        yield from self._measured(stores)
        yield from self._kept(stores)

    def _measured(self, stores: list[StoreTallies]) -> Iterator[Any]:
        ops = HistogramMetricFamily(
            "statekeeper_operation_duration_seconds",
            "Duration of store operations (load, save, transition, append, ...)",
            labels=(*_LABELS, "operation"),
        )
        calls = HistogramMetricFamily(
            "statekeeper_backend_call_duration_seconds",
            "Duration of backend calls (append, read, read_latest, head_tag, ...)",
            labels=(*_LABELS, "call"),
        )
        op_errors = CounterMetricFamily(
            "statekeeper_operation_errors",
            "Store operations that raised, by error kind",
            labels=(*_LABELS, "operation", "error"),
        )
        call_errors = CounterMetricFamily(
            "statekeeper_backend_errors",
            "Backend calls that raised, by error kind",
            labels=(*_LABELS, "call", "error"),
        )
        simple = {
            "conflicts": CounterMetricFamily(
                "statekeeper_conflicts",
                "Compare-and-set conflicts (retried by the store or raised to the caller)",
                labels=_LABELS,
            ),
            "retries": CounterMetricFamily(
                "statekeeper_retries", "Writes made again after a conflict", labels=_LABELS
            ),
            "fencing_rejections": CounterMetricFamily(
                "statekeeper_fencing_rejections",
                "Appends refused because their lease's fencing token was superseded",
                labels=_LABELS,
            ),
            "integrity_failures": CounterMetricFamily(
                "statekeeper_integrity_failures",
                "Operations that found a record failing verification",
                labels=_LABELS,
            ),
        }
        tallies = {
            "batch_size": HistogramMetricFamily(
                "statekeeper_commit_batch_size",
                "Appends per shared commit (group commit, write-behind flush)",
                labels=_LABELS,
            ),
            "replay_length": HistogramMetricFamily(
                "statekeeper_replay_length_events",
                "Events folded on top of the snapshot by a load from the backend",
                labels=_LABELS,
            ),
            "snapshot_size": HistogramMetricFamily(
                "statekeeper_snapshot_size_bytes",
                "Stored size of the snapshots written (the size of the state they hold)",
                labels=_LABELS,
            ),
        }
        for t in stores:
            base = [t.name, t.backend]
            for name, tally in list(t.operations.items()):
                ops.add_metric([*base, name], tally.buckets(), tally.sum)
            for name, tally in list(t.calls.items()):
                calls.add_metric([*base, name], tally.buckets(), tally.sum)
            for (name, error), n in list(t.operation_errors.items()):
                op_errors.add_metric([*base, name, error], n)
            for (name, error), n in list(t.call_errors.items()):
                call_errors.add_metric([*base, name, error], n)
            for attr, family in simple.items():
                family.add_metric(base, getattr(t, attr))
            for attr, hfamily in tallies.items():
                tally = getattr(t, attr)
                hfamily.add_metric(base, tally.buckets(), tally.sum)
        yield from (ops, calls, op_errors, call_errors, *simple.values(), *tallies.values())

    def _kept(self, stores: list[StoreTallies]) -> Iterator[Any]:
        counters = (
            (
                "statekeeper_appends",
                "Appends stored (a write its idempotency key found stored before is none; "
                "a buffered one counts once flushed)",
                "appends",
            ),
            ("statekeeper_snapshots_written", "Snapshots stored", "snapshots_written"),
            (
                "statekeeper_loads_from_backend",
                "Loads that folded state from the backend (cache misses, cold loads)",
                "loads_from_backend",
            ),
            ("statekeeper_commits", "Commits made (a shared commit counts once)", "commits"),
            (
                "statekeeper_write_buffer_lost",
                "Appends acknowledged into the write buffer (async durability) that a "
                "failed flush dropped: never stored",
                "lost",
            ),
        )
        cache = (
            ("statekeeper_cache_hits", "Cache lookups that hit", "hits"),
            ("statekeeper_cache_misses", "Cache lookups that missed", "misses"),
            ("statekeeper_cache_evictions", "States evicted from the cache", "evictions"),
        )
        families = {
            name: CounterMetricFamily(name, doc, labels=_LABELS)
            for name, doc, _ in (*counters, *cache)
        }
        entries = GaugeMetricFamily(
            "statekeeper_cache_entries", "Folded states held in the cache", labels=_LABELS
        )
        depth = GaugeMetricFamily(
            "statekeeper_write_buffer_depth",
            "Appends acknowledged but not yet stored (async durability)",
            labels=_LABELS,
        )
        age = GaugeMetricFamily(
            "statekeeper_write_buffer_age_seconds",
            "Age of the oldest append not yet stored: what a crash would lose (live RPO)",
            labels=_LABELS,
        )
        info = InfoMetricFamily("statekeeper_store", "The store's configuration", labels=_LABELS)
        for t in stores:
            store = t.store_ref()
            if store is None:
                continue
            stats = store.stats()
            base = [t.name, t.backend]
            for name, _, attr in counters:
                families[name].add_metric(base, getattr(stats, attr))
            for name, _, attr in cache:
                families[name].add_metric(base, getattr(stats.cache, attr))
            entries.add_metric(base, stats.cache.size)
            n, oldest = write_buffer(store)
            depth.add_metric(base, n)
            age.add_metric(base, 0.0 if oldest is None else max(0.0, store.clock() - oldest))
            info.add_metric(
                base,
                {"durability": stats.durability, "snapshot_every": str(store.snapshot_every)},
            )
        yield from (*families.values(), entries, depth, age, info)
