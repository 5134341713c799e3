"""``StateStore``: durable agent state as event streams plus snapshots.

An agent's state is its FSM state plus a JSON data document. Every change is an event
appended to the agent's stream with a gap-free ``seq``; data changes are stored as
JSON Patch diffs. Snapshots of the folded state are stored in the same atomic write as
the event that makes one due, so loading is *latest snapshot + the events after it*,
whatever the length of the stream.

This module is the facade: it checks arguments and wires the parts, each in its own
module — the read path (:mod:`.reads`: decode, fold, cache), the write pipeline
(:mod:`.writes`: build one append, submit it), the snapshot policy (:mod:`.snapshots`),
the stored record body (:mod:`.body`), verification (:mod:`.verification`,
:mod:`.digests`) and the witness (:mod:`.witnessing`). The backend only stores bytes.

(Over 600 lines for a reason: the public API of the store — 27 methods, their
docstrings and argument checks — is here and nowhere else; no logic of the parts is.)
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from ..arguments import (
    AUDIT_STREAM,
    HOLDS_STREAM,
    check_agent_id,
    check_mapping,
    check_name,
    check_ops,
    check_seq,
    check_timestamp,
)
from ..backends.base import Backend, Health
from ..backends.url import open_backend
from ..codec import Codec, Opened, TypeRegistry
from ..errors import (
    AgentNotFound,
    ConfigurationError,
    InvalidArgument,
    NotAStore,
    SerializationError,
    StoreClosed,
    UnsavedChangesWarning,
)
from ..records import AgentInfo, AppendResult, Event, EventType, RawEvent, Snapshot
from ..security.held import held_check, marked_at, unheld
from ..security.highwater import DEFAULT_INTERVAL, HighWater
from . import digests, feed_deletes, feed_intent_repair, forks, verification
from .cache import CacheStats
from .digests import StreamDigest
from .durability import Durability
from .feed import (
    FeedAccess,
    Subscription,
    store_feed_cursor_bounds,
    trim_feed_through,
)
from .feed_cursor import FeedBounds, FeedCursor
from .feed_intent_repair import FeedIntent, SettledIntent
from .heads import AgentHead, StoredSize, read_head, read_heads, stored_size
from .history import read_history
from .holds import refuse_if_held
from .idle_settle import IdleSettler, IdleSettleStats
from .keyguard import KeyGuard, own_codec
from .machines import Machines
from .observing import FOLD_AT
from .options import check_options, state_values
from .reads import PAGE, ReadPath
from .settle import settle, settles
from .snapshots import AUTO_MAX_EVENTS, COST_MAX_EVENTS, SnapshotPolicy
from .state import AgentRecord
from .verification import Problem, VerifyReport
from .witnessing import WitnessGate, asker, open_witness, vanished
from .writes import (
    SEEN,
    Leased,
    WritePipeline,
    append_changes,
    check_event_type,
    check_write_options,
    event_info,
    locate,
    save_changes,
)

if TYPE_CHECKING:
    from ..codec.keys import Keyring
    from ..machine import AgentStateMachine
    from ..schema.agent import TypedAgent
    from ..schema.registry import ModelSchema, SchemaRegistry
    from .agent import DurableAgent
    from .governed import AccessPolicy, AuditSettings
    from .observing import StoreObserver

__all__ = [
    "DEFAULT_URL",
    "Leased",
    "Problem",
    "StateStore",
    "StoreStats",
    "StreamDigest",
    "VerifyReport",
]

#: where a store with no URL keeps its data (override with ``STATEKEEPER_URL``)
DEFAULT_URL = "sqlite:///statekeeper.db"

_M = TypeVar("_M")
_T = TypeVar("_T")
_perf = time.perf_counter
_CLOSED = "the store is closed"


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
    #: appends acknowledged into the write-behind buffer (``durability="async"``) that
    #: a failed flush dropped: never stored (``appends`` counts only what was stored)
    lost: int = 0
    #: the idle settles' counters (``settle_after``); None: no idle trigger
    idle_settles: IdleSettleStats | None = None


class StateStore:
    """Durable, verified, cached agent state over any :class:`Backend`.

    Args:
        backend: a :class:`Backend`, a URL (``sqlite:///path.db``, ``memory://``), or
            None for ``$STATEKEEPER_URL`` or else ``sqlite:///statekeeper.db``.
        durability: ``"sync"``, ``"group"`` or ``"async"`` (see
            :mod:`statekeeper.store.durability` for what each guarantees).
        snapshot_every: ``"bounded"`` (the default): a snapshot once replaying the
            events since the last one would cost a load as much as decoding that
            snapshot plus a fixed allowance (256 KiB of replay-equivalent work: their
            stored bytes plus a fixed cost per event), and after 100 events whatever
            they cost — a default-configured load never replays more than that; an
            agent saved fewer than ~50 times with small changes writes no snapshot
            (see :mod:`statekeeper.store.snapshots`). A number: a snapshot after
            exactly this many events since the last one. ``"cost"``: store a snapshot
            once replaying the events since the last one would cost a load as much as
            decoding that snapshot (their stored bytes plus a fixed cost per event, against its
            stored bytes), and after 100 events whatever they cost: a cold load at any
            head does at most about twice the work of one at a snapshot, and the
            snapshots cost each save about its own size, whatever the state's (see
            :mod:`statekeeper.store.snapshots`); it is not the default because those
            snapshots cost saves (+24 % instructions per save, PostgreSQL 16-agent
            throughput 2.47x -> 1.80x the peer's: docs/benchmarks.md). ``"auto"``:
            every Young-optimal
            ``k = sqrt(2·C·E/r)`` events, from the snapshot cost, replay cost per event
            and appends per cold load this store measures
            (:mod:`statekeeper.store.autotune`); until it has measured them, by cost.
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
            build one: ``keyring``, ``compression``, ``format``, ``types``,
            ``checksum``).
        keyring: encrypt every record at rest (AES-256-GCM) and authenticate every
            stream (see :class:`~statekeeper.security.Keyring` and ``docs/security.md``).
        compression: ``"zstd"`` to compress records of 1 KiB or more;
            ``"zstd-dict"`` the same with the codec's built-in dictionary (small JSON
            Patch records ~2x smaller, see :mod:`statekeeper.codec.zstd_dict`).
        format: ``"json"`` (default) or ``"msgpack"`` for new records.
        types: enums, dataclasses and pydantic models the state may hold (a
            :class:`~statekeeper.codec.TypeRegistry` or a list of classes).
        checksum: the hash of new records' chain links and checksums: ``"sha256"``,
            ``"blake3"`` or ``"auto"`` (the default: BLAKE3 for records of 4 KiB or
            more, such as snapshots, SHA-256 below). Each record's header names its
            own, so records of both verify in one stream.
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
        principal / policy / audit: open the store as ``principal``, every call
            checked against ``policy`` (a :class:`~statekeeper.governance.Policy`) and
            every mutation recorded in the audit log (``audit``: a
            :class:`~statekeeper.governance.Audit`); see ``docs/governance.md``. With
            any of them the store is a
            :class:`~statekeeper.store.governed.GovernedStateStore`; without them
            nothing is checked and nothing costs more.
        namespace: open the store in a namespace (``"acme/support"``): agent ids given
            and returned are relative to it (``"a-1"`` is stored as
            ``"acme/support/a-1"``), listings and the feed cover it and the namespaces
            below it; see :mod:`statekeeper.store.namespaced` and ``docs/governance.md``.
        settle_after: once an agent this store saved has had no save for this many
            seconds, :meth:`settle` it in the background (one at a time, never ahead of
            a save, never an agent saved under a lease, nothing at close; see
            :mod:`statekeeper.store.idle_settle`). None (the default): only when
            :meth:`settle` is called.
    """

    def __new__(
        cls,
        backend: Backend | str | None = None,
        *,
        principal: str | None = None,
        policy: AccessPolicy | None = None,
        audit: AuditSettings | None = None,
        namespace: str | None = None,
        **options: Any,
    ) -> StateStore:
        governed = principal is not None or policy is not None or audit is not None
        if cls is StateStore and namespace is not None:
            from .namespaced import NamespacedGovernedStateStore, NamespacedStateStore

            cls = NamespacedGovernedStateStore if governed else NamespacedStateStore
        elif cls is StateStore and governed:
            from .governed import GovernedStateStore

            cls = GovernedStateStore
        return super().__new__(cls)

    def __init__(
        self,
        backend: Backend | str | None = None,
        *,
        durability: Durability | str = "sync",
        snapshot_every: int | Literal["bounded", "cost", "auto"] = "bounded",
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
        checksum: str | None = None,
        full_snapshot_every: int = 1,
        max_event_bytes: int | None = None,
        max_snapshot_bytes: int | None = None,
        max_state_bytes: int | None = None,
        states: Iterable[Any] | None = None,
        witness: str | os.PathLike[str] | bool | None = None,
        witness_interval: float = DEFAULT_INTERVAL,
        principal: str | None = None,
        policy: AccessPolicy | None = None,
        audit: AuditSettings | None = None,
        namespace: str | None = None,
        settle_after: float | None = None,
    ) -> None:
        if namespace is not None:
            # only reached by a subclass of StateStore that is not the namespaced one
            raise ConfigurationError(
                f"namespace is an option of StateStore, not of {type(self).__name__}"
            )
        if principal is not None or policy is not None or audit is not None:
            # only reached by a subclass of StateStore that is not the governed one
            raise ConfigurationError(
                f"principal, policy and audit are options of StateStore, not of "
                f"{type(self).__name__}"
            )
        # every option is checked before a backend is opened (and a file created)
        allowed = state_values(states)
        mode, codec = check_options(
            backend=backend,
            durability=durability,
            snapshot_every=snapshot_every,
            snapshot_bytes=snapshot_bytes,
            cache_size=cache_size,
            flush_size=flush_size,
            flush_interval=flush_interval,
            clock=clock,
            codec=codec,
            write_retries=write_retries,
            keyring=keyring,
            compression=compression,
            format=format,
            types=types,
            checksum=checksum,
            full_snapshot_every=full_snapshot_every,
            max_event_bytes=max_event_bytes,
            max_snapshot_bytes=max_snapshot_bytes,
            max_state_bytes=max_state_bytes,
            witness=witness,
            witness_interval=witness_interval,
            settle_after=settle_after,
        )
        codec = own_codec(codec)  # (a codec another store took: its copy, see own_codec)
        if backend is None:
            backend = os.environ.get("STATEKEEPER_URL", DEFAULT_URL)
        try:
            self.backend: Backend = open_backend(backend) if isinstance(backend, str) else backend
        except NotAStore as exc:
            raise vanished(exc, witness, codec) from exc
        self._witness = open_witness(self.backend, witness, codec, witness_interval)
        keyring = codec.keyring
        family = keyring is not None and keyring.scoped is not None
        self._gate = WitnessGate(self._witness, KeyGuard(codec.encrypted), family=family)
        # the options, as given (read-only: the parts below were built with them)
        self.durability: Durability = mode
        self.snapshot_every = snapshot_every
        self.snapshot_bytes = snapshot_bytes
        # (also with write-behind: its loads were served from the cache unchecked, the
        # state another process wrote since — even a new incarnation — never seen)
        self.validate_cache = validate_cache
        self.clock = clock
        self.codec = codec
        self.write_retries = write_retries
        self.full_snapshot_every = full_snapshot_every
        self.max_event_bytes = max_event_bytes
        self.max_snapshot_bytes = max_snapshot_bytes
        self.max_state_bytes = max_state_bytes
        self._reads = ReadPath(
            self.backend, codec, cache_size=cache_size, validate_cache=self.validate_cache
        )
        if self._witness is not None:  # (an agent found gone: deleted, or lost?)
            self._reads.ask = asker(self._witness, self)
            # (a state read from storage: still holding the record the witness marked?)
            self._reads.marked = marked_at(self._witness)
            self._reads.held = held_check(self._witness, self)
            self._reads.unheld = unheld(self._witness)
        self._snapshots = SnapshotPolicy(
            self.backend,
            codec,
            self._reads,
            every=snapshot_every,
            max_replay_bytes=snapshot_bytes,
            full_every=full_snapshot_every,
            max_bytes=max_snapshot_bytes,
        )
        self._writes = WritePipeline(
            self.backend,
            codec,
            self._reads,
            self._snapshots,
            durability=mode,
            clock=clock,
            write_retries=write_retries,
            max_event_bytes=max_event_bytes,
            max_state_bytes=max_state_bytes,
            flush_size=flush_size,
            flush_interval=flush_interval,
            witness=self._witness,
        )
        # the same objects under the names tools and tests know them by
        self._cache = self._reads.cache
        self._unflushed = self._reads.pinned
        self._group = self._writes.group
        self._machines = Machines(allowed)
        if self._writes.behind is not None:
            self._writes.behind.on_lost = self._machines.lost
            if self._witness is not None:  # its marks of a flush at the loop's shutdown
                self._writes.behind.at_shutdown = self._witness.flush_at_loop_end
        self.settle_after = settle_after
        self._idle: IdleSettler | None = None
        if settle_after is not None:
            self._idle = self._writes.idle = IdleSettler(
                settle_after, self._idle_settle, self._writes.locked
            )
        self._closed = False
        self._closed_why = _CLOSED  # (or why a forked child's copy is closed: .forks)
        forks.watch(self)
        #: what times this store's operations (``observability.instrument`` sets it;
        #: None: one attribute read and a compare per operation, nothing else)
        self.observer: StoreObserver | None = None

    @property
    def snapshot_events(self) -> int:
        """The most events a load replays after the latest snapshot: ``snapshot_every``,
        or the interval ``"auto"`` measured (its event bound before it has measured)."""
        every = self.snapshot_every
        if every in ("cost", "bounded"):
            return COST_MAX_EVENTS
        if every != "auto":
            return int(every)
        tuner = self._snapshots.tuner
        return tuner.events if tuner is not None and tuner.events is not None else AUTO_MAX_EVENTS

    # -- lifecycle ---------------------------------------------------------------

    async def __aenter__(self) -> StateStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def flush(self) -> None:
        """Wait until every acknowledged write is durable (a no-op in ``sync`` mode).

        Raises :class:`~statekeeper.errors.WriteBufferError` if buffered writes failed.
        """
        if self._closed_why is not _CLOSED:  # a fork's copy: the buffer is the parent's
            raise StoreClosed(self._closed_why)
        await self._writes.flush()

    async def close(self) -> None:
        """Flush, then release the backend. Idempotent.

        Warns with :class:`~statekeeper.errors.UnsavedChangesWarning` when a durable
        agent this store opened has changes to its ``data`` that were never written
        (they are not written now either: only the agent knows whether they are ready).
        """
        if self._closed:
            return
        unsaved = self._machines.unsaved()
        if unsaved:
            warnings.warn(UnsavedChangesWarning(unsaved), stacklevel=2)
        try:
            if self._idle is not None:  # (nothing settled at close: cancelled cleanly)
                await self._idle.close()
            await self.flush()
        finally:
            self._closed = True
            if self._writes.behind is not None:
                self._writes.behind.cancel_timer()
            try:
                if self._witness is not None:
                    await self._witness.close()
            finally:
                await self.backend.close()

    def _adopt_agent(self, agent: DurableAgent) -> None:
        self._machines.adopt(agent)

    def _state(self, agent_id: str, fsm_state: object) -> str | None:
        return self._machines.state(agent_id, fsm_state)

    def __repr__(self) -> str:
        # the backend's repr masks credentials
        return f"StateStore({self.backend!r}, durability={self.durability!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(self._closed_why)

    async def _ready(self, *agent_ids: str, write: bool = False) -> None:
        """Before an operation: the store is open, the ids valid (a ``None`` id too is
        refused here, with ``InvalidAgentId``: the parts below take a ``str``, and the
        compiled ones check that with a ``TypeError``), the witness checked; before a
        ``write``, a store without a key checked not to be encrypted (``KeyRequired``)."""
        if self._closed:
            raise StoreClosed(self._closed_why)
        for agent_id in agent_ids:
            check_agent_id(agent_id)
        gate = self._gate
        if not gate.ok and (write or not gate.readable):
            await gate.check(self, write=write)

    # (the parts' private entry points, for the package's tools)
    def _open_event(self, agent_id: str, raw: RawEvent) -> tuple[dict[str, Any], Opened]:
        return self._reads.open_event(agent_id, raw)

    def _decode_event(self, agent_id: str, raw: RawEvent) -> dict[str, Any]:
        return self._reads.decode_event(agent_id, raw)

    async def _current(self, agent_id: str) -> AgentRecord | None:
        return await self._reads.current(agent_id)

    async def _flush_agent(self, agent_id: str, *, report: bool = True) -> None:
        if agent_id in self._reads.pinned:
            if report:
                await self.flush()
            else:  # (a background write's: failures left for the caller's flush)
                await self._writes.flush(report=False)

    # -- the witness ---------------------------------------------------------------

    @property
    def witness(self) -> HighWater | None:
        """The store's automatic witness (None when it has none)."""
        return self._witness

    async def witness_problems(self, agent_ids: list[str] | None = None) -> list[Problem]:
        """Check every mark of the store's witness (only those of ``agent_ids`` when
        given) without raising: one :class:`Problem` per stream that went back in time
        (or for a witness file that cannot be used). Empty without a witness."""
        self._check_open()
        return await self._gate.problems(self, agent_ids)

    async def orphan_problems(self, verified: Collection[str] = ()) -> list[Problem]:
        """One :class:`Problem` (kind ``"orphan"``) per agent whose events are stored
        without a head row (a hand edit, a damaged copy): no read, listing or export
        sees them. ``verified``: agents checked already (their events above the head
        are their own check's finding). Empty on an engine that cannot tell (SQLite
        and PostgreSQL can). :meth:`verify` of the whole store includes them."""
        self._check_open()
        from .verification import orphans

        return await orphans(self, set(verified))

    # -- reading -----------------------------------------------------------------

    async def get(self, agent_id: str) -> Snapshot | None:
        """The agent's latest state, or None if it has no stream."""
        return await self._get(agent_id, False)

    async def _get_shared(self, agent_id: str) -> Snapshot | None:
        """:meth:`get` for a caller that never changes the data it is handed (the
        LangGraph saver: its documents are changed copy-on-write): the store's own
        folded document, not a copy (see ``Reads.public``)."""
        return await self._get(agent_id, True)

    async def _get(self, agent_id: str, shared: bool) -> Snapshot | None:
        # The observation bracket (begin / failed / done) is written out here and in
        # load, create, save, append: folded into one context-manager class
        # (``with _Bracket(obs, "save", agent_id) as b``) the save cost, per save on
        # memory:// (callgrind, benchmarks/bench_observability_saves.py at N=900 minus
        # N=300, both sides in the same run, 2026-12-02): 139,831 -> 143,194
        # instructions without an observer (+2.4 %), 144,678 -> 146,558 instrumented
        # (+1.3 %): the object and its __enter__/__exit__ calls on every operation.
        obs = self.observer
        mark = None if obs is None else _perf() if obs.untraced else obs.begin("load", agent_id)
        try:
            await self._ready(agent_id)
            record = await self._reads.current(agent_id)
            result = self._reads.public(record, shared=shared) if record is not None else None
            if record is not None and (seen := SEEN.get()) is not None:  # a DurableAgent's
                seen.adopted = record.link
                seen.adopted_tag = record.tag if record.tag_known else None
        except BaseException as exc:
            if obs is not None:
                obs.failed("load", mark, exc)
            raise
        if obs is not None:
            obs.done("load", mark, result)
        return result

    async def get_many(self, agent_ids: Sequence[str]) -> list[Snapshot | None]:
        """:meth:`get` of many agents, in order (None for an agent without a stream).

        The agents not already cached are read together, in one consistent read on
        engines that answer it natively (SQLite), one by one elsewhere: what a bulk
        pass over the store (a schema migration) reads a page of agents with."""
        self._check_open()
        ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
        await self._ready()
        records = await self._reads.current_many(ids)
        return [self._reads.public(r) if r is not None else None for r in records]

    async def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> Snapshot:
        """The agent's state: latest, or as it was at ``at_seq`` / at time ``at_time``.

        Raises :class:`AgentNotFound` when the agent has no stream (or had none yet at
        ``at_time``), and :class:`IntegrityError` when a record fails verification.
        """
        obs = self.observer
        mark = None if obs is None else _perf() if obs.untraced else obs.begin("load", agent_id)
        try:
            self._check_open()
            check_agent_id(agent_id)
            if at_seq is not None:
                check_seq(at_seq, "at_seq")
            if at_time is not None:
                check_timestamp(at_time, "at_time")
            gate = self._gate  # (_ready() inlined: no coroutine per load)
            if not gate.ok and not gate.readable:
                await gate.check(self, write=False)
            if at_seq is None and at_time is None:
                reads = self._reads
                seen = SEEN.get()  # a DurableAgent's load: it is told the state's link
                record = reads.current_now(agent_id, False, seen is None)  # (no coroutine)
                if type(record) is Snapshot:  # (made straight from the snapshot: kept by nobody)
                    result = record
                else:
                    if record is not None and type(record) is not AgentRecord:
                        assert not isinstance(record, (AgentRecord, Snapshot))
                        record = await record
                    if record is None:
                        raise AgentNotFound(agent_id)
                    result = reads.public(record)
                    if seen is not None:
                        seen.adopted = record.link
                        seen.adopted_tag = record.tag if record.tag_known else None
            else:
                if at_seq is not None and at_time is not None:
                    raise ConfigurationError("give at_seq or at_time, not both")
                await self._flush_agent(agent_id)
                result = self._reads.public(await self._reads.at(agent_id, at_seq, at_time))
        except BaseException as exc:
            if obs is not None:
                obs.failed("load", mark, exc)
            raise
        if obs is not None:
            obs.done("load", mark, result)
        return result

    async def head(self, agent_id: str) -> int:
        """The agent's last seq (0 if it has no stream), counting buffered writes."""
        await self._ready(agent_id)
        pinned = self._reads.pinned.get(agent_id)
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
        await self._ready()
        await self._flush_agent(agent_id)
        async for event in read_history(self._reads, agent_id, after_seq, to_seq):
            yield event

    def subscribe(
        self,
        from_position: int | FeedCursor | str = 0,
        *,
        namespace: str | None = None,
        agent_prefix: str | None = None,
        event_types: Iterable[str] | None = None,
        batch_size: int = 256,
        stop_at_head: bool = False,
    ) -> Subscription:
        """The change feed: every event of the store after ``from_position``, in the
        order the appends committed, as :class:`~statekeeper.records.FeedEvent` s —
        catch-up from storage, then live (see :mod:`.feed` and ``docs/feed.md``).

        ``namespace`` keeps agents ``"<namespace>/..."``, ``agent_prefix`` agents whose
        id starts with it, ``event_types`` events of those types. The subscription's
        ``cursor`` (or on a store with one feed its ``position``) is where to resume.
        On a sharded store (Redis ``shards=N``) the feed is followed per shard and the
        resume point is a :class:`~statekeeper.store.feed_cursor.FeedCursor` (one
        position per shard; ``str()`` of it is a stable form ``from_position`` takes).
        Raises :class:`~statekeeper.errors.FeedPositionCompacted` for a trimmed position,
        :class:`~statekeeper.errors.FeedCursorMismatch` for a cursor of another number
        of shards and :class:`~statekeeper.errors.CapabilityUnsupported` on an engine
        without a feed.
        """
        self._check_open()
        return Subscription(
            self,
            from_position,
            namespace=namespace,
            agent_prefix=agent_prefix,
            event_types=event_types,
            batch_size=batch_size,
            stop_at_head=stop_at_head,
            access=self._feed_access(from_position, namespace, agent_prefix),
        )

    def _feed_access(
        self, from_position: int | FeedCursor | str, namespace: str | None, agent_prefix: str | None
    ) -> FeedAccess | None:
        """Who may see what on a subscription (None: everything; a store opened as a
        principal filters by its policy)."""
        return None

    async def feed_bounds(self) -> tuple[int, int]:
        """``(floor, head)`` of the change feed: positions ``<= floor`` were trimmed,
        ``head`` is the newest committed position. A sharded store has one pair per
        shard: use :meth:`feed_cursor_bounds` there (this raises
        :class:`~statekeeper.errors.CapabilityUnsupported` naming it)."""
        await self._ready()
        return await self.backend.feed_bounds()

    async def feed_cursor_bounds(self) -> FeedBounds:
        """The change feed's ``(floor, head)`` as two
        :class:`~statekeeper.store.feed_cursor.FeedCursor` s, one position per shard
        (any store with a feed; a store with one feed gives one-position cursors).
        ``floor.positions[k]`` was trimmed away in shard ``k``; ``head.positions[k]``
        is its newest committed position."""
        return await store_feed_cursor_bounds(self)

    async def trim_feed(self, through: int | FeedCursor | str) -> int:
        """Forget change-feed positions ``<= through`` (the events stay readable per
        agent); subscribers behind it get
        :class:`~statekeeper.errors.FeedPositionCompacted`. Returns how many feed
        records were dropped.

        ``through`` is a position (a store with one feed) or a
        :class:`~statekeeper.store.feed_cursor.FeedCursor` / its string form (any store;
        a sharded one needs it): each shard is trimmed through its position in the
        cursor — a subscription's ``cursor``, what every consumer has passed
        (``FeedCursor.earliest``, ``ProjectionRunner.consumed()``), or one shard alone
        (``FeedCursor.start(n).advanced(k, position)``). A cursor position beyond its
        shard's head (an int one too) is :class:`~statekeeper.errors.InvalidArgument`,
        nothing trimmed."""
        if not isinstance(through, (FeedCursor, str)):
            check_seq(through, "through")
        # one path for ints and cursors: a position beyond the head is refused there (a
        # floor above the head would hide every event still to be written)
        return await trim_feed_through(self, through)

    async def feed_intents(self) -> list[FeedIntent]:
        """Every feed intent a delete or forget left (its agent, owner, age, and why it
        is kept: :mod:`~statekeeper.store.feed_intent_repair`); nothing is written."""
        self._check_open()
        await self._ready()
        return await feed_intent_repair.feed_intents(self.backend, self.codec)

    async def settle_feed_intents(
        self,
        agent_ids: Collection[str] | None = None,
        *,
        older_than: float | None = None,
        force: bool = False,
    ) -> list[SettledIntent]:
        """Settle the feed intents of ``agent_ids`` and (or) older than ``older_than``
        seconds as their owner's end would (the agent deleted: its tombstone, once;
        intact: the intent dropped); one whose owner runs on this host is refused
        unless ``force``. For intents no process can prove dead (an earlier version's,
        another host's): ``verify`` names them."""
        self._check_open()
        if agent_ids is not None:
            if isinstance(agent_ids, str) or not isinstance(agent_ids, Iterable):
                raise InvalidArgument(
                    "agent_ids", f"agent_ids must be a list of agent ids, not {agent_ids!r}"
                )
            agent_ids = [check_agent_id(a, "agent_ids[]") for a in agent_ids]
        await self._ready(write=True)
        return await feed_intent_repair.settle_intents(
            self.backend, self.codec, agent_ids, older_than=older_than, force=force
        )

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One page of agents ordered by id (use ``after`` = last id for the next page)."""
        self._check_open()
        if after is not None:
            check_agent_id(after, "after")
        check_seq(limit, "limit", minimum=1)
        await self.flush()
        page = await self.backend.list_agents(after=after, limit=limit)
        if any(info.agent_id[:1] == "\x01" for info in page):  # statekeeper's own streams
            return await self._agents_only(page, limit)
        return page

    async def _agents_only(self, page: list[AgentInfo], limit: int) -> list[AgentInfo]:
        """``page`` without statekeeper's own streams (the audit log), refilled."""
        out = [info for info in page if info.agent_id[:1] != "\x01"]
        while len(page) == limit and len(out) < limit:
            page = await self.backend.list_agents(after=page[-1].agent_id, limit=limit)
            out.extend(info for info in page if info.agent_id[:1] != "\x01")
        return out[:limit]

    async def unlisted_agents(self) -> list[str]:
        """The agents the engine stores and its listings do not show (Redis: taken off
        its agent index by hand; ``verify`` names them), in id order: read by id like
        any other, and copied by an export with the listed ones."""
        self._check_open()
        return [a for a in await self.backend.unlisted_agents() if a[:1] != "\x01"]

    async def iter_agents(self) -> AsyncIterator[AgentInfo]:
        """Every agent, in id order, paging under the hood."""
        after: str | None = None
        while True:
            page = await self.list_agents(after=after, limit=PAGE)
            for info in page:
                yield info
            if len(page) < PAGE:
                return
            after = page[-1].agent_id

    async def count_agents(self) -> int:
        """How many agents have a stream."""
        self._check_open()
        await self.flush()
        count = await self.backend.count_agents()
        own_streams = (AUDIT_STREAM, HOLDS_STREAM, *feed_deletes.streams(self.backend))
        for own in own_streams:  # the store's own streams: not agents
            if count and await self.backend.head(own):
                count -= 1
        if count and getattr(self.backend, "tombstones_by_namespace", False):  # one a namespace
            count -= await self.backend.count_prefix(feed_deletes.PREFIX_IN)
        if count and feed_deletes.has_feed(self.backend):
            # a delete's (or, on every engine, a forget's) intent a crash left
            from .feed_intents import PENDING

            count -= await self.backend.count_prefix(PENDING)
        return count

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
        obs = self.observer
        mark = None if obs is None else _perf() if obs.untraced else obs.begin("create", agent_id)
        try:
            self._check_open()
            check_agent_id(agent_id)
            document = dict(check_mapping(data, "data", optional=True) or {})
            fsm_state = self._state(agent_id, fsm_state)
            check_seq(schema_version, "schema_version")
            check_write_options(idempotency_key, actor, lease)
            await self._ready(write=True)
            try:
                result = await self._writes.write(
                    agent_id,
                    EventType.CREATED,
                    {},
                    expected_seq=0,
                    make=lambda rec: (
                        [{"op": "replace", "path": "", "value": document}],
                        fsm_state,
                    ),
                    schema_version=schema_version,
                    idempotency_key=idempotency_key,
                    actor=actor,
                    lease=lease,
                )
            except SerializationError as exc:
                raise locate(exc, self.codec.types, data=document) from exc
        except BaseException as exc:
            if obs is not None:
                obs.failed("create", mark, exc)
            raise
        if obs is not None:
            obs.done("create", mark, result)
        return result

    async def save(
        self,
        agent_id: str,
        data: Mapping[str, Any],
        *,
        fsm_state: str | None = None,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
        event_type: str = EventType.PATCH,
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
        obs = self.observer
        if (  # the common save, decided by the store's options once (WritePipeline.fast)
            obs is None
            and fsm_state is None
            and info is None
            and expected_seq is None
            and idempotency_key is None
            and event_type is EventType.PATCH
            and actor is None
            and schema_version is None
            and lease is None
            and data.__class__ is dict
            and agent_id.__class__ is str
            # (never an internal stream's record, "\x01..."; a string comparison,
            # not a slice: docs/benchmarks.md, "normalsave")
            and agent_id >= "\x02"
            and self._writes.fast
            and not self._closed
        ):
            # no argument check: the flat save and save_fast make only the save of an
            # agent whose record is cached, whose id was checked when it was first read
            # or written
            if not self._gate.ok:  # the store's first write: the gate once, as below
                check_agent_id(agent_id)  # (an invalid id is refused first, as below)
                await self._gate.check(self)
            try:
                if (flat := self._writes.flat) is not None:
                    done = flat(agent_id, data)  # (store/flat.py: no coroutine)
                    if done.__class__ is AppendResult:
                        return done
                    if done is not None and (done := await done) is not None:  # type: ignore[misc]
                        return done  # type: ignore[return-value]
                done = await self._writes.save_fast(agent_id, data, None)
            except SerializationError as exc:
                raise locate(exc, self.codec.types, data=data) from exc
            if done is not None:
                return done
        mark = None if obs is None else _perf() if obs.untraced else obs.begin("save", agent_id)
        try:
            self._check_open()
            check_agent_id(agent_id)
            document = check_mapping(data, "data")
            fsm_state = self._state(agent_id, fsm_state)
            if (  # only what was given is checked (the common save passes none of these)
                expected_seq is not None
                or schema_version is not None
                or event_type is not EventType.PATCH
                or idempotency_key is not None
                or actor is not None
                or lease is not None
            ):
                check_seq(expected_seq, "expected_seq", optional=True)
                check_seq(schema_version, "schema_version", optional=True)
                check_event_type(event_type)
                check_write_options(idempotency_key, actor, lease)
            elif (
                fsm_state is not None
                and obs is None
                and info is None
                and document.__class__ is dict
                and self._writes.fast
            ):  # the common save with a state: one call too
                if not self._gate.ok:  # the store's first write: the gate once, as below
                    await self._gate.check(self)
                try:
                    done = await self._writes.save_fast(agent_id, document, fsm_state)
                except SerializationError as exc:
                    raise locate(exc, self.codec.types, data=document) from exc
                if done is not None:
                    return done
            info = event_info(info) if info is not None else {}
            if not self._gate.ok:
                await self._gate.check(self)
            try:
                make, dumped = save_changes(document, fsm_state)
                result = await self._writes.write(
                    agent_id,
                    event_type,
                    info,
                    expected_seq=expected_seq,
                    make=make,
                    idempotency_key=idempotency_key,
                    actor=actor,
                    create_type=EventType.CREATED,
                    schema_version=schema_version,
                    lease=lease,
                    dumped=dumped,
                    started=mark,
                )
            except SerializationError as exc:
                raise locate(exc, self.codec.types, data=document, info=info) from exc
        except BaseException as exc:
            if obs is not None:
                obs.failed("save", mark, exc)
            raise
        if obs is not None:
            if mark.__class__ is float:  # untraced: the observation, without a call
                if obs.timed is mark:  # observed by the write pipeline (a direct write)
                    return result
                times = obs.save_times
                times.append(_perf() - mark)
                if len(times) >= FOLD_AT:
                    obs.fold()
            else:
                obs.done("save", mark, result)
        return result

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
        obs = self.observer
        op = "transition" if event_type == EventType.TRANSITION else "append"
        mark = None if obs is None else _perf() if obs.untraced else obs.begin(op, agent_id)
        try:
            self._check_open()
            check_agent_id(agent_id)
            check_event_type(event_type)
            op_list = check_ops(ops)
            fsm_state = self._state(agent_id, fsm_state)
            check_seq(expected_seq, "expected_seq", optional=True)
            check_seq(schema_version, "schema_version", optional=True)
            check_write_options(idempotency_key, actor, lease)
            info = event_info(info)
            await self._ready(write=True)

            try:
                result = await self._writes.write(
                    agent_id,
                    event_type,
                    info,
                    expected_seq=expected_seq,
                    make=append_changes(agent_id, op_list, fsm_state),
                    idempotency_key=idempotency_key,
                    actor=actor,
                    schema_version=schema_version,
                    lease=lease,
                )
            except SerializationError as exc:
                raise locate(exc, self.codec.types, info=info, ops=op_list) from exc
        except BaseException as exc:
            if obs is not None:
                obs.failed(op, mark, exc)
            raise
        if obs is not None:
            obs.done(op, mark, result)
        return result

    async def find_key(self, agent_id: str, key: str) -> AppendResult | None:
        """Where the append of ``agent_id`` that used idempotency ``key`` landed
        (``duplicate=True``), counting buffered writes; None if no append used it.

        Raises :class:`IntegrityError` when the stored idempotency record does not match
        the event it points at (forged or damaged, see :mod:`.idempotency`)."""
        self._check_open()
        check_agent_id(agent_id)
        check_name(key, "key")
        await self._ready()
        return await self._writes.earlier_append(agent_id, key)

    async def snapshot(self, agent_id: str) -> int:
        """Store a snapshot of the latest state now; returns its seq."""
        return await self._after_flush("snapshot", agent_id, self._writes.snapshot, write=True)

    async def settle(self, agent_id: str) -> int | None:
        """Store the agent's head as one whole snapshot, off the save's path: a cold load
        of it then reads one row. Call it once the agent has gone quiet (a turn ended,
        the agent is put away); the snapshot it replaces is removed when no load needs
        it (:mod:`statekeeper.store.settle`). The seq stored, or None: the head is a
        whole snapshot already, the store does not settle (a governed store, deltas
        by ``full_snapshot_every``, an engine without ``PRUNE``), or another process
        wrote the agent (or deleted it and made it again) meanwhile. Observed as
        ``snapshot``."""
        return await self._after_flush("snapshot", agent_id, self._settle, write=True)

    async def _settle(self, agent_id: str) -> int | None:
        return await settle(self._writes, agent_id)

    async def _idle_settle(self, agent_id: str) -> int | None:
        """An idle settle of ``agent_id`` (a stored id): :meth:`settle`'s, not a
        subclass's (a namespaced store's maps ids; a governed one checks a caller)."""
        if not settles(self._writes):  # (a governed store, known once built)
            self._writes.idle = None
            return None
        if agent_id in self._writes.reads.pinned:
            return None  # (buffered writes: its flush queues it again, never flushed here)
        # (its flush raises no WriteBufferError: was taken here, logged as a failed
        # settle, and the caller's flush() and close() then reported success)
        settle_cached = self._settle_cached
        return await self._after_flush(
            "snapshot", agent_id, settle_cached, write=True, report=False
        )

    async def _settle_cached(self, agent_id: str) -> int | None:
        return await settle(self._writes, agent_id, cached_only=True)

    async def idle_settled(self) -> None:
        """Wait until no idle settle (``settle_after``) is due or running: every agent
        this store saved and that has been idle that long is settled (or skipped, or
        failed: ``stats().idle_settles``). Returns at once without ``settle_after``."""
        self._check_open()
        if self._idle is not None:
            await self._idle.idle()

    async def delete(self, agent_id: str) -> bool:
        """Delete the agent's stream and snapshots. True if it existed.

        An agent under a legal hold (:mod:`statekeeper.governance.holds`) is not
        deleted: :class:`~statekeeper.errors.AgentOnHold`."""
        await refuse_if_held(self, check_agent_id(agent_id), "delete")
        return await self._after_flush("delete", agent_id, self._writes.delete)

    async def _after_flush(
        self,
        op: str,
        agent_id: str,
        change: Callable[[str], Awaitable[_T]],
        *,
        write: bool = False,
        report: bool = True,
    ) -> _T:
        """``change(agent_id)`` once the agent's buffered writes are stored, observed as
        ``op`` (a ``write`` of a record: see :meth:`_ready`; ``report``: the flush's
        failures raised here, see :meth:`WritePipeline.flush`)."""
        obs = self.observer
        mark = None if obs is None else _perf() if obs.untraced else obs.begin(op, agent_id)
        try:
            await self._ready(agent_id, write=write)
            await self._flush_agent(agent_id, report=report)
            result = await change(agent_id)
        except BaseException as exc:
            if obs is not None:
                obs.failed(op, mark, exc)
            raise
        if obs is not None:
            obs.done(op, mark, result)
        return result

    # -- agents with a state machine ----------------------------------------------

    def _link_at(self, agent_id: str, seq: int) -> bytes | None:
        """The chain link at ``seq`` of ``agent_id``'s stream as this store last read or
        wrote it (its pinned or cached record: no read), None when not known. What a
        :class:`DurableAgent` remembers to tell its stream from a re-created one."""
        record = self._unflushed.get(agent_id) or self._cache.peek(agent_id)
        return record.link if record is not None and record.seq == seq else None

    def _checksum_at(self, agent_id: str, seq: int) -> bytes | None:
        """The stored checksum of the event at ``seq`` of ``agent_id``'s stream as this
        store last read or wrote it (its pinned or cached record at ``seq``: no read),
        None when not known: what a delete conditional on that head event compares
        (:func:`~statekeeper.store.conditional.delete_only_at`)."""
        record = self._unflushed.get(agent_id) or self._cache.peek(agent_id)
        return record.checksum if record is not None and record.seq == seq else None

    def _tag_at(self, agent_id: str, seq: int) -> bytes | None:
        """The head tag stored with seq ``seq`` of ``agent_id``'s stream as this store
        last read or wrote it (its pinned or cached record, the tag known: no read),
        None when not known. What the LangGraph saver remembers of a thread's stream to
        tell it from one deleted and made again up to the same seq (:meth:`_head_tag`
        gives the stored one): a head seq alone cannot."""
        record = self._unflushed.get(agent_id) or self._cache.peek(agent_id)
        if record is None or record.seq != seq or not record.tag_known:
            return None
        return record.tag

    async def _head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        """:meth:`head` with the head tag stored with it (one read, the same row or
        key: ``Backend.head_tag``); while a write of the agent is buffered, its seq and
        tag (no read, as :meth:`head` counts it). A wrapper store checks and maps it as
        it does :meth:`head` (a governed store: read permission; a namespace: the id)."""
        await self._ready(agent_id)
        pinned = self._unflushed.get(agent_id)
        if pinned is not None:
            return pinned.seq, pinned.tag if pinned.tag_known else None
        return await self.backend.head_tag(agent_id)

    @overload
    async def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        initial_data: Mapping[str, Any] | None = None,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> DurableAgent: ...

    @overload
    async def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        model: type[_M] | ModelSchema[_M],
        initial_state: _M | None = None,
        schemas: SchemaRegistry | None = None,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> TypedAgent[_M]: ...

    async def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        initial_data: Mapping[str, Any] | None = None,
        model: type[Any] | ModelSchema[Any] | None = None,
        initial_state: Any = None,
        schemas: SchemaRegistry | None = None,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> DurableAgent:
        """Load the agent (or create it with ``initial_data``) bound to ``machine``;
        with ``lease``, every write of the agent is fenced by it.

        An event the machine does not allow makes ``agent.transition`` raise
        :class:`~statekeeper.errors.InvalidTransition` (nothing is written, pending
        data changes stay pending); ``strict=False`` gives the bare machine's API
        instead, where it returns False.

        With ``model`` (a pydantic model, dataclass or TypedDict class, or a
        :class:`~statekeeper.schema.ModelSchema`) the agent is a
        :class:`~statekeeper.schema.TypedAgent` whose ``state`` is the model, created
        with ``initial_state`` when new (see ``docs/schema.md``)."""
        if model is not None:
            if initial_data is not None:
                raise ConfigurationError("give initial_data (untyped) or model, not both")
            from ..schema.agent import open_typed_agent

            return await open_typed_agent(
                self, agent_id, machine, model, initial_state,
                schemas=schemas, lease=lease, strict=strict,
            )  # fmt: skip
        if initial_state is not None or schemas is not None:
            raise ConfigurationError("initial_state and schemas need model=")
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
        with self.backend.in_place():  # (a tiered store's demoted agents stay cold)
            return await verification.verify_store(self, agent_ids)

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
        await self._ready()
        await self._flush_agent(agent_id)
        return await digests.digest(self, agent_id, at_seq)

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
        return await digests.check_digest(self, expected)

    # -- introspection -------------------------------------------------------------

    def stats(self) -> StoreStats:
        """Counters: cache hits/misses/evictions, appends, snapshots, buffered writes."""
        writes = self._writes
        behind = writes.behind
        return StoreStats(
            backend=self.backend.name,
            durability=self.durability,
            cache=self._reads.cache.stats(),
            appends=writes.appends + (behind.stored if behind is not None else 0),
            snapshots_written=writes.snapshots_written,
            loads_from_backend=self._reads.loads,
            buffered=len(behind) if behind is not None else 0,
            commits=writes.commits,
            lost=behind.lost if behind is not None else 0,
            idle_settles=self._idle.stats() if self._idle is not None else None,
        )
