"""Serving the metrics: an ASGI app and a plain HTTP server, both prometheus-client's.

* :func:`metrics_app` — an ASGI app answering ``GET /`` (mount it at ``/metrics``
  in any ASGI server: Starlette, FastAPI, the inspector's ``statekeeper serve``);
* :func:`start_http_server` — a daemon thread serving ``/metrics`` on a port, for
  processes without a web server of their own;
* :class:`StoreExporter` — a collector of what is *in* a store (agents by state,
  events, the largest state, streams due a snapshot, stale leases), read at most every
  ``interval`` seconds, for ``statekeeper metrics serve``: an exporter beside the
  store, the way ``postgres_exporter`` stands beside a database;
* :func:`state_label` — how a state is named in ``statekeeper_agents_in_state``: on
  an encrypted store, not by its name (a state name is the agents' data, which the
  key keeps unreadable) but by a keyed hash of it, unless the operator opts in.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, make_asgi_app
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..codec.pipeline import Codec
    from .health import HealthReport

__all__ = ["StoreExporter", "metrics_app", "run_scan", "start_http_server", "state_label"]

#: the ``state`` label of the agents without a machine state
NO_STATE = "none"


def state_label(codec: Codec, *, names: bool = False) -> Callable[[str], str]:
    """How :class:`StoreExporter` labels a state of a store with ``codec``: by its name
    on a store without encryption, or when ``names`` is true (``--state-labels``); on
    an encrypted store by ``s-`` and 16 hex digits of an HMAC-SHA256 of the name under
    a subkey of the active key (:meth:`~statekeeper.codec.keys.DerivedKey.label_mac`):
    a dashboard still splits the agents by state, the same state always has the same
    label, and a scrape holds no name (the labels change with the active key)."""
    keyring = codec.keyring
    if names or keyring is None:
        return str
    key = keyring.active
    seen: dict[str, str] = {}

    def opaque(state: str) -> str:
        label = seen.get(state)
        if label is None:
            digest = key.label_mac(state.encode("utf-8", "surrogatepass"))
            label = seen[state] = "s-" + digest[:8].hex()
        return label

    return opaque


def metrics_app(registry: CollectorRegistry | None = None) -> Callable[..., Any]:
    """The ASGI app exposing ``registry`` (default: the global one) in the Prometheus
    text format (OpenMetrics when the scraper asks for it; gzip when it accepts it)."""
    return make_asgi_app(registry if registry is not None else REGISTRY)


def start_http_server(
    port: int, addr: str = "0.0.0.0", registry: CollectorRegistry | None = None
) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` on ``http://addr:port/metrics`` from a daemon thread; returns
    ``(server, thread)`` — ``server.shutdown()`` stops it. Port 0 picks a free port
    (``server.server_port``)."""
    return _start_http_server(port, addr, registry if registry is not None else REGISTRY)


class StoreExporter(Collector):
    """Gauges of a store's contents, refreshed by ``scan`` at most every ``interval``
    seconds (a scrape in between is answered from the last scan).

    ``scan`` is a function returning a fresh :class:`~.health.HealthReport`; it runs
    on the scraping thread (each call on an event loop of its own). With ``scan=None``
    the scans are made by the caller and handed over with :meth:`update` (the web
    inspector scans the store it serves on its own event loop when it is scraped and
    :meth:`due` says so).
    """

    def __init__(
        self,
        scan: Callable[[], Any] | None,
        *,
        name: str,
        interval: float = 30.0,
        state_label: Callable[[str], str] = str,
    ) -> None:
        self._scan = scan
        #: the ``state`` label of a state name (:func:`state_label`; the scan may set it)
        self.state_label = state_label
        self._name = name
        self._interval = interval
        self._lock = threading.Lock()
        self._last: HealthReport | None = None
        self._at = 0.0
        self._error: str | None = None

    def describe(self) -> list[Any]:
        return []

    def due(self) -> bool:
        """No scan yet, or the latest one is ``interval`` seconds old."""
        return self._last is None or time.monotonic() - self._at >= self._interval

    def update(self, report: HealthReport | None, error: str | None = None) -> None:
        """A scan made by the caller: its ``report``, or the ``error`` it failed with
        (the last good report is kept and ``statekeeper_exporter_scan_ok`` is 0)."""
        with self._lock:
            if report is not None:
                self._last = report
            self._error = error
            self._at = time.monotonic()

    def report(self) -> HealthReport | None:
        """The latest scan (scanning now when the last one is older than ``interval``)."""
        with self._lock:
            if self._scan is not None and self.due():
                try:
                    self._last = run_scan(self._scan)
                    self._error = None
                except Exception as exc:  # keep serving the last good scan
                    self._error = type(exc).__name__
                self._at = time.monotonic()
            return self._last

    def collect(self) -> Iterator[Any]:
        report = self.report()
        labels = ["store"]
        up = GaugeMetricFamily(
            "statekeeper_exporter_scan_ok",
            "1 when the latest scan of the store worked",
            labels=labels,
        )
        up.add_metric([self._name], 0.0 if self._error is not None or report is None else 1.0)
        yield up
        if report is None:
            return
        agents = GaugeMetricFamily("statekeeper_agents", "Agents with a stream", labels=labels)
        # every agent with a stream: those read, those that could not be, and those
        # forgotten (crypto-shredded: their records stay until deleted)
        agents.add_metric(
            [self._name], report.agents + len(report.unreadable) + len(report.forgotten)
        )
        forgotten = GaugeMetricFamily(
            "statekeeper_agents_forgotten",
            "Agents crypto-shredded by forget (data key destroyed; records kept until deleted)",
            labels=labels,
        )
        forgotten.add_metric([self._name], len(report.forgotten))
        yield forgotten
        unreadable = GaugeMetricFamily(
            "statekeeper_agents_unreadable",
            "Agents whose head could not be read (damaged records, a wrong or missing key)",
            labels=labels,
        )
        unreadable.add_metric([self._name], len(report.unreadable))
        yield unreadable
        by_state = GaugeMetricFamily(
            "statekeeper_agents_in_state", "Agents by machine state", labels=[*labels, "state"]
        )
        label = self.state_label
        for state, n in report.by_state.items():
            by_state.add_metric([self._name, label(state) if state else NO_STATE], n)
        simple = (
            ("statekeeper_agents_stuck", "Agents stuck in a state", len(report.stuck)),
            (
                "statekeeper_streams_due_snapshot",
                "Streams whose load replays snapshot_every events or more",
                len(report.due_snapshot),
            ),
            (
                "statekeeper_stale_leases",
                "Leases that expired without being renewed or released",
                len(report.stale_leases),
            ),
            (
                "statekeeper_largest_state_bytes",
                "Stored size of the largest state (latest snapshot)",
                max((s.state_bytes for s in report.largest), default=0),
            ),
            (
                "statekeeper_health_breaches",
                "Health thresholds crossed (statekeeper health)",
                len(report.breaches),
            ),
            (
                "statekeeper_last_scan_timestamp_seconds",
                "When the store was last scanned",
                report.generated_at,
            ),
        )
        yield agents
        yield by_state
        for name, doc, value in simple:
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.add_metric([self._name], float(value))
            yield family


def run_scan(scan: Callable[[], Any]) -> Any:
    """``asyncio.run(scan())`` — on a thread of its own when this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(scan())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(scan())).result()
