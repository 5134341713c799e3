"""See inside a store: Prometheus metrics, OpenTelemetry spans, a health report, and
the seed's mathematics computed from recorded history (see ``docs/observability.md``).

Imports are lazy: ``prometheus_client`` loads with :func:`instrument` or
:func:`metrics_app`, OpenTelemetry only when spans are started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_attribute

if TYPE_CHECKING:
    from .exposition import StoreExporter, metrics_app, start_http_server
    from .health import HealthReport, HealthThresholds, health_report
    from .instrumentation import Instrumentation, ObservedBackend, instrument

__all__ = [
    "HealthReport",
    "HealthThresholds",
    "Instrumentation",
    "ObservedBackend",
    "StoreExporter",
    "health_report",
    "instrument",
    "metrics_app",
    "start_http_server",
]

_LAZY = {
    "StoreExporter": "exposition",
    "metrics_app": "exposition",
    "start_http_server": "exposition",
    "HealthReport": "health",
    "HealthThresholds": "health",
    "health_report": "health",
    "Instrumentation": "instrumentation",
    "ObservedBackend": "instrumentation",
    "instrument": "instrumentation",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, globals(), _LAZY, name)


def __dir__() -> list[str]:
    return sorted(__all__)
