"""In-memory backend: the contract with no I/O, for tests and ephemeral agents.

Nothing survives the process. Appends are atomic with respect to the event loop (no
``await`` happens between the head check and the write). Leases expire on ``clock``
(the process's wall clock by default); a fenced append checks its token in the same
atomic step.

The change feed's calls are in :mod:`statekeeper.backends.memory_feed`, the leases' in
:mod:`statekeeper.backends.memory_leases`, the idempotency records' in
:mod:`statekeeper.backends.memory_keys` (functions bound on the class), the stream's
record in :mod:`statekeeper.backends.memory_stream`.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Callable, Sequence

from ..errors import ConflictError, StoreClosed
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    EventType,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)
from . import memory_feed, memory_keys, memory_leases
from .base import (
    Backend,
    Capability,
    Health,
    KeptKeys,
    check_fence,
    check_lease_grant,
    check_prune,
    check_prune_at,
    unstored_rewrite,
    validate_from_base,
    validate_from_base_guard,
    validate_next,
    validate_request,
    validate_rewrite,
    validate_together,
)
from .memory_stream import _PRUNED, _Stream
from .pruned_snapshots import lowest_pruned_snapshot, pruned_snapshot_rewrite
from .rewrite_page import checked_page

__all__ = ["MemoryBackend"]


class MemoryBackend(Backend):
    """Keeps every stream in a dict. ``memory://`` selects it.

    Args:
        clock: the clock lease expiry is measured on (seconds since the epoch).
    """

    name = "memory"
    supports_leases = True
    capabilities = frozenset(
        {
            Capability.LEASES,
            Capability.KEY_EXPORT,
            Capability.REWRITE,
            Capability.DROP_ALL,
            Capability.PRUNE,
            Capability.BASE_IMPORT,
            Capability.FEED,
            Capability.LEASE_LIST,
            Capability.KEY_EXPIRY,
            Capability.KEY_RENAME,
        }
    )
    compares_head_tag = True

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._streams: dict[str, _Stream] = {}
        # kept apart from the streams: a token must never go back, even after a delete
        self._leases: dict[str, LeaseInfo] = {}
        self.clock = clock
        self._closed = False
        # the change feed: positions in append order (one event loop: commit order),
        # each pointing at (agent, seq, the stream object it was appended to): a
        # deleted or re-created stream's old entries no longer match and are skipped
        self._feed_positions: list[int] = []
        self._feed_refs: list[tuple[str, int, _Stream]] = []
        # (agent, seq) -> the position of its newest feed entry and that entry's stream,
        # kept in step with the feed (appends; trims drop theirs): feed_position asks it
        # (was: a scan of the feed per call, quadratic over a replay's re-created agents)
        self._feed_index: dict[tuple[str, int], tuple[int, _Stream]] = {}
        self._feed_last = 0
        self._feed_floor = 0
        self._feed_wakeup: asyncio.Event | None = None
        #: the store-level markers set (see Backend.read_marker)
        self._markers: set[str] = set()
        self._feed_id: str | None = None

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed("memory backend is closed")

    appends_together = True
    guards_from_base = True
    guards_renames = True
    changes_alone_together = True
    changes_leases_and_rewrites = True
    prunes_together_at_head = True
    checks_absence_together = True

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        # every check before any write, with no await between: all or nothing
        self._check()
        validate_together(requests, changes, self)
        now = self.clock()
        for change in changes:
            if change.lease is not None:
                current = self._leases.get(change.agent_id)
                if change.lease.ttl is not None:
                    check_lease_grant(change.agent_id, change.lease, current, now)
                else:
                    check_fence(change.agent_id, (change.lease.holder, change.lease.token), current)
                continue
            if change.rewrite is not None:
                self._check_rewrite(change.rewrite)
                continue
            stream = self._streams.get(change.agent_id)
            head = len(stream.events) if stream is not None else 0
            if change.absent:
                if head:
                    raise ConflictError(change.agent_id, 0, head)
                continue
            if change.snapshot is not None and not 0 < change.snapshot.seq <= head:
                raise ConflictError(change.agent_id, change.snapshot.seq, head)
            if change.delete_at is not None and head != change.delete_at:
                raise ConflictError(change.agent_id, change.delete_at, head)
            if (  # the head record another one: deleted and written again since
                change.delete_checksum is not None
                and stream is not None
                and stream.events[head - 1].checksum != change.delete_checksum
            ):
                raise ConflictError(change.agent_id, head, head)
            if change.prune_to is not None:
                base = change.prune_to
                stored = _head_checksum(stream, head)  # (in memory: no read to save)
                check_prune_at(
                    change.agent_id,
                    head,
                    change.prune_head,
                    change.prune_checksum,
                    lambda: stored,  # noqa: B023 (called before the loop goes on)
                )
                has_base = (stream is not None and base in stream.snapshots) or (
                    change.snapshot is not None and change.snapshot.seq == base
                )
                check_prune(
                    change.agent_id,
                    head,
                    base,
                    has_base,
                    change.drop_snapshots,
                    stream.base if stream is not None else 0,
                )
        for request in requests:
            earlier = self._check_append(request)
            if earlier is not None:
                return [earlier if r is request else None for r in requests]
        for change in changes:  # no await from the checks to the last write: all at once
            if change.lease is not None:
                lease = change.lease
                self._leases[change.agent_id] = (
                    LeaseInfo(change.agent_id, lease.holder, lease.token, now + lease.ttl)
                    if lease.ttl is not None
                    else LeaseInfo(change.agent_id, None, lease.token, 0.0)
                )
                continue
            if change.rewrite is not None:
                self._apply_rewrite(change.rewrite)
                continue
            if change.absent:  # (checked above: nothing to write)
                continue
            if change.delete_at is not None:
                del self._streams[change.agent_id]
                continue
            stream = self._streams[change.agent_id]
            if change.snapshot is not None:
                self._put_snapshot(stream, change.snapshot)
            if change.prune_to is not None:
                self._prune(stream, change.prune_to, change.drop_snapshots)
        return [self._commit(request) for request in requests]

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check()
        validate_request(request)
        earlier = self._check_append(request)
        return earlier if earlier is not None else self._commit(request)

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        # the checks, then the stream made and committed (and the feed's floor raised
        # through its first event: Backend.append_from_base) with no await between
        self._check()
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        existing = self._streams.get(request.agent_id)
        if existing is not None:
            raise ConflictError(request.agent_id, 0, len(existing.events))
        if guard is not None and guard.rewrite is not None:
            self._check_rewrite(guard.rewrite)
            self._apply_rewrite(guard.rewrite)  # (no records: its head tag, if any)
        stream = _Stream(
            events=[_PRUNED] * base.seq, created_at=request.events[0].timestamp, base=base.seq
        )
        self._put_snapshot(stream, base)
        now = self.clock()
        stream.keys.update((name, (first, last, now)) for name, first, last in kept_keys)
        self._streams[request.agent_id] = stream
        result = self._commit(request)
        if raise_floor:  # (its events took the last positions)
            self._trim_feed(self._feed_last - len(request.events) + 1)
        return result

    def _check_append(self, request: AppendRequest) -> AppendResult | None:
        """The checks of one append, before anything is written: its fence; an earlier
        append with its idempotency key (returned, ``duplicate=True``: nothing to write);
        else the expected head and tag (:class:`ConflictError`)."""
        if request.fence is not None:
            check_fence(request.agent_id, request.fence, self._leases.get(request.agent_id))
        stream = self._streams.get(request.agent_id)
        key = request.idempotency_key
        if stream is not None and key is not None and key in stream.keys:
            first, last, _ = stream.keys[key]
            return AppendResult(request.agent_id, first, last, duplicate=True)
        head = len(stream.events) if stream is not None else 0
        if head != request.expected_seq or (
            request.check_tag and stream is not None and stream.head_tag != request.expected_tag
        ):
            raise ConflictError(request.agent_id, request.expected_seq, head)
        return None

    def _commit(self, request: AppendRequest) -> AppendResult:
        """Store a checked append (see :meth:`append`)."""
        events = request.events
        first, last = events[0].seq, events[-1].seq
        stream = self._land(request.agent_id, events, request.head_tag, request.snapshot)
        if request.idempotency_key is not None:
            stream.keys[request.idempotency_key] = (first, last, events[0].timestamp)
        return AppendResult(request.agent_id, first, last)

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
        self._check()
        validate_next(agent_id, seq, snapshot)
        stream = self._streams.get(agent_id)
        head = len(stream.events) if stream is not None else 0
        if head != seq - 1 or (stream is not None and stream.head_tag != expected_tag):
            raise ConflictError(agent_id, seq - 1, head)
        event = RawEvent(seq, EventType.PATCH, timestamp, payload, checksum)
        self._land(agent_id, (event,), head_tag, snapshot)

    def _land(
        self,
        agent_id: str,
        events: Sequence[RawEvent],
        head_tag: bytes | None,
        snapshot: RawSnapshot | None,
    ) -> _Stream:
        """Store checked ``events`` (and their snapshot) on the agent's stream, made
        if it has none, and give them their feed positions; the stream."""
        stream = self._streams.get(agent_id)
        if stream is None:
            stream = _Stream(created_at=events[0].timestamp)
            self._streams[agent_id] = stream
        stream.events.extend(events)
        stream.head_tag = head_tag
        if snapshot is not None:
            self._put_snapshot(stream, snapshot)
        for event in events:
            self._feed_last += 1
            self._feed_positions.append(self._feed_last)
            self._feed_refs.append((agent_id, event.seq, stream))
            self._feed_index[(agent_id, event.seq)] = (self._feed_last, stream)
        if self._feed_wakeup is not None:
            self._feed_wakeup.set()
            self._feed_wakeup = None
        return stream

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        self._check()
        stream = self._streams.get(agent_id)
        if stream is None or key not in stream.keys:
            return None
        first, last, _ = stream.keys[key]
        return AppendResult(agent_id, first, last, duplicate=True)

    # -- idempotency records (memory_keys) -----------------------------------------
    idempotency_keys = memory_keys.idempotency_keys
    rename_keys = memory_keys.rename_keys
    expire_keys = memory_keys.expire_keys

    # -- the change feed (memory_feed) ----------------------------------------------
    feed_id = memory_feed.feed_id
    renew_feed_id = memory_feed.renew_feed_id
    read_feed = memory_feed.read_feed
    read_feed_page = memory_feed.read_feed_page
    feed_bounds = memory_feed.feed_bounds
    trim_feed = memory_feed.trim_feed
    _trim_feed = memory_feed._trim_feed
    feed_position = memory_feed.feed_position
    wait_feed = memory_feed.wait_feed

    async def read_marker(self, name: str) -> bool | None:
        self._check()
        return name in self._markers

    async def set_marker(self, name: str) -> None:
        self._check()
        self._markers.add(name)

    async def drop_all(self) -> int:
        """Forget every agent and lease; returns how many agents there were."""
        self._check()
        count = len(self._streams)
        self._streams.clear()
        self._leases.clear()
        self._markers.clear()
        self._feed_positions.clear()
        self._feed_refs.clear()
        self._feed_index.clear()
        return count

    async def head(self, agent_id: str) -> int:
        self._check()
        stream = self._streams.get(agent_id)
        return len(stream.events) if stream is not None else 0

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        self._check()
        stream = self._streams.get(agent_id)
        return (len(stream.events), stream.head_tag) if stream is not None else (0, None)

    #: a page is checked whole, then written, with no suspension point (.rewrite_page):
    #: applied with nothing interleaved, none of it written when a request is refused
    rewrites_many = True

    async def rewrite_many(self, requests: Sequence[RewriteRequest]) -> list[bool]:
        self._check()
        if len({r.agent_id for r in requests}) != len(requests):  # (each sees the one before)
            return await super().rewrite_many(requests)
        return checked_page(requests, self._check_rewrite, self._apply_rewrite)

    async def rewrite(self, request: RewriteRequest) -> None:
        self._check()
        validate_rewrite(request)
        self._check_rewrite(request)
        self._apply_rewrite(request)

    def _check_rewrite(self, request: RewriteRequest) -> None:
        """The checks of a rewrite, before anything is written (ConflictError: a
        stale head; ConfigurationError: a pruned event)."""
        stream = self._streams.get(request.agent_id)
        head = len(stream.events) if stream is not None else 0
        if (
            stream is None
            or head != request.expected_seq
            or (stream.head_tag != request.expected_tag)
        ):
            raise ConflictError(request.agent_id, request.expected_seq, head)
        pruned = [new.seq for new in request.events if new.seq <= stream.base]
        if pruned:
            raise unstored_rewrite(request.agent_id, min(pruned), stream.base)
        snap = lowest_pruned_snapshot(request, stream.base)
        if snap is not None:
            raise pruned_snapshot_rewrite(request.agent_id, snap, stream.base)

    def _apply_rewrite(self, request: RewriteRequest) -> None:
        stream = self._streams[request.agent_id]
        for new in request.events:
            old = stream.events[new.seq - 1]
            stream.events[new.seq - 1] = RawEvent(
                old.seq, old.type, old.timestamp, new.payload, new.checksum
            )
        for snap in request.snapshots:
            self._put_snapshot(stream, snap)
        if request.head_tag is not None:
            stream.head_tag = request.head_tag

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        self._check()
        stream = self._streams.get(agent_id)
        if stream is None:
            return []
        end = len(stream.events) if to_seq is None else min(to_seq, len(stream.events))
        start = max(after_seq, stream.base)
        if limit is not None:
            end = min(end, start + limit)
        return stream.events[start:end] if end > start else []

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        self._check()
        stream = self._streams.get(agent_id)
        if stream is None:
            return 0
        # The highest seq stamped at or before ``timestamp``. Not a bisection: clocks
        # can step back, so stamps are not guaranteed to be sorted.
        for e in reversed(stream.events):
            if e is _PRUNED:
                break
            if e.timestamp <= timestamp:
                return e.seq
        return 0

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        self._check()
        stream = self._streams.get(agent_id)
        expected, head = head, len(stream.events) if stream is not None else 0
        stored = _head_checksum(stream, head)
        check_prune_at(agent_id, head, expected, checksum, lambda: stored)
        has_base = stream is not None and base_seq in stream.snapshots
        current_base = stream.base if stream is not None else 0
        check_prune(agent_id, head, base_seq, has_base, drop_snapshots, current_base)
        assert stream is not None
        self._prune(stream, base_seq, drop_snapshots)

    @staticmethod
    def _prune(stream: _Stream, base_seq: int, drop_snapshots: Sequence[int]) -> None:
        """:meth:`prune` of ``stream``, its preconditions checked."""
        if base_seq > stream.base:
            for i in range(stream.base, base_seq):
                stream.events[i] = _PRUNED
            stream.base = base_seq  # (idempotency records stay: a retry is still one)
        drop = {s for s in stream.snapshot_seqs if s < base_seq} | set(drop_snapshots)
        for seq in drop & set(stream.snapshots):
            del stream.snapshots[seq]
        stream.snapshot_seqs = [s for s in stream.snapshot_seqs if s not in drop]

    def _put_snapshot(self, stream: _Stream, snapshot: RawSnapshot) -> None:
        if snapshot.seq not in stream.snapshots:
            bisect.insort(stream.snapshot_seqs, snapshot.seq)
        stream.snapshots[snapshot.seq] = snapshot

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check()
        stream = self._streams.get(agent_id)
        if stream is None or not 0 < snapshot.seq <= len(stream.events):
            raise ConflictError(agent_id, snapshot.seq, len(stream.events) if stream else 0)
        self._put_snapshot(stream, snapshot)

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        self._check()
        stream = self._streams.get(agent_id)
        if stream is None or not stream.snapshot_seqs:
            return None
        if at_or_below is None:
            return stream.snapshots[stream.snapshot_seqs[-1]]
        i = bisect.bisect_right(stream.snapshot_seqs, at_or_below)
        return stream.snapshots[stream.snapshot_seqs[i - 1]] if i else None

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        self._check()
        ids = sorted(self._streams)
        start = bisect.bisect_right(ids, after) if after is not None else 0
        out = []
        for agent_id in ids[start : start + limit]:
            s = self._streams[agent_id]
            out.append(AgentInfo(agent_id, len(s.events), s.created_at, s.events[-1].timestamp))
        return out

    lists_by_write = True

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        self._check()
        rows = sorted(
            (s.events[-1].timestamp, agent_id, len(s.events), s.created_at)
            for agent_id, s in self._streams.items()
        )
        if newest_first:
            rows.reverse()
        out = []
        for ts, agent_id, head, created in rows:
            if cursor is not None and (
                (ts, agent_id) >= cursor if newest_first else (ts, agent_id) <= cursor
            ):
                continue
            out.append(AgentInfo(agent_id, head, created, ts))
            if len(out) == limit:
                break
        return out

    lists_backwards = True

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        self._check()
        ids = sorted(self._streams)
        end = bisect.bisect_left(ids, before) if before is not None else len(ids)
        out = []
        for agent_id in reversed(ids[max(0, end - limit) : end]):
            s = self._streams[agent_id]
            out.append(AgentInfo(agent_id, len(s.events), s.created_at, s.events[-1].timestamp))
        return out

    async def count_agents(self) -> int:
        self._check()
        return len(self._streams)

    async def delete_agent(self, agent_id: str) -> bool:
        self._check()
        return self._streams.pop(agent_id, None) is not None

    # -- leases --------------------------------------------------------------------

    acquire_lease = memory_leases.acquire_lease
    renew_lease = memory_leases.renew_lease
    release_lease = memory_leases.release_lease
    get_lease = memory_leases.get_lease
    carry_lease_tokens = memory_leases.carry_lease_tokens
    list_leases = memory_leases.list_leases

    async def health(self) -> Health:
        return Health(ok=not self._closed, backend=self.name, detail={"agents": len(self._streams)})

    async def close(self) -> None:
        self._closed = True


def _head_checksum(stream: _Stream | None, head: int) -> bytes | None:
    """The stored checksum of ``stream``'s event at ``head`` (None: none there)."""
    return stream.events[head - 1].checksum if stream is not None and head else None
