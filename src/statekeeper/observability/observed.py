"""The engine side of :func:`~.instrumentation.instrument`: :class:`ObservedBackend`
times and counts every call of the engine it wraps (conflicts, fencing rejections,
batch sizes, snapshot sizes, replay lengths), in a span when tracing. The store side
(timing its operations) and its metrics helpers: :class:`~.instrumentation.Instrumentation`.

The hot calls (appends, reads, heads) are here; the lease, feed-id and other members of
the engine contract live in :mod:`.observed_leases`, :mod:`.observed_feed_id` and
:mod:`.observed_rest` (tests/observability/test_observed_contract.py checks none is
missing)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..backends.base import (
    OPENED_FLAGS,
    Backend,
    KeyedRow,
    NextRow,
    takes_from_base_guard,
    takes_rename_guard,
)
from ..records import (
    AppendRequest,
    AppendResult,
    EventRow,
    RawEvent,
    RawSnapshot,
    StreamChange,
)
from .observed_feed_id import FeedIdCalls
from .observed_leases import LeaseCalls
from .observed_rest import RestCalls

if TYPE_CHECKING:
    from .instrumentation import Instrumentation

__all__ = ["ObservedBackend", "observed_class"]

_perf = time.perf_counter

#: the contract's declarations (``appends_together``, ``capabilities``, ``rewrites_many``,
#: ...): every class attribute of :class:`Backend` that is neither a method nor a
#: property. The wrapper copies each one from the engine it wraps, so a capability
#: added to the contract is the engine's through an instrumented store too (a default
#: kept here silently turned an instrumented governed store's one-commit audit into
#: entry-first writes)
FLAGS = tuple(
    name
    for name, value in vars(Backend).items()
    if not name.startswith("_")
    and not callable(value)
    and not isinstance(value, (property, staticmethod, classmethod))
    and name not in OPENED_FLAGS  # set by the engine as it opens: read as it is now
)


def _checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    # the wrapped engine checks agent ids itself: do not check them twice
    fn.__statekeeper_checked__ = True  # type: ignore[attr-defined]
    return fn


class ObservedBackend(LeaseCalls, FeedIdCalls, RestCalls):
    """A :class:`Backend` that times and counts every call of the engine it wraps.

    Made by :func:`instrument`; engine attributes it does not define (a SQLite file's
    ``path``, ...) are read from the wrapped engine.
    """

    def __init__(self, inner: Backend, instrumentation: Instrumentation) -> None:
        self.inner = inner
        for flag in FLAGS:
            setattr(self, flag, getattr(inner, flag))
        if self.guards_from_base and not takes_from_base_guard(inner):
            # (an override of append_from_base written before guard= takes none: the
            # wrapper declares no guard, so its callers pass none on)
            self.guards_from_base = False
        if self.guards_renames and not takes_rename_guard(inner):
            self.guards_renames = False  # (the same, of rename_keys)
        self._obs = instrumentation
        #: agent -> seq of the snapshot a fold just read (its replay read comes next)
        self._folding: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return repr(self.inner)

    @property
    def expires_agents(self) -> bool:
        return self.inner.expires_agents

    @property
    def audit_links(self) -> bool:  # type: ignore[override]
        """The engine's, as it is now: PostgreSQL learns it when it opens (row-level
        security on), which may come after the store was instrumented."""
        return self.inner.audit_links

    @property
    def reads_audit_log(self) -> bool:  # type: ignore[override]
        """The engine's, as it is now (see :attr:`audit_links`)."""
        return self.inner.reads_audit_log

    @property
    def tombstones_by_namespace(self) -> bool:  # type: ignore[override]
        """The engine's, as it is now (see :attr:`audit_links`)."""
        return self.inner.tombstones_by_namespace

    @property
    def intents_by_namespace(self) -> bool:  # type: ignore[override]
        """The engine's, as it is now (see :attr:`audit_links`)."""
        return self.inner.intents_by_namespace

    @property
    def opened_new(self) -> bool:  # type: ignore[override]
        """The engine's, as it is now (see :attr:`audit_links`)."""
        return self.inner.opened_new

    # -- the hot calls ---------------------------------------------------------------

    async def append(self, request: AppendRequest) -> AppendResult:
        obs = self._obs
        span = None
        if obs._tracer is not None:
            span = obs.start_backend_span("append", request.agent_id)
        t0 = _perf()
        try:
            result = await self.inner.append(request)
        except BaseException as exc:
            obs.backend_failed("append", exc, _perf() - t0, span)
            raise
        obs.append_hist.observe(_perf() - t0)
        if request.snapshot is not None:
            obs.snapshot_size.observe(len(request.snapshot.payload))
        if span is not None:
            obs.end_span(span, None, result.last_seq)
        return result

    async def append_next(
        self,
        agent_id: str,
        seq: int,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        head_tag: bytes | None,
        expected_tag: bytes | None,
        snapshot: RawSnapshot | None = None,
    ) -> None:
        """Timed and counted as an ``append`` (it is one, in plain arguments)."""
        obs = self._obs
        span = None
        if obs._tracer is not None:
            span = obs.start_backend_span("append", agent_id)
        t0 = _perf()
        try:
            await self.inner.append_next(
                agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot
            )
        except BaseException as exc:
            obs.backend_failed("append", exc, _perf() - t0, span)
            raise
        obs.append_hist.observe(_perf() - t0)
        if snapshot is not None:
            obs.snapshot_size.observe(len(snapshot.payload))
        if span is not None:
            obs.end_span(span, None, seq)

    def commit_next(self, row: NextRow) -> bool:
        """The engine's :meth:`~statekeeper.backends.base.Backend.commit_next`, timed
        and counted as an ``append`` when it committed (False, nothing done, when it did
        not: the caller then awaits :meth:`append_next`, timed there). Traced, it
        commits nothing here: :meth:`append_next` makes the append inside its span."""
        obs = self._obs
        if obs._tracer is not None:
            return False
        t0 = _perf()
        try:
            committed = self.inner.commit_next(row)
        except BaseException as exc:
            obs.backend_failed("append", exc, _perf() - t0, None)
            raise
        if committed:
            obs.append_hist.observe(_perf() - t0)
            if row[7] is not None:
                obs.snapshot_size.observe(len(row[7].payload))
        return committed

    def commit_keyed(self, row: KeyedRow) -> AppendResult | None:
        """The engine's :meth:`~statekeeper.backends.base.Backend.commit_keyed` (the
        store's lean keyed append), timed and counted as an ``append`` when it committed
        or answered a duplicate (None, nothing done, when it did not: the caller then
        awaits :meth:`append`, timed there); a refusal counted as a failed ``append``.
        Traced, it commits nothing here: :meth:`append` makes it inside its span."""
        obs = self._obs
        if obs._tracer is not None:
            return None
        t0 = _perf()
        try:
            result = self.inner.commit_keyed(row)
        except BaseException as exc:
            obs.backend_failed("append", exc, _perf() - t0, None)
            raise
        if result is not None:
            obs.append_hist.observe(_perf() - t0)
        return result

    def join_next(self, row: NextRow) -> Awaitable[BaseException | None] | None:
        """The engine's :meth:`~statekeeper.backends.base.Backend.join_next`, timed and
        counted as an ``append`` when it joined an open commit (None, nothing done, when
        it did not: the caller then awaits :meth:`append_next`, timed there)."""
        joined = self.inner.join_next(row)
        if joined is None:
            return None
        return self._joined(row, joined, _perf())

    async def _joined(
        self, row: NextRow, joined: Awaitable[BaseException | None], t0: float
    ) -> BaseException | None:
        obs = self._obs
        span = obs.start_backend_span("append", row[0]) if obs._tracer is not None else None
        try:
            refused = await joined
        except BaseException as exc:
            obs.backend_failed("append", exc, _perf() - t0, span)
            raise
        if refused is not None:
            obs.backend_failed("append", refused, _perf() - t0, span)
            return refused
        obs.append_hist.observe(_perf() - t0)
        if row[7] is not None:
            obs.snapshot_size.observe(len(row[7].payload))
        if span is not None:
            obs.end_span(span, None, row[1])
        return None

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        obs = self._obs
        span = obs.start_backend_span("append_batch", None) if obs._tracer is not None else None
        t0 = _perf()
        try:
            results = await self.inner.append_batch(requests)
        except BaseException as exc:
            obs.backend_failed("append_batch", exc, _perf() - t0, span)
            raise
        obs.tallies.call("append_batch").observe(_perf() - t0)
        if getattr(self.inner, "commit_listeners", None) is None:  # (else it reports them)
            obs.batch_size.observe(len(requests))
        for request, result in zip(requests, results, strict=False):
            if isinstance(result, BaseException):
                obs.count_error("append", result)
            elif request.snapshot is not None:
                obs.snapshot_size.observe(len(request.snapshot.payload))
        if span is not None:
            span.set_attribute("statekeeper.batch_size", len(requests))
            obs.end_span(span, None, None)
        return results

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        events: list[RawEvent] = await self._obs.call(
            "read", agent_id, self.inner.read, agent_id, after_seq, to_seq, limit
        )
        folding = self._folding
        if folding and folding.pop(agent_id, None) == after_seq:
            self._obs.replay.observe(len(events))  # the replay of a fold
        return events

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        snapshot: RawSnapshot | None = await self._obs.call(
            "latest_snapshot", agent_id, self.inner.latest_snapshot, agent_id, at_or_below
        )
        if at_or_below is not None or snapshot is not None:
            # a fold reads the events after it next (bounded: the store folds one agent
            # at a time per call, and a read of another range clears nothing else)
            if len(self._folding) > 1024:
                self._folding.clear()
            self._folding[agent_id] = snapshot.seq if snapshot is not None else 0
        return snapshot

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        found: tuple[int, bytes | None] = await self._obs.call(
            "head_tag", agent_id, self.inner.head_tag, agent_id
        )
        return found

    async def head_checksum(self, agent_id: str, head: int) -> bytes | None:
        found: bytes | None = await self._obs.call(
            "head_checksum", agent_id, self.inner.head_checksum, agent_id, head
        )
        return found

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        # a governed store's write with its audit entry (one commit): timed and counted
        # as an append, its snapshots' sizes observed like append's
        obs = self._obs
        span = None
        if obs._tracer is not None:
            span = obs.start_backend_span("append", requests[0].agent_id if requests else None)
        t0 = _perf()
        try:
            results = await self.inner.append_together(requests, changes)
        except BaseException as exc:
            obs.backend_failed("append", exc, _perf() - t0, span)
            raise
        obs.append_hist.observe(_perf() - t0)
        for request in requests:
            if request.snapshot is not None:
                obs.snapshot_size.observe(len(request.snapshot.payload))
        if span is not None:
            last = results[0] if results else None
            obs.end_span(span, None, last.last_seq if last is not None else None)
        return results


