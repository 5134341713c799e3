"""The engine side of :func:`~.instrumentation.instrument`: :class:`ObservedBackend`
times and counts every call of the engine it wraps (conflicts, fencing rejections,
batch sizes, snapshot sizes, replay lengths), in a span when tracing. The store side
(timing its operations) and its metrics helpers: :class:`~.instrumentation.Instrumentation`.

Over 600 lines because the wrapper forwards every member of the engine contract, one
method each (tests/observability/test_observed_contract.py checks none is missing); the
lease and feed-id members already live in :mod:`.observed_leases` and
:mod:`.observed_feed_id`."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ..backends.base import (
    OPENED_FLAGS,
    Backend,
    Capability,
    Health,
    KeptKeys,
    KeyedRow,
    LatestRead,
    NextRow,
    takes_from_base_guard,
    takes_rename_guard,
)
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    EventRow,
    FeedRecord,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
    StreamExport,
    StreamRows,
)
from .observed_feed_id import FeedIdCalls
from .observed_leases import LeaseCalls

if TYPE_CHECKING:
    from ..backends.sqlite.pages import PageSnapshot
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


class ObservedBackend(LeaseCalls, FeedIdCalls, Backend):
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

    # -- the rest of the contract --------------------------------------------------

    async def rewrite_many(self, requests: Sequence[RewriteRequest]) -> list[bool]:
        done: list[bool] = await self._obs.call(
            "rewrite_many", None, self.inner.rewrite_many, requests
        )
        return done

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        at = () if head is None and checksum is None else (head, checksum)  # (an old override)
        await self._obs.call(
            "prune", agent_id, self.inner.prune, agent_id, base_seq, drop_snapshots, *at
        )

    async def replace_snapshot(
        self,
        agent_id: str,
        snapshot: RawSnapshot,
        drop_seq: int | None,
        head: int,
        checksum: bytes | None,
    ) -> bool:
        done: bool = await self._obs.call(
            "replace_snapshot",
            agent_id,
            self.inner.replace_snapshot,
            agent_id,
            snapshot,
            drop_seq,
            head,
            checksum,
        )
        return done

    async def export_streams(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamExport]:
        # a backup's page (one call per page): the engine's own, untimed
        return await self.inner.export_streams(ranges)

    async def export_rows(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamRows]:
        # a backup's page (one call per page): the engine's own, untimed
        return await self.inner.export_rows(ranges)

    async def read_latest_many(self, agent_ids: Sequence[str]) -> list[LatestRead | None]:
        found: list[LatestRead | None] = await self._obs.call(
            "read_latest_many", None, self.inner.read_latest_many, agent_ids
        )
        return found

    async def read_marker(self, name: str) -> bool | None:
        return await self.inner.read_marker(name)

    async def set_marker(self, name: str) -> None:
        await self.inner.set_marker(name)

    async def read_heads(self, agent_ids: Sequence[str]) -> list[RawEvent | None]:
        found: list[RawEvent | None] = await self._obs.call(
            "read_heads", None, self.inner.read_heads, agent_ids
        )
        return found

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        page: list[AgentInfo] = await self._obs.call(
            "list_agents", None, self.inner.list_agents_before, before, limit
        )
        return page

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        page: list[AgentInfo] = await self._obs.call(
            "list_agents",
            None,
            functools.partial(self.inner.list_agents_by_write, newest_first=newest_first),
            cursor,
            limit,
        )
        return page

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        found: AppendResult | None = await self._obs.call(
            "lookup_key", agent_id, self.inner.lookup_key, agent_id, key
        )
        return found

    async def head(self, agent_id: str) -> int:
        seq: int = await self._obs.call("head", agent_id, self.inner.head, agent_id)
        return seq

    async def rewrite(self, request: RewriteRequest) -> None:
        await self._obs.call("rewrite", request.agent_id, self.inner.rewrite, request)

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        keys: list[tuple[str, int, int]] = await self._obs.call(
            "idempotency_keys", agent_id, self.inner.idempotency_keys, agent_id
        )
        return keys

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        renamed: int = await self._obs.call(
            "rename_keys", agent_id, self._rename_keys, agent_id, renames, guard
        )
        return renamed

    async def _rename_keys(
        self, agent_id: str, renames: Sequence[tuple[str, str]], guard: StreamChange | None
    ) -> int:
        if guard is None:  # (an engine written before it takes no guard)
            return await self.inner.rename_keys(agent_id, renames)
        return await self.inner.rename_keys(agent_id, renames, guard=guard)

    async def set_ttl(self, agent_id: str, ttl: float | None) -> bool:
        done: bool = await self._obs.call("set_ttl", agent_id, self.inner.set_ttl, agent_id, ttl)
        return done

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        forgotten: int = await self._obs.call(
            "expire_keys", agent_id, self._expire_keys, agent_id, before, count_only
        )
        return forgotten

    async def _expire_keys(self, agent_id: str | None, before: float, count_only: bool) -> int:
        return await self.inner.expire_keys(agent_id, before, count_only=count_only)

    async def hold_keys(self, pattern: str, held: bool) -> int:
        covered: int = await self._obs.call("hold_keys", None, self.inner.hold_keys, pattern, held)
        return covered

    async def drop_all(self) -> int | None:
        dropped: int | None = await self._obs.call("drop_all", None, self.inner.drop_all)
        return dropped

    async def schema_version(self) -> int:
        version: int = await self._obs.call("schema_version", None, self.inner.schema_version)
        return version

    # the change feed: reads timed like any call; a live wait is not an operation
    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        records: list[FeedRecord] = await self._obs.call(
            "read_feed", None, self.inner.read_feed, after, limit
        )
        return records

    async def feed_bounds(self) -> tuple[int, int]:
        bounds: tuple[int, int] = await self._obs.call("feed_bounds", None, self.inner.feed_bounds)
        return bounds

    async def trim_feed(self, through: int) -> int:
        dropped: int = await self._obs.call("trim_feed", None, self.inner.trim_feed, through)
        return dropped

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        found: int | None = await self._obs.call(
            "feed_position", agent_id, self.inner.feed_position, agent_id, seq
        )
        return found

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        found: dict[tuple[str, int], int] = await self._obs.call(
            "feed_positions", None, self.inner.feed_positions, wanted
        )
        return found

    async def wait_feed(self, after: int, max_wait: float) -> None:
        await self.inner.wait_feed(after, max_wait)

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        seq: int = await self._obs.call("seq_at", agent_id, self.inner.seq_at, agent_id, timestamp)
        return seq

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        await self._obs.call(
            "save_snapshot", agent_id, self.inner.save_snapshot, agent_id, snapshot
        )
        self._obs.snapshot_size.observe(len(snapshot.payload))

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        page: list[AgentInfo] = await self._obs.call(
            "list_agents", None, self.inner.list_agents, after, limit
        )
        return page

    async def stream_bases(self, agent_ids: Sequence[str]) -> list[int]:
        return await self.inner.stream_bases(agent_ids)  # a backup's first seqs: untimed

    async def orphaned_events(self) -> list[tuple[str, int, int, int]] | None:
        return await self.inner.orphaned_events()  # verify's one scan: untimed

    async def unlisted_agents(self) -> list[str]:
        return await self.inner.unlisted_agents()  # a backup's one scan: untimed

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        # a restore of a compacted stream (one call per such stream): the engine's own
        more: dict[str, Any] = {"raise_floor": True} if raise_floor else {}
        if guard is not None:  # (an engine written before it takes no guard)
            more["guard"] = guard
        return await self.inner.append_from_base(request, base, kept_keys, **more)

    async def copy_to_file(self, dest: str, prefix: str = "") -> bool:
        # a backup's file copy (one call per backup): the engine's own, untimed
        return await self.inner.copy_to_file(dest, prefix)

    def in_place(self) -> contextlib.AbstractContextManager[None]:
        return self.inner.in_place()  # (no engine call: untimed)

    async def page_snapshot(self, prefix: str = "") -> PageSnapshot | None:
        # a backup's page image (one call per backup): the engine's own, untimed
        return await self.inner.page_snapshot(prefix)

    async def import_image(
        self, image: str, expected: tuple[int, int, int], *, raise_floor: bool = False
    ) -> bool:
        # a restore's bulk copy of a checked image (one call per restore): untimed
        floor = {"raise_floor": True} if raise_floor else {}
        return await self.inner.import_image(image, expected, **floor)

    async def copy_out(self, prefix: str, write: Callable[[bytes], None]) -> dict[str, Any] | None:
        # a backup's bulk export (one call per backup): the engine's own, untimed
        return await self.inner.copy_out(prefix, write)

    async def count_agents(self) -> int:
        return int(await self._obs.call("count_agents", None, self.inner.count_agents))

    async def count_prefix(self, prefix: str) -> int:
        return int(await self._obs.call("count_agents", None, self.inner.count_prefix, prefix))

    async def delete_agent(self, agent_id: str) -> bool:
        return bool(
            await self._obs.call("delete_agent", agent_id, self.inner.delete_agent, agent_id)
        )

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        # the engine's own atomic step (the default would compare and delete in two calls)
        existed: bool = await self._obs.call(
            "delete_agent", agent_id, self.inner.delete_agent_at, agent_id, head, checksum
        )
        return existed

    async def health(self) -> Health:
        report: Health = await self._obs.call("health", None, self.inner.health)
        return report

    async def close(self) -> None:
        await self.inner.close()

    def refuse_fence(self, request: AppendRequest) -> None:
        self.inner.refuse_fence(request)

    def supports(self, capability: Capability) -> bool:
        return self.inner.supports(capability)

    def require(self, capability: Capability, why: str = "") -> None:
        self.inner.require(capability, why)

    async def ensure_store(self) -> None:
        await self.inner.ensure_store()

    async def initialize(self) -> None:
        await self.inner.initialize()


for _name in (*vars(ObservedBackend), *vars(LeaseCalls)):
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
