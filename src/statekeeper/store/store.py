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
import logging
import os
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from .. import patch
from ..arguments import (
    check_agent_id,
    check_mapping,
    check_name,
    check_ops,
    check_optional_name,
    check_seq,
    check_state_value,
    check_timestamp,
)
from ..backends.base import Backend, Health, check_fence
from ..backends.url import open_backend
from ..codec import ZERO_LINK, Codec, Opened, TypeRegistry
from ..codec.formats import JSON
from ..codec.pipeline import CHAIN_BROKEN as _CHAIN_BROKEN
from ..codec.types import to_plain
from ..errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    InvalidArgument,
    NotAStore,
    PatchError,
    RollbackDetected,
    SerializationError,
    StatekeeperError,
    StateTooLarge,
    StoreClosed,
    UnknownState,
    UnsavedChangesWarning,
)
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    Event,
    EventKind,
    Fence,
    RawEvent,
    RawSnapshot,
    Snapshot,
)
from ..security.highwater import DEFAULT_INTERVAL, OPEN_CHECKS, SUFFIX, HighWater, default_location
from . import idempotency, verification
from .body import (
    RESERVED,
    SNAPSHOT_KIND,
    event_body,
    next_record,
    snapshot_body,
    snapshot_record,
    to_event,
)
from .cache import CacheStats, LRUCache
from .change import diff_by_key
from .durability import Durability, GroupCommitter, WriteBehind, check_durability
from .heads import AgentHead, StoredSize, read_head, read_heads, stored_size
from .state import AgentRecord, apply_payload
from .verification import Problem, VerifyReport, _reason

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from ..security.keys import Keyring
    from .agent import DurableAgent

__all__ = [
    "DEFAULT_URL",
    "Leased",
    "Problem",
    "StateStore",
    "StoreStats",
    "StreamDigest",
    "VerifyReport",
]


class Leased(Protocol):
    """What a write can be made under: anything with a ``fence`` — ``(holder, token)``
    — such as :class:`statekeeper.concurrency.Lease` or a
    :class:`~statekeeper.records.LeaseInfo`."""

    @property
    def fence(self) -> Fence:
        """``(holder, token)`` of the lease."""
        ...


_log = logging.getLogger("statekeeper.store")

#: where a store with no URL keeps its data (override with ``STATEKEEPER_URL``)
DEFAULT_URL = "sqlite:///statekeeper.db"

_RESERVED = RESERVED
_PAGE = 1000

#: what storing a snapshot changes in the record it was taken of:
#: (snapshot_seq, full_seq, full_link, full_data, deltas)
_Marks = tuple[int, int, bytes | None, Any, int]