for _name in (*vars(ObservedBackend), *vars(RestCalls), *vars(LeaseCalls)):
    _fn = getattr(ObservedBackend, _name)
    if callable(_fn) and not _name.startswith("__"):
        _checked(_fn)


class _ObservedLatest(ObservedBackend):
    """For engines that answer ``read_latest`` natively (the store asks the type)."""

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        found: tuple[RawSnapshot | None, list[RawEvent]] = await self._obs.call(
            "read_latest", agent_id, self.inner.read_latest, agent_id
        )
        if found[0] is not None or found[1]:
            self._obs.replay.observe(len(found[1]))
        return found


_checked(_ObservedLatest.read_latest)


_E = TypeVar("_E")
#: what ``read_state`` (events: ``RawEvent``) and ``read_state_rows`` (``EventRow``) return
_State: TypeAlias = tuple[int, bytes | None, RawSnapshot | None, list[_E]]


class _ObservedState(_ObservedLatest):
    """For engines that also read the head with it in one statement (``read_state``)."""

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        return await self._state(agent_id, self.inner.read_state)

    async def read_state_rows(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[EventRow]]:
        # (the same read, the events as rows: counted as "read_state")
        return await self._state(agent_id, self.inner.read_state_rows)

    async def _state(
        self, agent_id: str, read: Callable[[str], Awaitable[_State[_E]]]
    ) -> _State[_E]:
        found: _State[_E] = await self._obs.call("read_state", agent_id, read, agent_id)
        if found[0]:
            self._obs.replay.observe(len(found[3]))
        return found


_checked(_ObservedState.read_state)
_checked(_ObservedState.read_state_rows)


def observed_class(inner: Backend) -> type[ObservedBackend]:
    """The wrapper class for ``inner``: one that also answers ``read_state`` /
    ``read_latest`` when the engine does (the store asks the type)."""
    if type(inner).read_state is not Backend.read_state:
        return _ObservedState
    if type(inner).read_latest is not Backend.read_latest:
        return _ObservedLatest
    return ObservedBackend
