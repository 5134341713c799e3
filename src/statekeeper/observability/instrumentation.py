"""``instrument(store)``: Prometheus metrics and OpenTelemetry spans for one store.

The store times itself: :func:`instrument` sets the :class:`Instrumentation` as the
store's ``observer`` (:class:`~statekeeper.store.observing.StoreObserver`), which the
store calls at its seams — at the start and end of ``load``/``save``/``transition``/
``append``/... and, in the write pipeline, around the engine's ``append`` of a direct
write — so an instrumented save runs no extra coroutine frame. The engine's other
calls go through an :class:`ObservedBackend` put between the store and its engine
(timing every call, counting conflicts, fencing rejections and batch sizes).
:meth:`Instrumentation.uninstall` takes both away.

Conflicts are counted where they are met: at the backend (the exception is marked on
its way through, so that the operation it fails is not counted again) or by the store
itself (an ``expected_seq`` that no longer holds). Retries are the store's own count,
kept by its write loop (:attr:`~.metrics.StoreTallies.retries`). Replay lengths are
read off the backend calls of a fold (``read_state`` or ``read_latest``, or
``latest_snapshot`` then ``read`` from its seq). Span parenthood follows the
OpenTelemetry context, which follows asyncio tasks and the sync faces' portal calls.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from ..backends.base import Backend
from ..errors import (
    AgentNotFound,
    ConflictError,
    IntegrityError,
    InvalidArgument,
    LeaseLost,
    StatekeeperError,
    StateTooLarge,
)
from ..records import AppendRequest, AppendResult
from ..store.observing import FOLD_AT
from . import tracing
from . import tracing as tracing_module
from .metrics import RegistryCollector, StoreTallies, Tally
from .observed import ObservedBackend, observed_class

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from ..store import StateStore

__all__ = ["Instrumentation", "ObservedBackend", "instrument", "outcome"]

_perf = time.perf_counter

#: the operations a store reports at its seams (``get`` reports as ``load``, an
#: ``append`` of a ``transition`` event as ``transition``)
_OPERATIONS = ("load", "save", "create", "append", "transition", "snapshot", "delete")


def outcome(exc: BaseException | None) -> str:
    """The ``outcome`` attribute / ``error`` label of a call that raised ``exc``."""
    if exc is None:
        return "ok"
    if isinstance(exc, LeaseLost):
        return "lease_lost"
    if isinstance(exc, ConflictError):
        return "conflict"
    if isinstance(exc, IntegrityError):
        return "integrity"
    if isinstance(exc, AgentNotFound):
        return "not_found"
    if isinstance(exc, StateTooLarge):
        return "too_large"
    if isinstance(exc, StatekeeperError):
        return type(exc).__name__
    if isinstance(exc, Exception):
        return "error"
    return "cancelled"


class Instrumentation:
    """The metrics and spans of one instrumented store (see :func:`instrument`)."""

    def __init__(
        self,
        store: StateStore,
        *,
        registry: CollectorRegistry,
        name: str,
        tracer: Any,
        always_trace: bool,
    ) -> None:
        # held weakly: the store holds this object (its ``observer``, its wrapped
        # backend), and a strong reference back would make the pair a cycle that only
        # the cyclic garbage collector frees; a dropped store and everything it holds
        # (memory://'s events) would then linger until a full collection, and that
        # collection's traversal of them was ~15 % of the instrumented save's
        # measured overhead (docs/benchmarks.md, "Observability overhead")
        self._store = weakref.ref(store)
        self.name = name
        self.registry = registry
        self._tracer = tracer
        self._always = always_trace
        self.tallies = tallies = StoreTallies(store, name)
        self.backend_name = tallies.backend
        self.append_hist = tallies.call("append")
        self._append_pending = self.append_hist.pending
        self.snapshot_size = tallies.snapshot_size
        self.batch_size = tallies.batch_size
        self.replay = tallies.replay_length
        #: one latency histogram per operation the store reports (created up front: a
        #: scrape shows every operation, measured or not)
        self._ops = {op: tallies.operation(op) for op in _OPERATIONS}
        #: the lists an untraced store's save seam and write pipeline append to
        #: themselves (StoreObserver.save_times / append_times)
        self._save_hist = self._ops["save"]
        self.save_times = self._save_hist.pending
        self.append_times = self._append_pending
        self.timed: object = None
        self.engine: Backend = store.backend
        self._installed = False
        #: no tracer: the store's seams take the clock themselves (StoreObserver)
        self.untraced = tracer is None
        if tracer is not None:
            from opentelemetry import trace
            from opentelemetry.trace import SpanKind, Status, StatusCode

            self._client, self._internal = SpanKind.CLIENT, SpanKind.INTERNAL
            self._error = Status(StatusCode.ERROR)
            self._db_system = tracing.db_system(self.backend_name)
            self._provider = trace.get_tracer_provider
            self._idle = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)

    @property
    def tracer(self) -> Any:
        """The tracer spans are started with now (None: no spans). With
        ``tracing="auto"`` spans start once a real ``TracerProvider`` is set globally."""
        tracer = self._tracer
        if tracer is None or self._always or not isinstance(self._provider(), self._idle):
            return tracer
        return None

    @property
    def store(self) -> StateStore | None:
        """The instrumented store (None once it was garbage collected)."""
        return self._store()

    # -- install / uninstall ---------------------------------------------------------

    def install(self) -> None:
        store = self.store
        assert store is not None  # (instrument() holds it)
        inner = store.backend
        RegistryCollector.attach(self.registry, self.tallies)
        wrapped = observed_class(inner)(inner, self)
        store.backend = wrapped
        _swap_backend(store, inner, wrapped)
        # an engine that group-commits by itself (SQLite's commit queue: the store's
        # durability="group" hands it each append) reports each shared commit
        listeners = getattr(inner, "commit_listeners", None)
        if listeners is not None:
            listeners.append(self.batch_size.observe)
        # the store times its operations, and its write pipeline the engine's append
        # of a direct write, by calling this object at its seams (store/observing.py):
        # no wrapper's coroutine frame on the write path (wrapping the store's methods
        # and the engine's append cost +9.9 % instructions per save on memory://,
        # +5.4 % on SQLite; docs/benchmarks.md, "Observability overhead")
        self.engine = inner
        store.observer = self
        writes = getattr(store, "_writes", None)
        if writes is not None:
            writes.observer = self
        self._installed = True

    def uninstall(self) -> None:
        """Take the instrumentation away (its tallies stop being exposed)."""
        if not self._installed:
            return
        store = self.store
        if store is None:  # gone: only its tallies are left to take away
            RegistryCollector.detach(self.registry, self.tallies)
            self._installed = False
            return
        wrapped = store.backend
        assert isinstance(wrapped, ObservedBackend)
        store.backend = wrapped.inner
        _swap_backend(store, wrapped, wrapped.inner)
        listeners = getattr(wrapped.inner, "commit_listeners", None)
        if listeners is not None and self.batch_size.observe in listeners:
            listeners.remove(self.batch_size.observe)
        store.observer = None
        writes = getattr(store, "_writes", None)
        if writes is not None:
            writes.observer = None
        RegistryCollector.detach(self.registry, self.tallies)
        self._installed = False

    # -- metrics helpers -------------------------------------------------------------

    def backend_hist(self, call: str) -> Tally:
        return self.tallies.call(call)

    def count_error(self, call: str, exc: BaseException) -> None:
        error = outcome(exc)
        tallies = self.tallies
        key = (call, error)
        tallies.call_errors[key] = tallies.call_errors.get(key, 0) + 1
        if error == "conflict":
            tallies.conflicts += 1
            # counted here: the operation it fails does not count it again (_op_failed)
            exc.__statekeeper_backend__ = True  # type: ignore[attr-defined]
        elif error == "lease_lost":
            tallies.fencing_rejections += 1
            exc.__statekeeper_backend__ = True  # type: ignore[attr-defined]

    def backend_failed(self, call: str, exc: BaseException, elapsed: float, span: Any) -> None:
        self.tallies.call(call).observe(elapsed)
        self.count_error(call, exc)
        if span is not None:
            self.end_span(span, exc, None)

    # -- spans ---------------------------------------------------------------------

    def start_backend_span(self, call: str, agent_id: str | None) -> Any:
        tracer = self.tracer
        if tracer is None:
            return None
        attributes: dict[str, Any] = {
            "db.system.name": self._db_system,
            "db.operation.name": call,
            "statekeeper.backend": self.backend_name,
            "statekeeper.store": self.name,
        }
        if agent_id is not None:
            attributes["statekeeper.agent_id"] = agent_id
        span = tracer.start_span(
            f"{call} {self.backend_name}", kind=self._client, attributes=attributes
        )
        return _Active(span)

    def end_span(self, active: Any, exc: BaseException | None, seq: int | None) -> None:
        active.finish(exc, seq, self._error)

    async def call(
        self,
        call: str,
        agent_id: str | None,
        fn: Callable[..., Awaitable[Any]],
        *args: Any,
    ) -> Any:
        """Run one backend call, timed (and in a span when tracing)."""
        span = self.start_backend_span(call, agent_id) if self._tracer is not None else None
        t0 = _perf()
        try:
            result = await fn(*args)
        except BaseException as exc:
            self.backend_failed(call, exc, _perf() - t0, span)
            raise
        self.tallies.call(call).observe(_perf() - t0)
        if span is not None:
            self.end_span(span, None, None)
        return result

    # -- the store's seams (store/observing.py: StoreObserver) ---------------------

    def begin(self, operation: str, agent_id: str) -> Any:
        """An operation of the store starts: the clock (and a span when tracing)."""
        if self._tracer is None:
            return _perf()
        return self._marked(self._start_op_span(operation, agent_id))

    def done(self, operation: str, mark: Any, result: object) -> None:
        if mark.__class__ is float:  # (Tally.observe, inlined: this runs on every save)
            tally = self._ops[operation]
            pending = tally.pending
            pending.append(_perf() - mark)
            if len(pending) >= FOLD_AT:
                tally.fold()
            return
        self._ops[operation].observe(_perf() - mark.t0)
        seq = getattr(result, "last_seq", None) or getattr(result, "seq", None)
        mark.span.finish(None, seq if isinstance(seq, int) else None, None)

    def failed(self, operation: str, mark: Any, exc: BaseException) -> None:
        traced = mark.__class__ is not float
        self._ops[operation].observe(_perf() - (mark.t0 if traced else mark))
        self._op_failed(operation, exc)
        if traced:
            mark.span.finish(exc, None, self._error)

    def append_begin(self, request: AppendRequest) -> Any:
        """The engine's append of a direct write starts (timed by the write pipeline)."""
        if self._tracer is None:
            return _perf()
        return self._marked(self.start_backend_span("append", request.agent_id))

    def appended(self, request: AppendRequest, result: AppendResult, mark: Any) -> None:
        if mark.__class__ is float:  # (Tally.observe, inlined: this runs on every save)
            pending = self._append_pending
            pending.append(_perf() - mark)
            if len(pending) >= FOLD_AT:
                self.append_hist.fold()
        else:
            self.append_hist.observe(_perf() - mark.t0)
            mark.span.finish(None, result.last_seq, None)
        if request.snapshot is not None:
            self.snapshot_size.observe(len(request.snapshot.payload))

    def fold(self) -> None:
        """Sort the save and engine-append observations into their buckets."""
        self._save_hist.fold()
        self.append_hist.fold()

    def appended_snapshot(self, request: AppendRequest) -> None:
        assert request.snapshot is not None
        self.snapshot_size.observe(len(request.snapshot.payload))

    def append_failed(self, request: AppendRequest, mark: Any, exc: BaseException) -> None:
        traced = mark.__class__ is not float
        span = mark.span if traced else None
        self.backend_failed("append", exc, _perf() - (mark.t0 if traced else mark), span)

    @staticmethod
    def _marked(span: _Active | None) -> Any:
        t0 = _perf()
        return t0 if span is None else _Marked(span, t0)

    def _start_op_span(self, name: str, agent_id: Any) -> _Active | None:
        tracer = self.tracer
        if tracer is None:
            return None
        attributes: dict[str, Any] = {
            "statekeeper.backend": self.backend_name,
            "statekeeper.store": self.name,
            "statekeeper.operation": name,
        }
        if isinstance(agent_id, str):
            attributes["statekeeper.agent_id"] = agent_id
        span = tracer.start_span(f"statekeeper.{name}", kind=self._internal, attributes=attributes)
        return _Active(span)

    def _op_failed(self, name: str, exc: BaseException) -> None:
        error = outcome(exc)
        tallies = self.tallies
        key = (name, error)
        tallies.operation_errors[key] = tallies.operation_errors.get(key, 0) + 1
        # (a conflict the store raises after the engine refused the same write on a
        # stale cached head carries the engine's as its cause: counted there already)
        from_backend = getattr(exc, "__statekeeper_backend__", False) or getattr(
            exc.__cause__, "__statekeeper_backend__", False
        )
        if error == "conflict":
            if not from_backend:
                tallies.conflicts += 1  # found by the store itself (expected_seq)
        elif error == "lease_lost" and not from_backend:
            tallies.fencing_rejections += 1  # found by the store (check_fence)
        elif error == "integrity":
            tallies.integrity_failures += 1


