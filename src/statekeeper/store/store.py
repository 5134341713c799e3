"""``StateStore``: durable agent state as event streams plus snapshots.

An agent's state is its FSM state plus a JSON data document. Every change is an event
appended to the agent's stream with a gap-free ``seq``; data changes are stored as
JSON Patch diffs. Every ``snapshot_every`` events the folded state is stored as a
snapshot in the same atomic write, so loading is *latest snapshot + the events after
it*, whatever the length of the stream.

The store owns the codec (every record is checksummed and verified on read), the LRU
cache of folded states, the snapshot policy and the durability mode; the backend only
stores bytes.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from .. import patch
from ..backends.base import Backend, Health
from ..backends.url import open_backend
from ..codec import Codec, find_unserializable
from ..errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    PatchError,
    SerializationError,
    StatekeeperError,
    StoreClosed,
)
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    Event,
    EventKind,
    RawEvent,
    RawSnapshot,
    Snapshot,
)
from .cache import CacheStats, LRUCache
from .durability import Durability, GroupCommitter, WriteBehind, check_durability
from .state import AgentRecord, apply_payload

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from .agent import DurableAgent

__all__ = ["DEFAULT_URL", "Problem", "StateStore", "StoreStats", "VerifyReport"]

#: where a store with no URL keeps its data (override with ``STATEKEEPER_URL``)
DEFAULT_URL = "sqlite:///statekeeper.db"

SNAPSHOT_KIND = "snapshot"
_RESERVED = frozenset({"ops", "fsm", "v", "actor", "key"})
_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Problem:
    """One verification failure found by :meth:`StateStore.verify`."""

    agent_id: str
    seq: int | None
    reason: str


@dataclass(slots=True)
class VerifyReport:
    """What :meth:`StateStore.verify` checked and what it found."""

    agents: int = 0
    events: int = 0
    snapshots: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counters of a :class:`StateStore`."""

    backend: str
    durability: str
    cache: CacheStats
    appends: int
    snapshots_written: int
    loads_from_backend: int
    buffered: int
    commits: int


