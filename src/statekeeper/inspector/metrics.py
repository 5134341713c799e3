"""``statekeeper serve --metrics``: the Prometheus metrics of the store the inspector
serves.

Two kinds, in one registry: the served store instrumented
(:func:`statekeeper.observability.instrument`: appends, loads, cache hits, latency
histograms per operation and backend call, ... of the operations made through this
process), and the gauges of what is *in* the store, whoever wrote it (agents by state,
stuck agents, streams due a snapshot, stale leases, the largest state: the
:class:`~statekeeper.observability.exposition.StoreExporter` of ``statekeeper metrics
serve``), rescanned when scraped at most every :data:`CONTENT_INTERVAL` seconds, on the
inspector's own event loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..errors import StatekeeperError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ..observability.exposition import StoreExporter
    from ..store import StateStore

__all__ = ["CONTENT_INTERVAL", "InspectorMetrics"]

#: the store's contents are scanned for the gauges at most this often (seconds; a
#: scrape in between is answered from the latest scan)
CONTENT_INTERVAL = 30.0


class InspectorMetrics:
    """The registry ``/metrics`` exposes, and what fills it while the store is open."""

    def __init__(self, interval: float = CONTENT_INTERVAL, *, state_names: bool = False) -> None:
        from prometheus_client import CollectorRegistry

        self.registry: CollectorRegistry = CollectorRegistry()
        self.interval = interval
        #: label the agents of an encrypted store by their state names, not by keyed
        #: hashes of them (``--metrics-state-labels``; see
        #: :func:`~statekeeper.observability.exposition.state_label`)
        self.state_names = state_names
        #: the gauges of the store's contents (while the store is open)
        self.content: StoreExporter | None = None

    @contextlib.asynccontextmanager
    async def instrumented(self, store: StateStore) -> AsyncIterator[None]:
        """``store`` records its metrics into :attr:`registry`, and its contents are
        served as gauges, while the app runs (both taken away again after)."""
        from ..observability import instrument
        from ..observability.exposition import StoreExporter, state_label

        instrumentation = instrument(store, registry=self.registry, tracing=False)
        content = StoreExporter(
            None,
            name=instrumentation.name,
            interval=self.interval,
            state_label=state_label(store.codec, names=self.state_names),
        )
        self.registry.register(content)
        self.content = content
        try:
            yield
        finally:
            self.registry.unregister(content)
            self.content = None
            instrumentation.uninstall()

    async def refresh(self, store: StateStore) -> None:
        """Scan ``store`` for the content gauges when the latest scan is older than
        :attr:`interval` (called before the metrics are served)."""
        content = self.content
        if content is None or not content.due():
            return
        from ..observability.health import health_report

        try:
            report = await health_report(store)
        except StatekeeperError as exc:  # served as statekeeper_exporter_scan_ok 0
            content.update(None, type(exc).__name__)
        else:
            content.update(report)
