"""What a store calls at its seams when something observes it (metrics, spans).

A :class:`~statekeeper.store.StateStore` times its own operations, and its write
pipeline the engine's ``append`` of a direct write, through the object in its
``observer`` attribute (None: nothing is called; :func:`statekeeper.observability.
instrument` sets one). Timing at the seams rather than by wrapping the store's methods
and the engine's ``append`` spares an instrumented save two coroutine frames; the
measurement is in ``docs/benchmarks.md`` ("Observability overhead").
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from ..backends.base import Backend
from ..records import AppendRequest, AppendResult

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["FOLD_AT", "OBSERVED", "StoreObserver", "denied", "refused"]

#: the operations a store reports at its seams (``get`` reports as ``load``, an
#: ``append`` of a ``transition`` event as ``transition``)
OBSERVED = frozenset(("load", "save", "create", "append", "transition", "snapshot", "delete"))

#: observations a histogram keeps as a plain list before sorting them into its buckets
#: (:class:`statekeeper.observability.metrics.Tally`); the store's seams check it
#: themselves when they append an observation (see :class:`StoreObserver`)
FOLD_AT = 512


class StoreObserver(Protocol):
    """The calls a store makes to what observes it (see the module docstring)."""

    #: the engine the write pipeline appends to directly while observed (the store's
    #: ``backend`` may be a wrapper timing the engine's other calls)
    engine: Backend
    #: no spans to start: the seams read ``time.perf_counter()`` themselves as the mark
    #: instead of calling :meth:`begin` / :meth:`append_begin` (one call less each)
    untraced: bool
    #: the pending observations (seconds) of the ``save`` latency histogram and of the
    #: engine's ``append`` one: while :attr:`untraced`, the seams append to these lists
    #: themselves instead of calling :meth:`done` / :meth:`appended` (a Python call and
    #: a clock read less each: the save path's overhead is measured in
    #: ``docs/benchmarks.md``, "Observability overhead"), and call :meth:`fold` once a
    #: list holds :data:`FOLD_AT` of them
    save_times: list[float]
    append_times: list[float]
    #: the mark of the last untraced save whose latency the write pipeline observed
    #: itself (a direct write: the save ends where the engine's append does, so the
    #: two observations share a clock reading); the save checks ``timed is mark``
    #: (its own float object) and skips its own observation
    timed: object

    def fold(self) -> None:
        """Sort the pending observations of :attr:`save_times` and :attr:`append_times`
        into their histograms' buckets."""
        ...

    def appended_snapshot(self, request: AppendRequest) -> None:
        """The engine stored ``request``, which carries a snapshot (its size is
        observed)."""
        ...

    def begin(self, operation: str, agent_id: str) -> Any:
        """An operation starts; returns the mark :meth:`done`/:meth:`failed` get."""
        ...

    def done(self, operation: str, mark: Any, result: object) -> None:
        """The operation ``begin`` marked returned ``result``."""
        ...

    def failed(self, operation: str, mark: Any, exc: BaseException) -> None:
        """The operation ``begin`` marked raised ``exc``."""
        ...

    def append_begin(self, request: AppendRequest) -> Any:
        """The engine's ``append`` of ``request`` starts; returns its mark."""
        ...

    def appended(self, request: AppendRequest, result: AppendResult, mark: Any) -> None:
        """The engine's ``append`` of ``request`` returned ``result``."""
        ...

    def append_failed(self, request: AppendRequest, mark: Any, exc: BaseException) -> None:
        """The engine's ``append`` of ``request`` raised ``exc``."""
        ...


def refused(store: StateStore, operation: str, agent_id: str, exc: BaseException) -> None:
    """An ``operation`` of ``agent_id`` was refused before it reached the store's seams
    (a typed state that fails validation, a document that cannot be serialized, found
    while the write was being made): observed like a refusal at the seams (counted
    among the operation's calls and errors, a span with the error), so an observer
    sees every failed write, not only those the store itself raises."""
    obs = store.observer
    if obs is None:
        return
    mark = time.perf_counter() if obs.untraced else obs.begin(operation, agent_id)
    obs.failed(operation, mark, exc)


def denied(
    store: StateStore, operation: str, agent_id: str | None, exc: Exception, *, readable: bool
) -> None:
    """The store's policy refused ``operation`` of ``agent_id`` (a governed store,
    before the operation reached the seams): observed like any failed operation —
    counted among its calls and errors (``AccessDenied``), a span with the error — so
    refusals show in metrics and traces, not only in the audit log. Unless the
    principal may read the agent (``readable``), neither the span's attributes nor its
    recorded error name it: the error is recorded without the agent's id."""
    obs = store.observer
    if obs is None:
        return
    name = "load" if operation == "get" else operation
    if name not in OBSERVED:
        return
    if not readable:
        from ..errors import AccessDenied

        if isinstance(exc, AccessDenied) and exc.agent_id is not None:
            exc = AccessDenied(exc.principal, exc.permission, exc.operation, None,
                               f"needs {exc.permission} permission")  # fmt: skip
        agent_id = None
    mark = time.perf_counter() if obs.untraced else obs.begin(name, agent_id)  # type: ignore[arg-type]
    obs.failed(name, mark, exc)