class StateStore:
    """Durable, verified, cached agent state over any :class:`Backend`.

    Args:
        backend: a :class:`Backend`, a URL (``sqlite:///path.db``, ``memory://``), or
            None for ``$STATEKEEPER_URL`` or else ``sqlite:///statekeeper.db``.
        durability: ``"sync"``, ``"group"`` or ``"async"`` (see
            :mod:`statekeeper.store.durability` for what each guarantees).
        snapshot_every: store a snapshot after this many events since the last one.
        cache_size: how many folded agent states to keep in memory (0 disables).
        validate_cache: before serving a cached state, check the stored head (one
            indexed read) and catch up on events other processes appended. Turn off
            only when this store is the agent's single writer.
        flush_size / flush_interval: write-behind limits for ``async`` durability.
        clock: source of event timestamps (seconds since the epoch).
        codec: how records are encoded and verified.
    """

    def __init__(
        self,
        backend: Backend | str | None = None,
        *,
        durability: Durability | str = "sync",
        snapshot_every: int = 100,
        cache_size: int = 1024,
        validate_cache: bool = True,
        flush_size: int = 100,
        flush_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        codec: Codec | None = None,
        write_retries: int = 8,
    ) -> None:
        # every option is checked before a backend is opened (and a file created)
        if snapshot_every < 1:
            raise ConfigurationError("snapshot_every must be >= 1")
        if cache_size < 0 or write_retries < 0:
            raise ConfigurationError("cache_size and write_retries must be >= 0")
        mode = check_durability(durability)
        if mode == "async" and (flush_size < 1 or flush_interval <= 0):
            raise ConfigurationError("flush_size must be >= 1 and flush_interval > 0")
        if backend is None:
            backend = os.environ.get("STATEKEEPER_URL", DEFAULT_URL)
        self.backend: Backend = open_backend(backend) if isinstance(backend, str) else backend
        self.durability: Durability = mode
        self.snapshot_every = snapshot_every
        self.validate_cache = validate_cache and self.durability != "async"
        self.clock = clock
        self.codec = codec or Codec()
        self.write_retries = write_retries
        self._cache: LRUCache[str, AgentRecord] = LRUCache(cache_size)
        # agents with appends still in the write-behind buffer: pinned, never evicted
        self._unflushed: dict[str, AgentRecord] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._group = GroupCommitter(self.backend) if self.durability == "group" else None
        self._behind = (
            WriteBehind(
                self.backend,
                flush_size=flush_size,
                flush_interval=flush_interval,
                on_stale=self._forget,
                on_flushed=self._settled,
            )
            if self.durability == "async"
            else None
        )
        self._closed = False
        self._appends = 0
        self._snapshots = 0
        self._backend_loads = 0

    # -- lifecycle ---------------------------------------------------------------

    async def __aenter__(self) -> StateStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def flush(self) -> None:
        """Wait until every acknowledged write is durable (a no-op in ``sync`` mode).

        Raises :class:`~statekeeper.errors.WriteBufferError` if buffered writes failed.
        """
        if self._group is not None:
            await self._group.drain()
        if self._behind is not None:
            await self._behind.flush()

    async def close(self) -> None:
        """Flush, then release the backend. Idempotent."""
        if self._closed:
            return
        try:
            await self.flush()
        finally:
            self._closed = True
            if self._behind is not None:
                self._behind.cancel_timer()
            await self.backend.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    def _lock(self, agent_id: str) -> asyncio.Lock:
        lock = self._locks.get(agent_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[agent_id] = lock
        return lock

    def _settled(self, agent_id: str, seq: int) -> None:
        """A buffered append reached the backend: unpin the agent once all of it has."""
        pinned = self._unflushed.get(agent_id)
        if pinned is not None and pinned.seq <= seq:
            del self._unflushed[agent_id]

    def _forget(self, agent_id: str) -> None:
        self._cache.discard(agent_id)
        self._unflushed.pop(agent_id, None)

    # -- decoding ----------------------------------------------------------------

    def _decode_event(self, agent_id: str, raw: RawEvent) -> dict[str, Any]:
        body = self.codec.decode(agent_id, raw.seq, raw.kind, raw.payload, raw.checksum)
        if type(body) is not dict:
            raise IntegrityError(agent_id, raw.seq, "event payload is not an object")
        return body

    def _decode_snapshot(self, agent_id: str, raw: RawSnapshot) -> AgentRecord:
        body = self.codec.decode(agent_id, raw.seq, SNAPSHOT_KIND, raw.payload, raw.checksum)
        try:
            return AgentRecord(
                agent_id=agent_id,
                seq=raw.seq,
                fsm_state=body["fsm"],
                data=body["data"],
                schema_version=body["v"],
                created_at=body["created_at"],
                updated_at=body["updated_at"],
                snapshot_seq=raw.seq,
                fsm_entered_at=body.get("entered", body["updated_at"]),
            )
        except (KeyError, TypeError) as exc:
            raise IntegrityError(agent_id, raw.seq, f"snapshot is missing {exc}") from exc

    def _to_event(self, agent_id: str, raw: RawEvent, body: dict[str, Any]) -> Event:
        return Event(
            agent_id=agent_id,
            seq=raw.seq,
            type=raw.kind,
            timestamp=raw.timestamp,
            data={k: v for k, v in body.items() if k not in _RESERVED},
            ops=body.get("ops") or [],
            fsm_state=body.get("fsm"),
            schema_version=body.get("v", 1),
            actor=body.get("actor"),
            idempotency_key=body.get("key"),
        )

    # -- reading -----------------------------------------------------------------

    async def _fold(self, agent_id: str, head: int, target: int) -> AgentRecord:
        """Build the state at ``target`` from the nearest snapshot and the events after."""
        self._backend_loads += 1
        snap = await self.backend.latest_snapshot(agent_id, target)
        if snap is not None:
            record = self._decode_snapshot(agent_id, snap)
        else:
            record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0)
        await self._catch_up(record, target)
        if record.seq == 0:
            raise AgentNotFound(agent_id)
        return record

    async def _catch_up(self, record: AgentRecord, target: int) -> None:
        """Apply stored events ``record.seq+1 .. target`` to ``record`` in place."""
        agent_id = record.agent_id
        while record.seq < target:
            events = await self.backend.read(agent_id, record.seq, target, limit=_PAGE * 10)
            if not events:
                raise IntegrityError(
                    agent_id, record.seq + 1, f"stream ends at seq {record.seq}, head is {target}"
                )
            self._apply_events(record, events)

    def _apply_events(self, record: AgentRecord, events: list[RawEvent]) -> None:
        """Fold stored events into ``record`` in place (verifying each one)."""
        agent_id = record.agent_id
        for raw in events:
            if raw.seq <= record.seq:
                # a concurrent catch-up of the same cached record (readers do not
                # take the agent lock) applied it while this read was in flight
                continue
            if raw.seq != record.seq + 1:
                raise IntegrityError(agent_id, record.seq + 1, f"gap: next stored seq is {raw.seq}")
            body = self._decode_event(agent_id, raw)
            if record.seq == 0:
                record.created_at = raw.timestamp
            try:
                apply_payload(record, raw.seq, raw.timestamp, body)
            except PatchError as exc:
                raise IntegrityError(agent_id, raw.seq, f"patch does not apply: {exc}") from exc

    async def _refresh(self, record: AgentRecord) -> bool:
        """Bring a cached record up to date with storage, in one indexed read when
        nothing changed. False when the stream it was folded from is gone: deleted, or
        deleted and re-created (a head seq alone cannot tell that a stream was re-created
        up to the same seq, so the event at the cached seq must still be the same one)."""
        agent_id = record.agent_id
        events = await self.backend.read(agent_id, record.seq - 1, None, limit=_PAGE)
        same = next((e for e in events if e.seq == record.seq), None)
        if same is None or same.timestamp != record.updated_at:
            return False
        while True:
            self._apply_events(record, events)
            if len(events) < _PAGE:
                return True
            events = await self.backend.read(agent_id, record.seq, None, limit=_PAGE)

    async def _current(self, agent_id: str) -> AgentRecord | None:
        """The latest folded state (private), or None when the agent does not exist."""
        pinned = self._unflushed.get(agent_id)
        if pinned is not None:
            return pinned
        record = self._cache.get(agent_id)
        if record is not None and not self.validate_cache:
            return record
        if record is not None:
            try:
                if await self._refresh(record):
                    return record
            except StatekeeperError:
                self._cache.discard(agent_id)
                raise
            self._cache.discard(agent_id)
        head = await self.backend.head(agent_id)
        if head == 0:
            return None
        record = await self._fold(agent_id, head, head)
        self._cache.put(agent_id, record)
        return record

    def _public(self, record: AgentRecord) -> Snapshot:
        if record.blob is None:
            record.blob = orjson.dumps(record.data)
        return Snapshot(
            agent_id=record.agent_id,
            seq=record.seq,
            fsm_state=record.fsm_state,
            data=orjson.loads(record.blob),
            schema_version=record.schema_version,
            created_at=record.created_at,
            updated_at=record.updated_at,
            state_entered_at=record.fsm_entered_at,
        )

    async def get(self, agent_id: str) -> Snapshot | None:
        """The agent's latest state, or None if it has no stream."""
        self._check_open()
        record = await self._current(agent_id)
        return self._public(record) if record is not None else None

    async def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> Snapshot:
        """The agent's state: latest, or as it was at ``at_seq`` / at time ``at_time``.

        Raises :class:`AgentNotFound` when the agent has no stream (or had none yet at
        ``at_time``), and :class:`IntegrityError` when a record fails verification.
        """
        self._check_open()
        if at_seq is None and at_time is None:
            record = await self._current(agent_id)
            if record is None:
                raise AgentNotFound(agent_id)
            return self._public(record)
        if at_seq is not None and at_time is not None:
            raise ConfigurationError("give at_seq or at_time, not both")
        await self._flush_agent(agent_id)
        head = await self.backend.head(agent_id)
        if head == 0:
            raise AgentNotFound(agent_id)
        if at_time is not None:
            at_seq = await self.backend.seq_at(agent_id, at_time)
            if at_seq == 0:
                raise AgentNotFound(agent_id)
        assert at_seq is not None
        if not 1 <= at_seq <= head:
            raise ConfigurationError(f"seq {at_seq} is outside 1..{head} for agent {agent_id!r}")
        return self._public(await self._fold(agent_id, head, at_seq))

    async def head(self, agent_id: str) -> int:
        """The agent's last seq (0 if it has no stream), counting buffered writes."""
        self._check_open()
        pinned = self._unflushed.get(agent_id)
        return pinned.seq if pinned is not None else await self.backend.head(agent_id)

    async def history(
        self, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]:
        """Every event of the agent in order, verified, read page by page."""
        self._check_open()
        await self._flush_agent(agent_id)
        cursor = after_seq
        while True:
            page = await self.backend.read(agent_id, cursor, to_seq, limit=_PAGE)
            for raw in page:
                if raw.seq != cursor + 1:
                    raise IntegrityError(agent_id, cursor + 1, f"gap: next stored seq is {raw.seq}")
                yield self._to_event(agent_id, raw, self._decode_event(agent_id, raw))
                cursor = raw.seq
            if len(page) < _PAGE:
                return

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One page of agents ordered by id (use ``after`` = last id for the next page)."""
        self._check_open()
        await self.flush()
        return await self.backend.list_agents(after=after, limit=limit)

    async def iter_agents(self) -> AsyncIterator[AgentInfo]:
        """Every agent, in id order, paging under the hood."""
        after: str | None = None
        while True:
            page = await self.list_agents(after=after, limit=_PAGE)
            for info in page:
                yield info
            if len(page) < _PAGE:
                return
            after = page[-1].agent_id

    async def count_agents(self) -> int:
        """How many agents have a stream."""
        self._check_open()
        await self.flush()
        return await self.backend.count_agents()

    async def health(self) -> Health:
        """The backend's health report."""
        return await self.backend.health()

    # -- writing -----------------------------------------------------------------

    async def create(
        self,
        agent_id: str,
        data: Mapping[str, Any] | None = None,
        *,
        fsm_state: str | None = None,
        schema_version: int = 1,
        idempotency_key: str | None = None,
        actor: str | None = None,
    ) -> AppendResult:
        """Start an agent's stream with a ``created`` event. ConflictError if it exists."""
        document = dict(data) if data is not None else {}
        try:
            return await self._write(
                agent_id,
                EventKind.CREATED,
                {},
                expected_seq=0,
                make=lambda rec: ([{"op": "replace", "path": "", "value": document}], fsm_state),
                schema_version=schema_version,
                idempotency_key=idempotency_key,
                actor=actor,
            )
        except SerializationError as exc:
            raise _locate(exc, data=document) from exc

    async def save(
        self,
        agent_id: str,
        data: Mapping[str, Any],
        *,
        fsm_state: str | None = None,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
        event_type: str = EventKind.PATCH,
        actor: str | None = None,
        info: Mapping[str, Any] | None = None,
        schema_version: int | None = None,
    ) -> AppendResult:
        """Make ``data`` (and ``fsm_state`` when given) the agent's state.

        Only the difference from the stored state is written (a JSON Patch). The agent
        is created if it has no stream. With ``expected_seq`` the write happens only
        if the head is still that seq (else :class:`ConflictError`); without it the
        diff is taken against the latest state (last writer wins, nothing is lost
        from the stream's history).
        """
        document = data
        body = _info(info)

        def make(rec: AgentRecord | None) -> tuple[list[dict[str, Any]], str | None]:
            if rec is None:
                return [{"op": "replace", "path": "", "value": document}], fsm_state
            fsm = fsm_state if fsm_state != rec.fsm_state else None
            return patch.diff(rec.data, document), fsm

        try:
            return await self._write(
                agent_id,
                event_type,
                body,
                expected_seq=expected_seq,
                make=make,
                idempotency_key=idempotency_key,
                actor=actor,
                create_kind=EventKind.CREATED,
                schema_version=schema_version,
            )
        except SerializationError as exc:
            raise _locate(exc, data=document, info=body) from exc

    async def append(
        self,
        agent_id: str,
        event_type: str,
        info: Mapping[str, Any] | None = None,
        *,
        ops: list[dict[str, Any]] | None = None,
        fsm_state: str | None = None,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
        actor: str | None = None,
        schema_version: int | None = None,
    ) -> AppendResult:
        """Append one event: ``info`` is recorded as is; ``ops`` (JSON Patch) and
        ``fsm_state`` change the state. The agent must exist (see :meth:`create`).

        Without ``expected_seq``, ops are applied to the latest state; if they no
        longer apply after a concurrent write, :class:`ConflictError` is raised.
        """
        body = _info(info)
        op_list = list(ops or [])

        def make(rec: AgentRecord | None) -> tuple[list[dict[str, Any]], str | None]:
            if rec is None:
                raise AgentNotFound(agent_id)
            return op_list, fsm_state

        try:
            return await self._write(
                agent_id,
                event_type,
                body,
                expected_seq=expected_seq,
                make=make,
                idempotency_key=idempotency_key,
                actor=actor,
                schema_version=schema_version,
            )
        except SerializationError as exc:
            raise _locate(exc, info=body, ops=op_list) from exc

    async def _write(
        self,
        agent_id: str,
        kind: str,
        body: dict[str, Any],
        *,
        expected_seq: int | None,
        make: Callable[[AgentRecord | None], tuple[list[dict[str, Any]], str | None]],
        idempotency_key: str | None = None,
        actor: str | None = None,
        schema_version: int | None = None,
        create_kind: str | None = None,
    ) -> AppendResult:
        self._check_open()
        if not isinstance(agent_id, str) or not agent_id:
            raise ConfigurationError("agent_id must be a non-empty string")
        if not isinstance(kind, str) or not kind or kind == SNAPSHOT_KIND:
            raise ConfigurationError(f"invalid event type {kind!r}")
        async with self._lock(agent_id):
            for attempt in range(self.write_retries + 1):
                record = await self._current(agent_id)
                base = record.seq if record is not None else 0
                if idempotency_key is not None and (
                    self._behind is not None or (expected_seq is not None and expected_seq != base)
                ):
                    # a retry of an append that landed? (the backend checks keys itself
                    # on append, but not before a conflict, nor a write-behind buffer)
                    earlier = await self._earlier_append(agent_id, idempotency_key)
                    if earlier is not None:
                        return earlier
                if expected_seq is not None and expected_seq != base:
                    raise ConflictError(agent_id, expected_seq, base)
                ops, fsm = make(record)
                event_kind = create_kind if (record is None and create_kind) else kind
                request, new_record = self._build(
                    agent_id,
                    event_kind,
                    body,
                    record,
                    ops,
                    fsm,
                    idempotency_key,
                    actor,
                    schema_version,
                )
                if self._behind is not None:
                    self._unflushed[agent_id] = new_record
                    self._cache.put(agent_id, new_record)
                    self._appends += 1
                    await self._behind.add(request)  # waits when the buffer is full
                    return AppendResult(agent_id, base + 1, base + 1)
                try:
                    result = await self._submit(request)
                except ConflictError:
                    self._cache.discard(agent_id)
                    if expected_seq is not None or attempt == self.write_retries:
                        raise
                    continue
                except BaseException:
                    self._cache.discard(agent_id)
                    raise
                self._appends += 1
                if result.duplicate:
                    self._cache.discard(agent_id)
                else:
                    if request.snapshot is not None:
                        self._snapshots += 1
                    self._cache.put(agent_id, new_record)
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _build(
        self,
        agent_id: str,
        kind: str,
        body: dict[str, Any],
        record: AgentRecord | None,
        ops: list[dict[str, Any]],
        fsm: str | None,
        idempotency_key: str | None,
        actor: str | None,
        schema_version: int | None,
    ) -> tuple[AppendRequest, AgentRecord]:
        """Encode one event (and a snapshot when due); compute the state after it."""
        base = record.seq if record is not None else 0
        seq = base + 1
        now = self.clock()
        payload = dict(body)
        if ops:
            payload["ops"] = ops
        if fsm is not None:
            payload["fsm"] = fsm
        if schema_version is not None:
            payload["v"] = schema_version
        if actor is not None:
            payload["actor"] = actor
        if idempotency_key is not None:
            payload["key"] = idempotency_key
        plaintext = self.codec.serialize(payload, "event")
        stored, tag = self.codec.seal(agent_id, seq, kind, plaintext)
        raw = RawEvent(seq, kind, now, stored, tag)
        # The state after the event, built from the serialized bytes so that it shares
        # nothing with the caller's objects. Copy-on-write: ``record`` stays untouched
        # until the append is acknowledged.
        if record is None:
            new = AgentRecord(agent_id, 0, None, {}, 1, now, now)
        else:
            new = AgentRecord(
                agent_id,
                record.seq,
                record.fsm_state,
                record.data,
                record.schema_version,
                record.created_at,
                record.updated_at,
                record.snapshot_seq,
                record.fsm_entered_at,
                record.blob,
            )
        decoded = orjson.loads(plaintext)
        if decoded.get("ops"):
            new.data = patch.apply(new.data, decoded["ops"])
            new.blob = None
        if fsm is not None:
            new.fsm_state = fsm
            new.fsm_entered_at = now
        if schema_version is not None:
            new.schema_version = schema_version
        new.seq = seq
        new.updated_at = now
        snapshot = None
        if seq - new.snapshot_seq >= self.snapshot_every:
            snapshot = self._encode_snapshot(new)
            new.snapshot_seq = seq
        request = AppendRequest(agent_id, base, (raw,), snapshot, idempotency_key)
        return request, new

    def _encode_snapshot(self, record: AgentRecord) -> RawSnapshot:
        body = {
            "fsm": record.fsm_state,
            "data": record.data,
            "v": record.schema_version,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "entered": record.fsm_entered_at,
        }
        stored, tag = self.codec.encode(record.agent_id, record.seq, SNAPSHOT_KIND, body, "state")
        return RawSnapshot(record.seq, record.updated_at, stored, tag)

    async def _submit(self, request: AppendRequest) -> AppendResult:
        if self._group is not None:
            return await self._group.submit(request)
        return await self.backend.append(request)

    async def _earlier_append(self, agent_id: str, key: str) -> AppendResult | None:
        """The append of ``agent_id`` that used idempotency ``key`` (buffered or stored)."""
        if self._behind is not None:
            buffered = self._behind.find_key(agent_id, key)
            if buffered is not None:
                return buffered
        return await self.backend.lookup_key(agent_id, key)

    async def _flush_agent(self, agent_id: str) -> None:
        if agent_id in self._unflushed:
            await self.flush()

    async def snapshot(self, agent_id: str) -> int:
        """Store a snapshot of the latest state now; returns its seq."""
        self._check_open()
        await self._flush_agent(agent_id)
        async with self._lock(agent_id):
            record = await self._current(agent_id)
            if record is None:
                raise AgentNotFound(agent_id)
            await self.backend.save_snapshot(agent_id, self._encode_snapshot(record))
            record.snapshot_seq = record.seq
            self._snapshots += 1
            return record.seq

    async def delete(self, agent_id: str) -> bool:
        """Delete the agent's stream and snapshots. True if it existed."""
        self._check_open()
        await self._flush_agent(agent_id)
        async with self._lock(agent_id):
            self._forget(agent_id)
            return await self.backend.delete_agent(agent_id)

    # -- agents with a state machine ----------------------------------------------

    async def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        initial_data: Mapping[str, Any] | None = None,
    ) -> DurableAgent:
        """Load the agent (or create it with ``initial_data``) bound to ``machine``."""
        from .agent import DurableAgent

        return await DurableAgent.open(self, agent_id, machine, initial_data)

    # -- verification --------------------------------------------------------------

    async def verify(self, agent_ids: list[str] | None = None) -> VerifyReport:
        """Check every stored record: checksums, gap-free seqs, the head, and that
        every snapshot equals the fold of the events before it."""
        self._check_open()
        await self.flush()
        report = VerifyReport()
        if agent_ids is None:
            agent_ids = [info.agent_id async for info in self.iter_agents()]
        for agent_id in agent_ids:
            report.agents += 1
            try:
                await self._verify_agent(agent_id, report)
            except StatekeeperError as exc:
                report.problems.append(Problem(agent_id, getattr(exc, "seq", None), str(exc)))
        return report

    async def _verify_agent(self, agent_id: str, report: VerifyReport) -> None:
        head = await self.backend.head(agent_id)
        snapshots: dict[int, AgentRecord] = {}
        below: int | None = None
        while True:
            raw = await self.backend.latest_snapshot(agent_id, below)
            if raw is None:
                break
            report.snapshots += 1
            try:
                snapshots[raw.seq] = self._decode_snapshot(agent_id, raw)
            except IntegrityError as exc:
                report.problems.append(Problem(agent_id, raw.seq, str(exc)))
            if raw.seq <= 1:
                break
            below = raw.seq - 1
        record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0)
        broken = False
        async for event in self._verified_events(agent_id, report):
            if event is None:
                broken = True
                break
            seq, ts, body = event
            if record.seq == 0:
                record.created_at = ts
            try:
                apply_payload(record, seq, ts, body)
            except PatchError as exc:
                report.problems.append(Problem(agent_id, seq, f"patch does not apply: {exc}"))
                broken = True
                break
            snap = snapshots.pop(seq, None)
            if snap is not None and (
                not patch._same_json(snap.data, record.data)  # strict: True, 1 and 1.0 differ
                or snap.fsm_state != record.fsm_state
            ):
                report.problems.append(
                    Problem(agent_id, seq, "snapshot differs from the replay of the events")
                )
        if not broken and record.seq != head:
            report.problems.append(
                Problem(
                    agent_id, record.seq + 1, f"stream ends at seq {record.seq}, head is {head}"
                )
            )
        if not broken:
            for seq in sorted(snapshots):  # no event to check them against
                report.problems.append(
                    Problem(agent_id, seq, f"snapshot at seq {seq} is past the stream's end")
                )

    async def _verified_events(
        self, agent_id: str, report: VerifyReport
    ) -> AsyncIterator[tuple[int, float, dict[str, Any]] | None]:
        cursor = 0
        while True:
            page = await self.backend.read(agent_id, cursor, None, limit=_PAGE)
            for raw in page:
                if raw.seq != cursor + 1:
                    report.problems.append(
                        Problem(agent_id, cursor + 1, f"gap: next stored seq is {raw.seq}")
                    )
                    yield None
                    return
                report.events += 1
                try:
                    body = self._decode_event(agent_id, raw)
                except IntegrityError as exc:
                    report.problems.append(Problem(agent_id, raw.seq, str(exc)))
                    yield None
                    return
                yield raw.seq, raw.timestamp, body
                cursor = raw.seq
            if len(page) < _PAGE:
                return

    # -- introspection -------------------------------------------------------------

    def stats(self) -> StoreStats:
        """Counters: cache hits/misses/evictions, appends, snapshots, buffered writes."""
        return StoreStats(
            backend=self.backend.name,
            durability=self.durability,
            cache=self._cache.stats(),
            appends=self._appends,
            snapshots_written=self._snapshots,
            loads_from_backend=self._backend_loads,
            buffered=len(self._behind) if self._behind is not None else 0,
            commits=self._group.commits if self._group is not None else self._appends,
        )


def _info(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """The caller's event information, refused if it would shadow what the store writes."""
    body = dict(info or {})
    bad = _RESERVED.intersection(body)
    if bad:
        raise ConfigurationError(f"event info may not use reserved keys {sorted(bad)}")
    return body


def _locate(exc: SerializationError, **values: Any) -> SerializationError:
    """Point a serialization error at the caller's own argument (``data.messages[3]``)
    rather than at the encoded event (``event.ops[0].value…``)."""
    for root, value in values.items():
        found = find_unserializable(value, root, text=True)
        if found is not None:
            return SerializationError(f"cannot serialize {found[1]}", found[0])
    return exc