@dataclass(frozen=True, slots=True)
class StreamDigest:
    """A commitment to an agent's stream up to ``seq`` (see :meth:`StateStore.digest`).

    ``digest`` is keyed (HMAC with ``key_id``'s witness key) in a store with a key,
    else a SHA-256; it changes if any record up to ``seq`` changes.
    """

    agent_id: str
    seq: int
    key_id: str | None
    digest: str


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
        snapshot_bytes: ... or once the events since the last one add up to this many
            stored bytes (None: no byte bound), so that a load never replays more than
            ``snapshot_every`` events nor much more than ``snapshot_bytes`` bytes.
        cache_size: how many folded agent states to keep in memory (0 disables).
        validate_cache: before serving a cached state, check the stored head (one
            indexed read) and catch up on events other processes appended. Turn off
            only when this store is the agent's single writer.
        flush_size / flush_interval: write-behind limits for ``async`` durability.
        clock: source of event timestamps (seconds since the epoch).
        codec: how records are encoded and verified (or give the options below, which
            build one: ``keyring``, ``compression``, ``format``, ``types``).
        keyring: encrypt every record at rest (AES-256-GCM) and authenticate every
            stream (see :class:`~statekeeper.security.Keyring` and ``docs/security.md``).
        compression: ``"zstd"`` to compress records of 1 KiB or more.
        format: ``"json"`` (default) or ``"msgpack"`` for new records.
        types: enums, dataclasses and pydantic models the state may hold (a
            :class:`~statekeeper.codec.TypeRegistry` or a list of classes).
        full_snapshot_every: every K-th snapshot is stored whole; the others as a
            JSON Patch against the latest whole one (1: every snapshot whole).
        max_event_bytes / max_snapshot_bytes / max_state_bytes: refuse, with
            :class:`~statekeeper.errors.StateTooLarge` and before anything is written,
            an event, a snapshot or an agent's data document larger than this
            (serialized, uncompressed). None: no limit.
        states: the FSM states ``fsm_state`` may take in this store (state values, Enum
            states, or an Enum class such as ``AgentState``); any other is refused with
            :class:`~statekeeper.errors.InvalidArgument` before anything is written.
            None: any state value, except for an agent opened with :meth:`agent`,
            whose machine's states are then the only ones accepted for it.
        witness: where the store's automatic witness (high-water marks kept outside
            the store, see :mod:`statekeeper.security.highwater`) lives. None (the
            default): ``<database>.sk-witness`` next to a SQLite file, none for other
            engines; a path: that file, for any engine; False: no witness. A store
            that went back in time raises
            :class:`~statekeeper.errors.RollbackDetected` on its first use.
        witness_interval: the longest an acknowledged write waits before its mark is
            written to the witness file (seconds).
    """

    def __init__(
        self,
        backend: Backend | str | None = None,
        *,
        durability: Durability | str = "sync",
        snapshot_every: int = 100,
        snapshot_bytes: int | None = 256 * 1024,
        cache_size: int = 1024,
        validate_cache: bool = True,
        flush_size: int = 100,
        flush_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        codec: Codec | None = None,
        write_retries: int = 8,
        keyring: Keyring | None = None,
        compression: str | None = None,
        format: str = "json",
        types: TypeRegistry | Iterable[type] | None = None,
        full_snapshot_every: int = 1,
        max_event_bytes: int | None = None,
        max_snapshot_bytes: int | None = None,
        max_state_bytes: int | None = None,
        states: Iterable[Any] | None = None,
        witness: str | os.PathLike[str] | bool | None = None,
        witness_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        # every option is checked before a backend is opened (and a file created)
        allowed = _state_values(states)
        _check_numbers(
            snapshot_every=snapshot_every,
            full_snapshot_every=full_snapshot_every,
            cache_size=cache_size,
            write_retries=write_retries,
            flush_size=flush_size,
            max_event_bytes=max_event_bytes,
            max_snapshot_bytes=max_snapshot_bytes,
            max_state_bytes=max_state_bytes,
            snapshot_bytes=snapshot_bytes,
        )
        if type(flush_interval) is bool or not isinstance(flush_interval, int | float):
            raise InvalidArgument("flush_interval", "flush_interval must be a number of seconds")
        if not callable(clock):
            raise InvalidArgument("clock", f"clock must be callable, not {type(clock).__name__}")
        if backend is not None and not isinstance(backend, Backend | str):
            raise InvalidArgument(
                "backend", f"backend must be a URL or a Backend, not {type(backend).__name__}"
            )
        if snapshot_every < 1:
            raise ConfigurationError("snapshot_every must be >= 1")
        if full_snapshot_every < 1:
            raise ConfigurationError("full_snapshot_every must be >= 1")
        if snapshot_bytes is not None and snapshot_bytes < 1:
            raise ConfigurationError("snapshot_bytes must be >= 1 (or None)")
        for limit in (max_event_bytes, max_snapshot_bytes, max_state_bytes):
            if limit is not None and limit < 1:
                raise ConfigurationError("size limits must be >= 1 (or None)")
        if codec is not None and (
            keyring is not None or compression is not None or format != "json" or types
        ):
            raise ConfigurationError("give codec= or the codec options, not both")
        if codec is None:
            codec = Codec(keyring=keyring, compression=compression, format=format, types=types)
        if cache_size < 0 or write_retries < 0:
            raise ConfigurationError("cache_size and write_retries must be >= 0")
        mode = check_durability(durability)
        if mode == "async" and (flush_size < 1 or flush_interval <= 0):
            raise ConfigurationError("flush_size must be >= 1 and flush_interval > 0")
        if not isinstance(witness, str | os.PathLike | bool | None):
            raise InvalidArgument(
                "witness", f"witness must be a path, True, False or None, not {witness!r}"
            )
        if isinstance(witness_interval, bool) or not (
            isinstance(witness_interval, int | float) and 0 < witness_interval < float("inf")
        ):
            raise InvalidArgument(
                "witness_interval", "witness_interval must be a positive number of seconds"
            )
        if backend is None:
            backend = os.environ.get("STATEKEEPER_URL", DEFAULT_URL)
        try:
            self.backend: Backend = open_backend(backend) if isinstance(backend, str) else backend
        except NotAStore as exc:
            raise _vanished(exc, witness, codec) from exc
        location: str | os.PathLike[str] | None = None
        if witness is None or witness is True:
            location = default_location(self.backend)
            if location is None and witness is True:
                raise ConfigurationError(
                    f"the {self.backend.name} backend has no default witness location:"
                    " give witness=PATH"
                )
        elif witness is not False:
            location = witness
        self._witness = (
            HighWater(location, codec, interval=witness_interval) if location is not None else None
        )
        # False until the witness was checked (on first use): see _open_check
        self._witness_ok = self._witness is None
        self._witness_error: StatekeeperError | None = None
        self._witness_lock: asyncio.Lock | None = None
        # links of appends still in the write-behind buffer, for their marks
        self._buffered_links: dict[str, dict[int, bytes]] = {}
        self.durability: Durability = mode
        self.snapshot_every = snapshot_every
        self.snapshot_bytes = snapshot_bytes
        self.validate_cache = validate_cache and self.durability != "async"
        self.clock = clock
        self.codec = codec
        self.write_retries = write_retries
        self.full_snapshot_every = full_snapshot_every
        self.max_event_bytes = max_event_bytes
        self.max_snapshot_bytes = max_snapshot_bytes
        self.max_state_bytes = max_state_bytes
        self._cache: LRUCache[str, AgentRecord] = LRUCache(cache_size)
        # agents with appends still in the write-behind buffer: pinned, never evicted
        self._unflushed: dict[str, AgentRecord] = {}
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._group = GroupCommitter(self.backend) if self.durability == "group" else None
        # writes trust the cache (see _write) where the backend's compare-and-set can
        # tell a re-created stream from the cached one
        self._trust_cache = self.backend.compares_head_tag and self.durability != "async"
        # loads of the latest state read it in one call where the engine answers that
        # natively (the default, two unbounded reads, gains nothing over the bounded
        # latest_snapshot + read of the fold, and a tiered engine may answer the
        # unbounded read from a hot copy that is behind)
        self._read_latest = type(self.backend).read_latest is not Backend.read_latest
        self._behind = (
            WriteBehind(
                self.backend,
                flush_size=flush_size,
                flush_interval=flush_interval,
                on_stale=self._forget,
                on_flushed=self._settled,
                confirm=self._confirm_request,
            )
            if self.durability == "async"
            else None
        )
        self._states = allowed
        # durable agents handed out (for the unsaved-changes warning on close) and, per
        # agent id, the machine of the latest one (its states are the valid fsm_states)
        self._agents: weakref.WeakSet[DurableAgent] = weakref.WeakSet()
        self._machines: weakref.WeakValueDictionary[str, AgentStateMachine[Any, Any]] = (
            weakref.WeakValueDictionary()
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
        """Flush, then release the backend. Idempotent.

        Warns with :class:`~statekeeper.errors.UnsavedChangesWarning` when a durable
        agent this store opened has changes to its ``data`` that were never written
        (they are not written now either: only the agent knows whether they are ready).
        """
        if self._closed:
            return
        unsaved = self._unsaved_agents()
        if unsaved:
            warnings.warn(UnsavedChangesWarning(unsaved), stacklevel=2)
        try:
            await self.flush()
        finally:
            self._closed = True
            if self._behind is not None:
                self._behind.cancel_timer()
            try:
                if self._witness is not None:
                    await self._witness.close()
            finally:
                await self.backend.close()

    def _unsaved_agents(self) -> list[str]:
        """Ids of the live durable agents of this store with unwritten data changes."""
        found: set[str] = set()
        for agent in list(self._agents):
            try:
                dirty = agent.dirty
            except StatekeeperError:  # data that cannot even be diffed: not written
                dirty = True
            if dirty:
                found.add(agent.agent_id)
        return sorted(found)

    def _adopt_agent(self, agent: DurableAgent) -> None:
        """Remember an agent this store opened (see :meth:`close` and :meth:`_state`)."""
        self._agents.add(agent)
        self._machines[agent.agent_id] = agent.machine

    def _state(self, agent_id: str, fsm_state: object) -> str | None:
        """``fsm_state`` as stored, if it is a state the agent may take."""
        value = check_state_value(fsm_state)
        if value is None:
            return None
        if self._states is not None and value not in self._states:
            known = ", ".join(sorted(self._states))
            raise InvalidArgument(
                "fsm_state", f"fsm_state {value!r} is not one of this store's states ({known})"
            )
        machine = self._machines.get(agent_id)
        if machine is not None:
            try:
                machine.state_for(value)
            except UnknownState as exc:
                raise InvalidArgument(
                    "fsm_state", f"fsm_state of agent {agent_id!r}: {exc}"
                ) from None
        return value

    def __repr__(self) -> str:
        # the backend's repr masks credentials
        return f"StateStore({self.backend!r}, durability={self.durability!r})"

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
        links = self._buffered_links.get(agent_id)
        if links is not None and self._witness is not None:
            link = links.pop(seq, None)
            for older in [s for s in links if s < seq]:
                del links[older]
            if not links:
                del self._buffered_links[agent_id]
            if link is not None:
                self._witness.acked(agent_id, seq, link)

    def _forget(self, agent_id: str) -> None:
        self._cache.discard(agent_id)
        self._unflushed.pop(agent_id, None)

    # -- the witness ---------------------------------------------------------------

    @property
    def witness(self) -> HighWater | None:
        """The store's automatic witness (None when it has none)."""
        return self._witness

    async def _open_check(self) -> None:
        """On first use: load the witness file and check its newest marks. A store that
        went back in time raises :class:`RollbackDetected` now and on every later use
        (``verify`` still runs and reports it)."""
        if self._witness_lock is None:
            self._witness_lock = asyncio.Lock()
        async with self._witness_lock:
            if self._witness_ok:
                return
            if self._witness_error is None:
                witness = self._witness
                assert witness is not None
                try:
                    await asyncio.to_thread(witness.load)
                    found = await witness.check(self, OPEN_CHECKS)
                except IntegrityError as exc:
                    self._witness_error = exc
                else:
                    if not found:
                        self._witness_ok = True
                        return
                    self._witness_error = found[0]
            raise _again(self._witness_error)

    async def witness_problems(self, agent_ids: list[str] | None = None) -> list[Problem]:
        """Check every mark of the store's witness (only those of ``agent_ids`` when
        given) without raising: one :class:`Problem` per stream that went back in time
        (or for a witness file that cannot be used). Empty without a witness."""
        self._check_open()
        if self._witness is None:
            return []
        try:
            await asyncio.to_thread(self._witness.load)
            found = await self._witness.check(self, agents=agent_ids)
        except IntegrityError as exc:
            return [Problem(exc.agent_id, exc.seq, str(exc), "rollback")]
        return [Problem(p.agent_id, p.seq, str(p), "rollback") for p in found]

    # -- decoding ----------------------------------------------------------------

    def _open_event(self, agent_id: str, raw: RawEvent) -> tuple[dict[str, Any], Opened]:
        body, opened = self.codec.decode(
            agent_id, raw.seq, raw.kind, raw.timestamp, raw.payload, raw.checksum
        )
        if type(body) is not dict:
            raise IntegrityError(agent_id, raw.seq, "event payload is not an object")
        return body, opened

    def _decode_event(self, agent_id: str, raw: RawEvent) -> dict[str, Any]:
        return self._open_event(agent_id, raw)[0]

    def _open_snapshot(self, agent_id: str, raw: RawSnapshot) -> tuple[dict[str, Any], Opened]:
        body, opened = self.codec.decode(
            agent_id, raw.seq, SNAPSHOT_KIND, raw.timestamp, raw.payload, raw.checksum
        )
        if type(body) is not dict:
            raise IntegrityError(agent_id, raw.seq, "snapshot payload is not an object")
        return body, opened

    async def _decode_snapshot(self, agent_id: str, raw: RawSnapshot) -> AgentRecord:
        body, opened = self._open_snapshot(agent_id, raw)
        data = await self._snapshot_data(agent_id, raw.seq, body)
        record = self._snapshot_record(agent_id, raw, body, opened, data)
        record.rich = _rich(opened) or "base" in body  # (a delta's base may be rich)
        return record

    def _snapshot_record(
        self, agent_id: str, raw: RawSnapshot, body: dict[str, Any], opened: Opened, data: Any
    ) -> AgentRecord:
        return snapshot_record(agent_id, raw, body, opened, data)

    async def _snapshot_data(
        self, agent_id: str, seq: int, body: dict[str, Any], depth: int = 0
    ) -> Any:
        """The data document of a snapshot body, resolving a delta against its base."""
        if "base" not in body:
            if "data" not in body:
                raise IntegrityError(agent_id, seq, "snapshot is missing 'data'")
            return body["data"]
        base, link, ops = body.get("base"), body.get("bl"), body.get("ops")
        if type(base) is not int or not 0 < base < seq or type(ops) is not list or depth > 64:
            raise IntegrityError(agent_id, seq, "delta snapshot has an invalid base")
        raw = await self.backend.latest_snapshot(agent_id, base)
        if raw is None or raw.seq != base:
            raise IntegrityError(agent_id, seq, f"the base snapshot (seq {base}) is missing")
        base_body, opened = self._open_snapshot(agent_id, raw)
        if opened.prev is None or opened.prev.hex() != link:
            raise IntegrityError(
                agent_id, seq, f"delta snapshot does not match its base snapshot (seq {base})"
            )
        data = await self._snapshot_data(agent_id, base, base_body, depth + 1)
        try:
            return patch.apply(data, ops, in_place=True)
        except PatchError as exc:
            raise IntegrityError(agent_id, seq, f"delta snapshot does not apply: {exc}") from exc

    def _to_event(self, agent_id: str, raw: RawEvent, body: dict[str, Any]) -> Event:
        return to_event(agent_id, raw, body)

    # -- reading -----------------------------------------------------------------

    async def _fold(
        self,
        agent_id: str,
        head: int,
        target: int,
        tag: bytes | None = None,
        *,
        at_head: bool = False,
    ) -> AgentRecord:
        """Build the state at ``target`` from the nearest snapshot and the events after,
        verifying every record and the chain; with ``at_head`` (``target`` is the head)
        also the stream's head ``tag``."""
        self._backend_loads += 1
        below: int | None = target
        # the latest state: the latest snapshot and the events after it, read together
        latest: tuple[RawSnapshot | None, list[RawEvent]] | None = None
        if at_head and self._read_latest:
            latest = await self.backend.read_latest(agent_id)
            if latest[0] is not None and latest[0].seq > target:  # written since: look below
                latest = None
        while True:
            events: list[RawEvent] | None = None
            if latest is not None:
                (snap, events), latest = latest, None
            else:
                snap = await self.backend.latest_snapshot(agent_id, below) if below else None
            if snap is None:  # no (usable) snapshot: a full replay
                return await self._fold_from(None, agent_id, head, target, tag, at_head, events)
            try:
                record = await self._decode_snapshot(agent_id, snap)
            except (IntegrityError, SerializationError) as exc:
                # a damaged snapshot is only a cache of the fold: try an older one
                _log.warning(
                    "agent %r: snapshot at seq %d is unusable (%s); loading from an older"
                    " snapshot or a full replay (`statekeeper repair` rebuilds it)",
                    agent_id,
                    snap.seq,
                    _reason(exc),
                )
                below = snap.seq - 1
                continue
            try:
                return await self._fold_from(record, agent_id, head, target, tag, at_head, events)
            except (IntegrityError, SerializationError) as exc:
                # the snapshot decoded but disagrees with the events after it (or with
                # the head): the events decide — replay them all; if they are at fault,
                # the replay raises the same error
                _log.warning(
                    "agent %r: the events after the snapshot at seq %d do not fold (%s);"
                    " retrying with a full replay",
                    agent_id,
                    snap.seq,
                    _reason(exc),
                )
                return await self._fold_from(None, agent_id, head, target, tag, at_head)

    async def _fold_from(
        self,
        record: AgentRecord | None,
        agent_id: str,
        head: int,
        target: int,
        tag: bytes | None,
        at_head: bool,
        events: list[RawEvent] | None = None,
    ) -> AgentRecord:
        """Fold events up to ``target`` onto ``record`` (None: from the start), starting
        with ``events`` when they were read already (those past ``target`` ignored)."""
        if record is None:
            record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0, link=ZERO_LINK)
        if events:
            if events[-1].seq > target:
                events = [e for e in events if e.seq <= target]
            self._apply_events(record, events)
        await self._catch_up(record, target)
        if record.seq == 0:
            raise AgentNotFound(agent_id)
        if at_head:
            self.codec.check_head(agent_id, head, record.link, tag)
            record.tag, record.tag_known = tag, record.link is not None
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
        """Fold stored events into ``record`` in place (verifying each one and the chain)."""
        agent_id = record.agent_id
        decode = self.codec.decode_next
        for raw in events:
            seq = raw.seq
            current = record.seq
            if seq <= current:
                # a concurrent catch-up of the same cached record (readers do not
                # take the agent lock) applied it while this read was in flight
                continue
            if seq != current + 1:
                raise IntegrityError(agent_id, current + 1, f"gap: next stored seq is {seq}")
            ts = raw.timestamp
            body, link, rich = decode(
                agent_id, seq, raw.kind, ts, raw.payload, raw.checksum, record.link
            )
            if type(body) is not dict:
                raise IntegrityError(agent_id, seq, "event payload is not an object")
            if current == 0:
                record.created_at = ts
            try:
                apply_payload(record, seq, ts, body)
            except PatchError as exc:
                raise IntegrityError(agent_id, seq, f"patch does not apply: {exc}") from exc
            record.link = link
            record.checksum = raw.checksum
            record.tag_known = False
            record.replay_bytes += len(raw.payload)
            record.dumped = None
            if rich:
                record.rich = True

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
        if record.checksum is not None and same.checksum != record.checksum:
            return False  # rewritten (re-encrypted) or replaced: fold it again, verified
        while True:
            self._apply_events(record, events)
            if len(events) < _PAGE:
                return True
            events = await self.backend.read(agent_id, record.seq, None, limit=_PAGE)

    def _trusted(self, agent_id: str) -> AgentRecord | None:
        """The cached record of ``agent_id`` a write may be made on without reading the
        head first (its stored head tag is known), else None."""
        record = self._unflushed.get(agent_id) or self._cache.get(agent_id)
        return record if record is not None and record.tag_known else None

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
        head, tag = await self.backend.head_tag(agent_id)
        if head == 0:
            return None
        record = await self._fold(agent_id, head, head, tag, at_head=True)
        self._cache.put(agent_id, record)
        return record

    def _public(self, record: AgentRecord) -> Snapshot:
        rich = record.rich
        if record.blob is None:
            # plain JSON documents (the common case) skip the codec's type checks
            record.blob = self.codec.copy_dumps(record.data) if rich else _dumps(record.data)
        return Snapshot(
            agent_id=record.agent_id,
            seq=record.seq,
            fsm_state=record.fsm_state,
            data=self.codec.copy_loads(record.blob) if rich else _loads(record.blob),
            schema_version=record.schema_version,
            created_at=record.created_at,
            updated_at=record.updated_at,
            state_entered_at=record.fsm_entered_at,
        )

    async def get(self, agent_id: str) -> Snapshot | None:
        """The agent's latest state, or None if it has no stream."""
        self._check_open()
        check_agent_id(agent_id)
        if not self._witness_ok:
            await self._open_check()
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
        check_agent_id(agent_id)
        check_seq(at_seq, "at_seq", optional=True)
        if at_time is not None:
            check_timestamp(at_time, "at_time")
        if not self._witness_ok:
            await self._open_check()
        if at_seq is None and at_time is None:
            record = await self._current(agent_id)
            if record is None:
                raise AgentNotFound(agent_id)
            return self._public(record)
        if at_seq is not None and at_time is not None:
            raise ConfigurationError("give at_seq or at_time, not both")
        await self._flush_agent(agent_id)
        head, tag = await self.backend.head_tag(agent_id)
        if head == 0:
            raise AgentNotFound(agent_id)
        if at_time is not None:
            at_seq = await self.backend.seq_at(agent_id, at_time)
            if at_seq == 0:
                raise AgentNotFound(agent_id)
        assert at_seq is not None
        if not 1 <= at_seq <= head:
            raise ConfigurationError(f"seq {at_seq} is outside 1..{head} for agent {agent_id!r}")
        return self._public(await self._fold(agent_id, head, at_seq, tag, at_head=at_seq == head))

    async def head(self, agent_id: str) -> int:
        """The agent's last seq (0 if it has no stream), counting buffered writes."""
        self._check_open()
        check_agent_id(agent_id)
        if not self._witness_ok:
            await self._open_check()
        pinned = self._unflushed.get(agent_id)
        return pinned.seq if pinned is not None else await self.backend.head(agent_id)

    async def head_state(self, agent_id: str) -> AgentHead | None:
        """The agent's head seq and FSM state without folding its data (None when it has
        no stream): cheap enough to list many agents. See :mod:`.heads`."""
        self._check_open()
        return await read_head(self, agent_id)

    async def head_states(self, agent_ids: Sequence[str]) -> list[AgentHead | None]:
        """:meth:`head_state` of many agents, in order, reading their head events
        together (one statement on SQLite and PostgreSQL): for listing pages."""
        self._check_open()
        ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
        return await read_heads(self, ids)

    async def stored_size(self, agent_id: str) -> StoredSize:
        """Stored bytes of the agent's events and latest snapshot (nothing decoded)."""
        self._check_open()
        return await stored_size(self, agent_id)

    async def history(
        self, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]:
        """Every event of the agent in order, verified, read page by page."""
        self._check_open()
        check_agent_id(agent_id)
        check_seq(after_seq, "after_seq")
        check_seq(to_seq, "to_seq", optional=True)
        if not self._witness_ok:
            await self._open_check()
        await self._flush_agent(agent_id)
        cursor = after_seq
        link: bytes | None = ZERO_LINK if after_seq == 0 else None
        while True:
            page = await self.backend.read(agent_id, cursor, to_seq, limit=_PAGE)
            for raw in page:
                if raw.seq != cursor + 1:
                    raise IntegrityError(agent_id, cursor + 1, f"gap: next stored seq is {raw.seq}")
                body, opened = self._open_event(agent_id, raw)
                if link is not None and opened.prev is not None and opened.prev != link:
                    raise IntegrityError(agent_id, raw.seq, _CHAIN_BROKEN)
                link = opened.link
                yield self._to_event(agent_id, raw, body)
                cursor = raw.seq
            if len(page) < _PAGE:
                return

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One page of agents ordered by id (use ``after`` = last id for the next page)."""
        self._check_open()
        if after is not None:
            check_agent_id(after, "after")
        check_seq(limit, "limit", minimum=1)
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
        lease: Leased | None = None,
    ) -> AppendResult:
        """Start an agent's stream with a ``created`` event. ConflictError if it exists.

        With ``lease`` the write is fenced (see :meth:`save`)."""
        self._check_open()
        check_agent_id(agent_id)
        document = dict(check_mapping(data, "data", optional=True) or {})
        fsm_state = self._state(agent_id, fsm_state)
        check_seq(schema_version, "schema_version")
        _check_write_options(idempotency_key, actor, lease)
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
                lease=lease,
            )
        except SerializationError as exc:
            raise _locate(exc, self.codec.types, data=document) from exc

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
        lease: Leased | None = None,
    ) -> AppendResult:
        """Make ``data`` (and ``fsm_state`` when given) the agent's state.

        Only the difference from the stored state is written (a JSON Patch). The agent
        is created if it has no stream. With ``expected_seq`` the write happens only
        if the head is still that seq (else :class:`ConflictError`); without it the
        diff is taken against the latest state (last writer wins, nothing is lost
        from the stream's history).

        With ``lease`` (a :class:`~statekeeper.concurrency.Lease`, or anything with a
        ``fence``) the write carries the lease's fencing token and the backend refuses
        it with :class:`~statekeeper.errors.LeaseLost` once a newer lease was granted.
        """
        self._check_open()
        check_agent_id(agent_id)
        document = check_mapping(data, "data")
        fsm_state = self._state(agent_id, fsm_state)
        check_seq(expected_seq, "expected_seq", optional=True)
        check_seq(schema_version, "schema_version", optional=True)
        _check_event_type(event_type)
        _check_write_options(idempotency_key, actor, lease)
        body = _info(info)

        def make(rec: AgentRecord | None) -> tuple[list[dict[str, Any]], str | None]:
            if rec is None:
                return [{"op": "replace", "path": "", "value": document}], fsm_state
            fsm = fsm_state if fsm_state != rec.fsm_state else None
            if rec.rich:  # typed values: the plain diff (their JSON bytes are not them)
                return patch.diff(rec.data, document), fsm
            ops, dumped[0] = diff_by_key(rec.data, document, rec.dumped)
            return ops, fsm

        dumped: list[dict[str, bytes] | None] = [None]  # what make() serialized

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
                lease=lease,
                dumped=dumped,
            )
        except SerializationError as exc:
            raise _locate(exc, self.codec.types, data=document, info=body) from exc

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
        lease: Leased | None = None,
    ) -> AppendResult:
        """Append one event: ``info`` is recorded as is; ``ops`` (JSON Patch) and
        ``fsm_state`` change the state. The agent must exist (see :meth:`create`).
        With ``lease`` the write is fenced (see :meth:`save`).

        Without ``expected_seq``, ops are applied to the latest state; if they no
        longer apply after a concurrent write, :class:`ConflictError` is raised.
        """
        self._check_open()
        check_agent_id(agent_id)
        _check_event_type(event_type)
        op_list = check_ops(ops)
        fsm_state = self._state(agent_id, fsm_state)
        check_seq(expected_seq, "expected_seq", optional=True)
        check_seq(schema_version, "schema_version", optional=True)
        _check_write_options(idempotency_key, actor, lease)
        body = _info(info)

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
                lease=lease,
            )
        except SerializationError as exc:
            raise _locate(exc, self.codec.types, info=body, ops=op_list) from exc

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
        lease: Leased | None = None,
        dumped: list[dict[str, bytes] | None] | None = None,
    ) -> AppendResult:
        self._check_open()
        if not self._witness_ok:
            await self._open_check()
        fence = lease.fence if lease is not None else None
        async with self._lock(agent_id):
            # No read before a write: a cached record whose stored head tag is known is
            # trusted, the append's compare-and-set (head seq and tag) being the check;
            # a conflict drops it and the write is made again on a validated read.
            # (with validate_cache=False every attempt trusts the cache, and counts)
            trusting = self._trust_cache and self.validate_cache
            attempt = 0
            while True:
                record = self._trusted(agent_id) if trusting else None
                if record is None:
                    trusting = False
                    record = await self._current(agent_id)
                base = record.seq if record is not None else 0
                if trusting and expected_seq is not None and expected_seq != base:
                    trusting = False  # the cache may be stale: ask the backend
                    continue
                if fence is not None and expected_seq is not None and expected_seq != base:
                    # a stale view under a lease: a lost lease is the news, not the
                    # conflict (the backend also checks the fence first)
                    check_fence(agent_id, fence, await self.backend.get_lease(agent_id))
                if idempotency_key is not None and (
                    self._behind is not None
                    or (expected_seq is not None and expected_seq != base)
                    or idempotency.rotating(self.codec)  # recorded under an older key?
                ):
                    # a retry of an append that landed? (the backend checks keys itself
                    # on append, but not before a conflict, nor a write-behind buffer)
                    earlier = await self._earlier_append(agent_id, idempotency_key)
                    if earlier is not None:
                        return earlier
                if expected_seq is not None and expected_seq != base:
                    raise ConflictError(agent_id, expected_seq, base)
                if dumped is not None:
                    dumped[0] = None
                ops, fsm = make(record)
                event_kind = create_kind if (record is None and create_kind) else kind
                if record is not None and (
                    record.link is None
                    or (self.full_snapshot_every > 1 and record.full_data is None)
                ):
                    await self._prepare(record)  # rare: a link or a delta base to fetch
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
                    fence,
                )
                if dumped is not None:  # the bytes of what new_record.data now equals
                    new_record.dumped = dumped[0]
                if self._behind is not None:
                    self._unflushed[agent_id] = new_record
                    self._cache.put(agent_id, new_record)
                    self._appends += 1
                    if self._witness is not None and new_record.link is not None:
                        self._buffered_links.setdefault(agent_id, {})[base + 1] = new_record.link
                    await self._behind.add(request)  # waits when the buffer is full
                    return AppendResult(agent_id, base + 1, base + 1)
                try:
                    result = await self._submit(request)
                except ConflictError:
                    self._cache.discard(agent_id)
                    if trusting:  # the cached head was stale: not an attempt of its own
                        trusting = False
                        continue
                    if expected_seq is not None or attempt == self.write_retries:
                        raise
                    attempt += 1
                    continue
                except BaseException:
                    self._cache.discard(agent_id)
                    raise
                self._appends += 1
                if result.duplicate:
                    self._cache.discard(agent_id)
                    if request.idempotency_key is not None:  # never trust the record alone
                        return await self._confirm_key(agent_id, request.idempotency_key, result)
                else:
                    if request.snapshot is not None:
                        self._snapshots += 1
                    self._cache.put(agent_id, new_record)
                    if self._witness is not None and new_record.link is not None:
                        self._witness.acked(agent_id, result.last_seq, new_record.link)
                return result

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
        fence: Fence | None = None,
    ) -> tuple[AppendRequest, AgentRecord]:
        """Encode one event (and a snapshot when due); compute the state after it."""
        base = record.seq if record is not None else 0
        seq = base + 1
        now = self.clock()
        payload = event_body(
            body, ops, fsm=fsm, schema_version=schema_version, actor=actor, key=idempotency_key
        )
        plaintext = self.codec.serialize(payload, "event")
        if self.max_event_bytes is not None and len(plaintext) > self.max_event_bytes:
            raise StateTooLarge(agent_id, "event", len(plaintext), self.max_event_bytes)
        prev = record.link if record is not None else ZERO_LINK
        if prev is None:  # pragma: no cover - _prepare found it
            raise IntegrityError(agent_id, base, "the chain link of the head is unknown")
        sealed = self.codec.seal(agent_id, seq, kind, now, plaintext, prev)
        raw = RawEvent(seq, kind, now, sealed.payload, sealed.checksum)
        # The state after the event, built from the serialized bytes so that it shares
        # nothing with the caller's objects. Copy-on-write: ``record`` stays untouched
        # until the append is acknowledged.
        if record is None:
            new = AgentRecord(agent_id, 0, None, {}, 1, now, now)
        else:
            new = next_record(record)
        new.link = sealed.link
        new.checksum = sealed.checksum
        new.replay_bytes = (record.replay_bytes if record is not None else 0) + len(sealed.payload)
        if self.codec.format.id == JSON and not (b"$" in plaintext and b'"$t"' in plaintext):
            decoded = _loads(plaintext)  # plain JSON: no typed values to rebuild
        else:
            decoded = self.codec.deserialize(plaintext, agent_id, seq)
            new.rich = True
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
        if self.max_state_bytes is not None:
            if new.blob is None:
                new.blob = self.codec.copy_dumps(new.data)
            if len(new.blob) > self.max_state_bytes:
                raise StateTooLarge(agent_id, "state", len(new.blob), self.max_state_bytes)
        snapshot = None
        if self._snapshot_due(new, seq):
            snapshot, marks = self._encode_snapshot(new)
            _mark_snapshot(new, marks)
        request = AppendRequest(
            agent_id,
            base,
            (raw,),
            snapshot,
            None
            if idempotency_key is None
            else idempotency.stored_key(self.codec, agent_id, idempotency_key),
            fence,
            head_tag=self.codec.head_tag(agent_id, seq, sealed.link),
            expected_tag=record.tag if record is not None else None,
            check_tag=self._trust_cache and record is not None and record.tag_known,
        )
        new.tag, new.tag_known = request.head_tag, True
        return request, new

    def _snapshot_due(self, record: AgentRecord, seq: int) -> bool:
        """A snapshot is due with the event at ``seq`` on ``record``: the replay a load
        would do from the last snapshot has reached its bound, in events or in bytes."""
        return seq - record.snapshot_seq >= self.snapshot_every or (
            self.snapshot_bytes is not None and record.replay_bytes >= self.snapshot_bytes
        )

    def _encode_snapshot(self, record: AgentRecord) -> tuple[RawSnapshot, _Marks]:
        """Encode a snapshot of ``record`` — whole, or as a delta against the latest
        whole one — and say what to remember once it is stored (see _mark_snapshot)."""
        delta = (
            self.full_snapshot_every > 1
            and record.full_data is not None
            and record.full_link is not None
            and 0 < record.full_seq < record.seq
            and record.deltas + 1 < self.full_snapshot_every
        )
        body = snapshot_body(record, patch.diff(record.full_data, record.data) if delta else None)
        plaintext = self.codec.serialize(body, "state")
        if self.max_snapshot_bytes is not None and len(plaintext) > self.max_snapshot_bytes:
            raise StateTooLarge(
                record.agent_id, "snapshot", len(plaintext), self.max_snapshot_bytes
            )
        if record.link is None:  # pragma: no cover - _prepare found it
            raise IntegrityError(record.agent_id, record.seq, "the chain link is unknown")
        sealed = self.codec.seal(
            record.agent_id, record.seq, SNAPSHOT_KIND, record.updated_at, plaintext, record.link
        )
        raw = RawSnapshot(record.seq, record.updated_at, sealed.payload, sealed.checksum)
        if delta:
            return raw, (
                record.seq,
                record.full_seq,
                record.full_link,
                record.full_data,
                record.deltas + 1,
            )
        full_data = None
        if self.full_snapshot_every > 1:  # a private copy, the base of the next deltas
            full_data = self.codec.deserialize(plaintext, record.agent_id, record.seq)["data"]
        return raw, (record.seq, record.seq, record.link, full_data, 0)

    async def _prepare(self, record: AgentRecord) -> None:
        """Before appending after ``record``: make sure its chain link is known (a
        record folded from a version-0 snapshot at the head has none) and, when a
        delta snapshot is due, that the data of its base snapshot is at hand."""
        agent_id = record.agent_id
        if record.link is None:
            events = await self.backend.read(agent_id, record.seq - 1, record.seq)
            if not events or events[0].seq != record.seq:
                raise IntegrityError(agent_id, record.seq, "the event at the head is missing")
            record.link = self._open_event(agent_id, events[0])[1].link
        if (
            self.full_snapshot_every > 1
            and record.full_data is None
            and 0 < record.full_seq <= record.seq
            and self._snapshot_due(record, record.seq + 1)
        ):
            await self._load_base(record)

    async def _load_base(self, record: AgentRecord) -> None:
        """Load the data of ``record``'s latest full snapshot (for delta snapshots); if
        it cannot be had, forget it so that the next snapshot is stored whole."""
        agent_id = record.agent_id
        raw = await self.backend.latest_snapshot(agent_id, record.full_seq)
        if raw is not None and raw.seq == record.full_seq:
            try:
                body, opened = self._open_snapshot(agent_id, raw)
                if opened.prev is not None and opened.prev == record.full_link:
                    record.full_data = await self._snapshot_data(agent_id, raw.seq, body)
                    return
            except (IntegrityError, SerializationError) as exc:  # damaged: store whole
                _log.warning(
                    "agent %r: base snapshot at seq %d is unusable (%s); the next snapshot"
                    " is stored whole",
                    agent_id,
                    raw.seq,
                    _reason(exc),
                )
        record.full_seq, record.full_link, record.full_data, record.deltas = 0, None, None, 0

    async def _submit(self, request: AppendRequest) -> AppendResult:
        if self._group is not None:
            return await self._group.submit(request)
        return await self.backend.append(request)

    async def find_key(self, agent_id: str, key: str) -> AppendResult | None:
        """Where the append of ``agent_id`` that used idempotency ``key`` landed
        (``duplicate=True``), counting buffered writes; None if no append used it.

        Raises :class:`IntegrityError` when the stored idempotency record does not match
        the event it points at (forged or damaged, see :mod:`.idempotency`)."""
        self._check_open()
        check_agent_id(agent_id)
        check_name(key, "key")
        if not self._witness_ok:
            await self._open_check()
        return await self._earlier_append(agent_id, key)

    async def _earlier_append(self, agent_id: str, key: str) -> AppendResult | None:
        """The append of ``agent_id`` that used idempotency ``key`` (buffered or stored);
        a stored record is confirmed against its event (see :mod:`.idempotency`)."""
        stored_forms = idempotency.stored_keys(self.codec, agent_id, key)
        if self._behind is not None:
            buffered = self._behind.find_key(agent_id, stored_forms[0])
            if buffered is not None:
                return buffered
        for stored in stored_forms:
            found = await self.backend.lookup_key(agent_id, stored)
            if found is not None:
                return await self._confirm_key(agent_id, stored, found)
        return None

    async def _confirm_request(self, request: AppendRequest, result: AppendResult) -> None:
        """A buffered append the backend reported as a duplicate: check its record."""
        if request.idempotency_key is not None:
            await self._confirm_key(request.agent_id, request.idempotency_key, result)

    async def _confirm_key(self, agent_id: str, stored: str, found: AppendResult) -> AppendResult:
        """``found`` if the events it points at carry the key stored as ``stored``; else
        :class:`IntegrityError` (a forged or damaged idempotency record)."""
        first, last = found.first_seq, found.last_seq
        events: list[RawEvent] = []
        if 1 <= first <= last and last - first < _PAGE * 10:
            events = await self.backend.read(agent_id, first - 1, last)
        bodies = [(raw.seq, self._open_event(agent_id, raw)[0].get("key")) for raw in events]
        idempotency.check_body_keys(self.codec, agent_id, stored, first, last, bodies)
        return found

    async def _flush_agent(self, agent_id: str) -> None:
        if agent_id in self._unflushed:
            await self.flush()

    async def snapshot(self, agent_id: str) -> int:
        """Store a snapshot of the latest state now; returns its seq."""
        self._check_open()
        check_agent_id(agent_id)
        if not self._witness_ok:
            await self._open_check()
        await self._flush_agent(agent_id)
        async with self._lock(agent_id):
            record = await self._current(agent_id)
            if record is None:
                raise AgentNotFound(agent_id)
            record.snapshot_seq = 0  # a snapshot is due now: _prepare loads a delta's base
            try:
                await self._prepare(record)
                raw, marks = self._encode_snapshot(record)
                await self.backend.save_snapshot(agent_id, raw)
            except BaseException:
                self._cache.discard(agent_id)
                raise
            _mark_snapshot(record, marks)
            self._snapshots += 1
            return record.seq

    async def delete(self, agent_id: str) -> bool:
        """Delete the agent's stream and snapshots. True if it existed."""
        self._check_open()
        check_agent_id(agent_id)
        if not self._witness_ok:
            await self._open_check()
        await self._flush_agent(agent_id)
        async with self._lock(agent_id):
            self._forget(agent_id)
            if self._witness is None:
                return await self.backend.delete_agent(agent_id)
            self._buffered_links.pop(agent_id, None)
            await self._witness.deleting(agent_id)
            existed = await self.backend.delete_agent(agent_id)
            self._witness.deleted(agent_id)
            return existed

    # -- agents with a state machine ----------------------------------------------

    async def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        initial_data: Mapping[str, Any] | None = None,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> DurableAgent:
        """Load the agent (or create it with ``initial_data``) bound to ``machine``;
        with ``lease``, every write of the agent is fenced by it.

        An event the machine does not allow makes ``agent.transition`` raise
        :class:`~statekeeper.errors.InvalidTransition` (nothing is written, pending
        data changes stay pending); ``strict=False`` gives the bare machine's API
        instead, where it returns False."""
        from .agent import DurableAgent

        return await DurableAgent.open(
            self, agent_id, machine, initial_data, lease=lease, strict=strict
        )

    # -- verification --------------------------------------------------------------

    async def verify(self, agent_ids: list[str] | None = None) -> VerifyReport:
        """Check every stored record: its authentication (checksum or AEAD tag), the
        chain from seq 1 to the head, gap-free seqs, the authenticated head, and that
        every snapshot belongs to the chain and equals the fold of the events before it.
        Every mark of the store's witness (of ``agent_ids``, or all) is checked too:
        a stream that went back in time is a problem.
        """
        self._check_open()
        if agent_ids is not None:
            if isinstance(agent_ids, str) or not isinstance(agent_ids, Iterable):
                raise InvalidArgument(
                    "agent_ids",
                    "agent_ids must be a list of agent ids or None, "
                    f"not {type(agent_ids).__name__}",
                )
            agent_ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
        await self.flush()
        report = VerifyReport()
        witnessed = await self.witness_problems(agent_ids)
        if agent_ids is None:
            agent_ids = []
            while True:
                after = agent_ids[-1] if agent_ids else None
                page = await self.backend.list_agents(after=after, limit=_PAGE)
                agent_ids.extend(info.agent_id for info in page)
                if len(page) < _PAGE:
                    break
        for agent_id in agent_ids:
            report.agents += 1
            start = len(report.problems)
            try:
                await verification.verify_agent(self, agent_id, report)
            except StatekeeperError as exc:
                report.problems.append(Problem(agent_id, getattr(exc, "seq", None), str(exc)))
            report.problems[start:] = sorted(  # the agent's problems in seq order
                report.problems[start:], key=lambda p: (p.seq is None, p.seq or 0)
            )
        seen = {(p.agent_id, p.seq) for p in report.problems}  # one problem per place
        report.problems.extend(p for p in witnessed if (p.agent_id, p.seq) not in seen)
        return report

    async def digest(self, agent_id: str, at_seq: int | None = None) -> StreamDigest:
        """A commitment to the agent's stream up to ``at_seq`` (default: the head),
        verified on the way (every record from the nearest snapshot, and the head tag
        when at the head). Two digests at the same seq are equal if and only if the
        records up to it are the same: kept outside the store (a *witness*, see
        :mod:`statekeeper.security.witness`), it detects a rollback or rewrite later.
        """
        self._check_open()
        check_agent_id(agent_id)
        check_seq(at_seq, "at_seq", optional=True)
        if not self._witness_ok:
            await self._open_check()
        await self._flush_agent(agent_id)
        head, tag = await self.backend.head_tag(agent_id)
        if head == 0:
            raise AgentNotFound(agent_id)
        target = head if at_seq is None else at_seq
        if not 1 <= target <= head:
            raise ConfigurationError(f"seq {target} is outside 1..{head} for agent {agent_id!r}")
        record = await self._fold(agent_id, head, target, tag, at_head=target == head)
        if record.link is None:
            await self._prepare(record)
        assert record.link is not None
        key_id, digest = self.codec.witness_digest(agent_id, target, record.link)
        return StreamDigest(agent_id, target, key_id, digest)

    async def check_digest(self, expected: StreamDigest) -> str | None:
        """None when the stream still holds what ``expected`` committed to (it may have
        grown since); else what is wrong (shorter now, or different records)."""
        self._check_open()
        if not isinstance(expected, StreamDigest):
            raise InvalidArgument(
                "expected",
                f"expected must be a StreamDigest (from digest()), not {type(expected).__name__}",
            )
        check_agent_id(expected.agent_id, "expected.agent_id")
        check_seq(expected.seq, "expected.seq", minimum=1)
        await self._flush_agent(expected.agent_id)
        head, tag = await self.backend.head_tag(expected.agent_id)
        if head == 0:
            return "the stream is gone (deleted, or the store was rolled back before it existed)"
        if head < expected.seq:
            return (
                f"the stream ends at seq {head}, the witness saw seq {expected.seq}"
                " (records were removed, or the store was rolled back)"
            )
        record = await self._fold(
            expected.agent_id, head, expected.seq, tag, at_head=expected.seq == head
        )
        if record.link is None:
            await self._prepare(record)
        assert record.link is not None
        if not self.codec.check_witness_digest(
            expected.agent_id, expected.seq, record.link, expected.key_id, expected.digest
        ):
            return (
                f"the records up to seq {expected.seq} differ from what the witness saw"
                " (the stream was rewritten, or rolled back and written again)"
            )
        if head > expected.seq:  # the rest of the stream must still verify to its head
            await self._fold(expected.agent_id, head, head, tag, at_head=True)
        return None

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


def _again(exc: StatekeeperError) -> StatekeeperError:
    """A fresh copy of a remembered witness error (each raise gets its own traceback)."""
    if isinstance(exc, RollbackDetected):
        detail = exc.reason.removeprefix("rollback detected: ")
        detail = detail.rsplit(f" (witness {exc.witness})", 1)[0]
        assert exc.seq is not None
        return RollbackDetected(exc.agent_id, exc.seq, exc.found, exc.witness, detail)
    if isinstance(exc, IntegrityError):
        return IntegrityError(exc.agent_id, exc.seq, exc.reason)
    return exc


def _vanished(
    exc: NotAStore, witness: str | os.PathLike[str] | bool | None, codec: Codec
) -> StatekeeperError:
    """A store file that is no store any more (emptied, overwritten): a rollback when
    its witness holds marks, else the refusal itself."""
    if witness is False:
        return exc
    location = os.fspath(witness) if isinstance(witness, str | os.PathLike) else None
    hw = HighWater(location or exc.location + SUFFIX, codec)
    try:
        hw.load()
    except StatekeeperError:
        return exc
    marks = hw.marks()
    if not marks:
        return exc
    newest = marks[0]
    return RollbackDetected(
        str(newest["agent_id"]),
        int(newest["seq"]),
        0,
        hw.path,
        f"{len(marks)} agent(s) were acknowledged, the newest up to seq {newest['seq']}, but "
        f"{exc.location} is no statekeeper store any more ({exc.reason})",
    )


def _info(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """The caller's event information, refused if it would shadow what the store writes."""
    body = dict(check_mapping(info, "info", optional=True) or {})
    bad = _RESERVED.intersection(body)
    if bad:
        raise ConfigurationError(f"event info may not use reserved keys {sorted(bad)}")
    return body


def _locate(
    exc: SerializationError, types: TypeRegistry | None = None, /, **values: Any
) -> SerializationError:
    """Point a serialization error at the caller's own argument (``data.messages[3]``)
    rather than at the encoded event (``event.ops[0].value…``); ``types`` are the
    codec's registered types."""
    for root, value in values.items():
        try:
            to_plain(value, types, root)
        except SerializationError as found:
            return found
        except RecursionError:
            return exc
    return exc


def _check_event_type(event_type: object) -> None:
    check_name(event_type, "event_type")
    if event_type == SNAPSHOT_KIND:
        raise InvalidArgument("event_type", f"event_type {SNAPSHOT_KIND!r} is reserved")


def _check_write_options(idempotency_key: object, actor: object, lease: object) -> None:
    """The options every write takes: an idempotency key, an actor, a lease."""
    check_optional_name(idempotency_key, "idempotency_key")
    check_optional_name(actor, "actor")
    if lease is not None:
        fence = getattr(lease, "fence", None)
        if not (
            isinstance(fence, tuple)
            and len(fence) == 2
            and isinstance(fence[0], str)
            and type(fence[1]) is int
        ):
            raise InvalidArgument(
                "lease",
                "lease must be a Lease (or anything with a fence (holder, token)), "
                f"not {type(lease).__name__}",
            )


def _check_numbers(**options: object) -> None:
    """The integer options of :class:`StateStore` are ints (None: no limit)."""
    for name, value in options.items():
        optional = name.startswith("max_") or name == "snapshot_bytes"
        check_seq(value, name, minimum=-(2**63), optional=optional)


def _state_values(states: Iterable[Any] | None) -> frozenset[str] | None:
    """The option ``states`` as a set of stored state values."""
    if states is None:
        return None
    if isinstance(states, str) or not isinstance(states, Iterable):
        raise InvalidArgument(
            "states", f"states must be an iterable of states or None, not {type(states).__name__}"
        )
    values = frozenset(check_state_value(s, "states[]") or "" for s in states)
    if not values:
        raise InvalidArgument("states", "states must name at least one state")
    return values


_dumps = orjson.dumps
_loads = orjson.loads


def _rich(opened: Opened) -> bool:
    """True when a decoded body may hold typed values (not plain JSON)."""
    body = opened.body
    return opened.format != JSON or (b"$" in body and b'"$t"' in body)


def _mark_snapshot(record: AgentRecord, marks: _Marks) -> None:
    """Remember, once stored, the snapshot :meth:`StateStore._encode_snapshot` made."""
    (
        record.snapshot_seq,
        record.full_seq,
        record.full_link,
        record.full_data,
        record.deltas,
    ) = marks
    record.replay_bytes = 0
