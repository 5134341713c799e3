"""``StateStore``: durable agent state as event streams plus snapshots.

An agent's state is its FSM state plus a JSON data document. Every change is an event
appended to the agent's stream with a gap-free ``seq``; data changes are stored as
JSON Patch diffs. Snapshots of the folded state are stored in the same atomic write as
the event that makes one due, so loading is *latest snapshot + the events after it*,
whatever the length of the stream.

This module opens and closes the store and wires its parts, each in its own module —
the read path (:mod:`.reads`: decode, fold, cache), the write pipeline (:mod:`.writes`:
build one append, submit it), the snapshot policy (:mod:`.snapshots`), the stored record
body (:mod:`.body`), verification (:mod:`.verification`, :mod:`.digests`) and the
witness (:mod:`.witnessing`). The backend only stores bytes.

The public API — its methods' docstrings and argument checks — is written in one module
per job and bound in the class body here: the reads (:mod:`.store_reads`), the change
feed (:mod:`.store_feed`), the writes (:mod:`.store_writes`), an agent with a state
machine (:mod:`.store_agents`), and the checks (:mod:`.store_verify`).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..arguments import check_agent_id
from ..backends.base import Backend
from ..backends.url import open_backend
from ..codec import Codec, Opened, TypeRegistry
from ..errors import ConfigurationError, NotAStore, StoreClosed, UnsavedChangesWarning
from ..records import RawEvent
from ..security.held import held_check, marked_at, unheld
from ..security.highwater import DEFAULT_INTERVAL, HighWater
from . import forks, store_agents, store_feed, store_reads, store_verify, store_writes
from .cache import CacheStats
from .digests import StreamDigest
from .durability import Durability
from .heads import StoredSize, stored_size
from .idle_settle import IdleSettler, IdleSettleStats
from .keyguard import KeyGuard, own_codec
from .machines import Machines
from .options import check_options, state_values
from .reads import ReadPath
from .settle import settle
from .snapshots import AUTO_MAX_EVENTS, COST_MAX_EVENTS, SnapshotPolicy
from .state import AgentRecord
from .verification import Problem, VerifyReport
from .witnessing import WitnessGate, asker, open_witness, vanished
from .writes import Leased, WritePipeline

if TYPE_CHECKING:
    from ..codec.keys import Keyring
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

    # (here, not in their parts: a function of their name there would hide the one of
    # .heads or .settle they call)

    async def stored_size(self, agent_id: str) -> StoredSize:
        """Stored bytes of the agent's events and latest snapshot (nothing decoded)."""
        self._check_open()
        return await stored_size(self, agent_id)

    async def settle(self, agent_id: str) -> int | None:
        """Store the agent's head as one whole snapshot, off the save's path: a cold load
        of it then reads one row. Call it once the agent has gone quiet (a turn ended,
        the agent is put away); the snapshot it replaces is removed when no load needs
        it (:mod:`statekeeper.store.settle`). The seq stored, or None: the head is a
        whole snapshot already, the store does not settle (a governed store, deltas
        by ``full_snapshot_every``, an engine without ``PRUNE``), or another process
        wrote the agent (or deleted it and made it again) meanwhile. On an engine that
        cannot store the row only at the head it read (S3),
        :class:`~statekeeper.errors.CapabilityUnsupported`, nothing written. Observed
        as ``snapshot``."""
        return await self._after_flush("snapshot", agent_id, self._settle, write=True)

    async def _settle(self, agent_id: str) -> int | None:
        return await settle(self._writes, agent_id)

    async def _settle_cached(self, agent_id: str) -> int | None:
        return await settle(self._writes, agent_id, cached_only=True)

    # -- the public API, one part per module (their functions are its methods) -------

    # the witness and verification (store_verify.py)
    witness_problems = store_verify.witness_problems
    orphan_problems = store_verify.orphan_problems
    verify = store_verify.verify
    digest = store_verify.digest
    check_digest = store_verify.check_digest

    # reading (store_reads.py)
    get = store_reads.get
    _get_shared = store_reads._get_shared
    _get = store_reads._get
    get_many = store_reads.get_many
    load = store_reads.load
    head = store_reads.head
    head_state = store_reads.head_state
    head_states = store_reads.head_states
    history = store_reads.history
    list_agents = store_reads.list_agents
    _agents_only = store_reads._agents_only
    unlisted_agents = store_reads.unlisted_agents
    iter_agents = store_reads.iter_agents
    count_agents = store_reads.count_agents
    health = store_reads.health

    # the change feed (store_feed.py)
    subscribe = store_feed.subscribe
    _feed_access = store_feed._feed_access
    feed_bounds = store_feed.feed_bounds
    feed_cursor_bounds = store_feed.feed_cursor_bounds
    trim_feed = store_feed.trim_feed
    feed_intents = store_feed.feed_intents
    settle_feed_intents = store_feed.settle_feed_intents

    # writing (store_writes.py)
    create = store_writes.create
    save = store_writes.save
    append = store_writes.append
    find_key = store_writes.find_key
    snapshot = store_writes.snapshot
    _idle_settle = store_writes._idle_settle
    idle_settled = store_writes.idle_settled
    delete = store_writes.delete
    _after_flush = store_writes._after_flush

    # agents with a state machine (store_agents.py)
    _link_at = store_agents._link_at
    _checksum_at = store_agents._checksum_at
    _tag_at = store_agents._tag_at
    _head_tag = store_agents._head_tag
    agent = store_agents.agent

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