class _Marked:
    """The mark of a traced operation or append: its span and its start."""

    __slots__ = ("span", "t0")

    def __init__(self, span: _Active, t0: float) -> None:
        self.span = span
        self.t0 = t0


class _Active:
    """A started span made current until :meth:`finish`."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any) -> None:
        from opentelemetry import context, trace

        self.span = span
        self.token = context.attach(trace.set_span_in_context(span))

    def finish(self, exc: BaseException | None, seq: int | None, error_status: Any) -> None:
        from opentelemetry import context

        span = self.span
        span.set_attribute("statekeeper.outcome", outcome(exc))
        if seq is not None:
            span.set_attribute("statekeeper.seq", seq)
        if exc is not None:
            if isinstance(exc, Exception):
                span.record_exception(exc)
            span.set_status(error_status)
        span.end()
        context.detach(self.token)


def instrument(
    store: StateStore,
    *,
    registry: CollectorRegistry | None = None,
    name: str | None = None,
    tracing: bool | Literal["auto"] = "auto",
    tracer_provider: Any = None,
) -> Instrumentation:
    """Record Prometheus metrics (and OpenTelemetry spans) for ``store``.

    Args:
        registry: where the metrics are registered (default: the global
            ``prometheus_client.REGISTRY``, which ``start_http_server`` and
            :func:`~.exposition.metrics_app` expose).
        name: the ``store`` label (default: the backend's engine name); stores sharing
            a registry need different names.
        tracing: spans for every operation and backend call: True (needs the ``otel``
            extra), False, or ``"auto"`` — on when ``opentelemetry`` is installed.
        tracer_provider: an OpenTelemetry ``TracerProvider`` (default: the global one).

    Returns the :class:`Instrumentation`; ``uninstall()`` takes it away again.
    """
    from prometheus_client import REGISTRY

    if getattr(store, "backend", None) is None or not hasattr(store, "stats"):
        raise InvalidArgument(
            "store", f"instrument() needs a StateStore, not {type(store).__name__}"
        )
    if isinstance(store.backend, ObservedBackend):
        raise InvalidArgument("store", "this store is instrumented already")
    if tracing not in (True, False, "auto"):
        raise InvalidArgument("tracing", f"tracing must be True, False or 'auto', not {tracing!r}")
    tracer = None
    if tracing:
        tracer = tracing_module.tracer(tracer_provider)
        if tracer is None and tracing is True:
            from ..errors import ConfigurationError

            raise ConfigurationError("tracing needs OpenTelemetry: pip install 'statekeeper[otel]'")
    instrumentation = Instrumentation(
        store,
        registry=registry if registry is not None else REGISTRY,
        name=name if name is not None else store.backend.name,
        tracer=tracer,
        always_trace=tracing is True or tracer_provider is not None,
    )
    instrumentation.install()
    return instrumentation


def _store_parts(store: Any) -> list[Any]:
    """The parts of a store that hold its backend: the read path, the snapshot policy,
    the write pipeline and its group committer and write-behind buffer, and a governed
    store's audit log (its writes with their entries go through the wrapper, timed as
    appends; and a lease, rekey or migration asks whether the log writes to the
    store's own backend before it commits a change with its entry)."""
    writes = getattr(store, "_writes", None)
    parts = [getattr(store, "_reads", None), getattr(store, "_snapshots", None), writes]
    if writes is not None:
        parts += [getattr(writes, "group", None), getattr(writes, "behind", None)]
    governance = getattr(store, "_governance", None)
    if governance is not None:
        parts.append(getattr(governance, "audit", None))
    return [p for p in parts if p is not None]


def _swap_backend(store: Any, old: Backend, new: Backend) -> None:
    """Point every part of ``store`` that holds ``old`` at ``new``."""
    for part in _store_parts(store):
        for attr in ("backend", "_backend"):
            if getattr(part, attr, None) is old:
                setattr(part, attr, new)
