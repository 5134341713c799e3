"""OpenTelemetry spans for store operations and backend calls — only when installed.

Nothing here imports :mod:`opentelemetry` until a store is instrumented with tracing
on, and the import is guarded: without the ``otel`` extra (``pip install
statekeeper[otel]``) :func:`tracer` returns None and the instrumentation takes its
no-span path (a single ``is None`` test per call).

Spans follow the OpenTelemetry conventions: store operations (``load``, ``save``,
``transition``, ``append``, ...) are ``INTERNAL`` spans named ``statekeeper.<op>``;
backend calls are ``CLIENT`` spans named ``<call> <backend>`` with ``db.system.name``
and ``db.operation.name``. Every span carries ``statekeeper.agent_id``,
``statekeeper.seq`` (when known), ``statekeeper.backend`` and ``statekeeper.outcome``.
The caller's context is the parent: spans are started in the current OpenTelemetry
context (a LangGraph node's span is the parent of the saver's spans; the sync faces run
their coroutines in a copy of the calling thread's context).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SCOPE", "db_system", "otel_available", "tracer"]

#: the instrumentation scope name of every span statekeeper starts
SCOPE = "statekeeper"

_DB_SYSTEMS = {"postgresql": "postgresql", "sqlite": "sqlite", "redis": "redis", "s3": "aws.s3"}


def otel_available() -> bool:
    """True when ``opentelemetry-api`` can be imported."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def tracer(provider: Any = None) -> Any:
    """A tracer of scope :data:`SCOPE` from ``provider`` (default: the global one), or
    None when OpenTelemetry is not installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    from .. import __version__

    if provider is not None:
        return provider.get_tracer(SCOPE, __version__)
    return trace.get_tracer(SCOPE, __version__)


def db_system(backend: str) -> str:
    """The ``db.system.name`` of a backend engine name (``other_sql`` style names for
    engines OpenTelemetry has no name for: ``statekeeper.memory``, ...)."""
    return _DB_SYSTEMS.get(backend, f"statekeeper.{backend}")
