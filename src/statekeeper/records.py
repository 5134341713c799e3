"""The durable vocabulary: events, snapshots, and the encoded records backends store.

Two layers of types live here:

* :class:`Event` and :class:`Snapshot` are what users see: decoded, verified values.
* :class:`RawEvent`, :class:`RawSnapshot`, :class:`AppendRequest`,
  :class:`AppendResult` and :class:`AgentInfo` are what a backend sees: opaque
  payload bytes plus the few identifiers it must index (agent id, seq, type,
  timestamp). A backend never interprets a payload.

Vocabulary (one word per concept, in code, docs and the CLI; ARCHITECTURE.md has the
same table):

* **type**: what kind of event it is (``"transition"``, ``"patch"``, a custom name):
  :attr:`Event.type`, :attr:`RawEvent.type`, :class:`EventType`, ``event_type=``
  arguments, ``event_types=`` filters. Was also "kind" (``EventKind``,
  ``RawEvent.kind``); the stored column and field are still named ``kind``.
* **info**: the caller's free-form mapping on an event (``append(..., info)``,
  ``record(type, info)``, :attr:`Event.info`, ``"info"`` in ``history --json``).
  Was ``Event.data``, and ``body`` inside the write path.
* **data**: an agent's data document (:attr:`Snapshot.data`, ``agent.data``); only
  that. An event's change to it is its ``ops`` (JSON Patch).
* **state**: an agent's FSM state plus data at a seq. The value :meth:`load` returns
  is a :class:`Snapshot` (the seed's and LangGraph's word for a read of the state),
  whether or not it was read from a stored snapshot; ``fsm_state`` is the machine's
  state alone.
* **snapshot** (stored): a fold written into the stream at a seq so a load need not
  replay from seq 1 (:class:`RawSnapshot`, ``snapshot_every``, ``store.snapshot()``;
  *whole* or a *delta*). A database's consistent read is called a *consistent read*,
  never a snapshot.
* One value on its way to disk: **info** (the caller's mapping) -> **body** (info plus
  the reserved keys the store writes, :mod:`statekeeper.store.body`; serialized, it is
  still the body: the bytes :meth:`Codec.seal` takes and ``Opened.body`` gives back)
  -> **payload** (the sealed bytes a backend stores, :attr:`RawEvent.payload`).
  ``agent.transition(event, metadata)`` writes ``metadata`` inside the info.
* **type** of a record, in the codec: the event's type, or ``"snapshot"``
  (``SNAPSHOT_TYPE``); bound into the record's checksum and link. ``Codec.seal`` and
  ``Codec.open`` call it ``record_type`` (``kind=`` is their deprecated keyword).
* **timestamp**: when a record was written, epoch seconds as a float
  (:attr:`Event.timestamp`, :attr:`RawEvent.timestamp`, the codec's ``timestamp``
  argument). Was also ``ts`` (a deprecated keyword where it was one); the stored column
  and the export file's field keep the name ``ts``.
* **record**: one stored event or snapshot (its bytes and identifiers);
  **stream**: an agent's records in seq order; **head**: the last seq of a stream.

Over 600 lines because it is one vocabulary: every record type a user or a backend sees
(and the read path's constructors of two of them, which must follow their classes), in
the one module everything imports; split, the table above would span modules.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, overload

if TYPE_CHECKING:  # mypy (run with the "deprecated" error code) flags every use
    from typing_extensions import deprecated
else:  # at run time a warning, without importing typing_extensions (~20 ms measured
    # with -X importtime on first use of the store, which did not import it before)
    def deprecated(message):
        def wrap(fn):
            @functools.wraps(fn)
            def warned(*args, **kwargs):
                warnings.warn(message, DeprecationWarning, stacklevel=2)
                return fn(*args, **kwargs)

            return warned

        return wrap


__all__ = [
    "STEP_KEY_PREFIX",
    "AgentInfo",
    "AppendRequest",
    "AppendResult",
    "AuditMark",
    "Event",
    "EventType",
    "FeedEvent",
    "FeedRecord",
    "Fence",
    "LeaseChange",
    "LeaseInfo",
    "RawEvent",
    "RawSnapshot",
    "RewriteRequest",
    "Snapshot",
    "StreamChange",
]


@dataclass(frozen=True, slots=True)
class AuditMark:
    """The audit entry one append is recorded with
    (:meth:`statekeeper.governance.AuditLog.write_with`): who made which operation on
    which seqs of which agent."""

    operation: str
    principal: str | None
    agent_id: str
    first_seq: int
    last_seq: int


class EventType:
    """Types of events the store itself writes. Any other string is a custom event."""

    CREATED = "created"
    TRANSITION = "transition"
    PATCH = "patch"
    STEP = "step"


#: the idempotency keys of durable steps' records are ``STEP_KEY_PREFIX + step_id``
#: (:mod:`statekeeper.concurrency.steps`); ``Backend.expire_keys`` never forgets one
STEP_KEY_PREFIX = "step:"


@dataclass(frozen=True, slots=True)
class Event:
    """One verified, decoded event of an agent's stream.

    ``info`` is the caller's mapping written with the event (for a transition: the
    ``event``, ``from``, ``to`` and ``metadata``); ``ops`` is the JSON Patch (RFC 6902)
    this event applied to the data document (empty for events that did not change
    data); ``fsm_state`` is the state machine state after the event when the event
    moved it, else ``None``.

    ``data`` (attribute and keyword) is the deprecated name of ``info``.
    """

    agent_id: str
    seq: int
    type: str
    timestamp: float
    info: dict[str, Any] = field(default_factory=dict)
    ops: list[dict[str, Any]] = field(default_factory=list)
    fsm_state: str | None = None
    schema_version: int = 1
    actor: str | None = None
    idempotency_key: str | None = None

    # written out (as the generated one would be) to take the old keyword too
    @overload
    def __init__(
        self,
        agent_id: str,
        seq: int,
        type: str,
        timestamp: float,
        info: dict[str, Any] | None = None,
        ops: list[dict[str, Any]] | None = None,
        fsm_state: str | None = None,
        schema_version: int = 1,
        actor: str | None = None,
        idempotency_key: str | None = None,
    ) -> None: ...
    @overload
    @deprecated("Event(data=...) is deprecated: use Event(info=...)")
    def __init__(
        self,
        agent_id: str,
        seq: int,
        type: str,
        timestamp: float,
        *,
        data: dict[str, Any],
        ops: list[dict[str, Any]] | None = None,
        fsm_state: str | None = None,
        schema_version: int = 1,
        actor: str | None = None,
        idempotency_key: str | None = None,
    ) -> None: ...
    def __init__(
        self,
        agent_id: str,
        seq: int,
        type: str,
        timestamp: float,
        info: dict[str, Any] | None = None,
        ops: list[dict[str, Any]] | None = None,
        fsm_state: str | None = None,
        schema_version: int = 1,
        actor: str | None = None,
        idempotency_key: str | None = None,
        *,
        data: dict[str, Any] | None = None,
    ) -> None:
        if data is not None:
            _renamed("Event(data=...)", "Event(info=...)")
            info = data  # the old name wins: dataclasses.replace(ev, data=...) passes both
        put = object.__setattr__
        put(self, "agent_id", agent_id)
        put(self, "seq", seq)
        put(self, "type", type)
        put(self, "timestamp", timestamp)
        put(self, "info", {} if info is None else info)
        put(self, "ops", [] if ops is None else ops)
        put(self, "fsm_state", fsm_state)
        put(self, "schema_version", schema_version)
        put(self, "actor", actor)
        put(self, "idempotency_key", idempotency_key)

    @property
    @deprecated("Event.data is deprecated: use Event.info")
    def data(self) -> dict[str, Any]:
        """Deprecated name of :attr:`info`."""
        return self.info


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The folded state of an agent at ``seq``: FSM state plus data document.

    ``state_entered_at`` is when the FSM entered ``fsm_state``.
    """

    agent_id: str
    seq: int
    fsm_state: str | None
    data: dict[str, Any]
    schema_version: int
    created_at: float
    updated_at: float
    state_entered_at: float = 0.0


def make_snapshot(
    agent_id: str,
    seq: int,
    fsm_state: str | None,
    data: dict[str, Any],
    schema_version: int,
    created_at: float,
    updated_at: float,
    state_entered_at: float = 0.0,
) -> Snapshot:
    """A :class:`Snapshot` of these fields, as ``Snapshot(...)`` builds it, for the read
    path (every load builds one). The generated ``__init__`` of a frozen dataclass sets
    each field with ``object.__setattr__(self, name, value)`` (a name lookup per field);
    here each slot's own setter, bound once below, fills it (as :class:`AppendResult`):
    the values come from a record that was just verified and decoded, nothing to check."""
    snap = _new(Snapshot)
    _snap_agent_id(snap, agent_id)
    _snap_seq(snap, seq)
    _snap_fsm_state(snap, fsm_state)
    _snap_data(snap, data)
    _snap_schema_version(snap, schema_version)
    _snap_created_at(snap, created_at)
    _snap_updated_at(snap, updated_at)
    _snap_state_entered_at(snap, state_entered_at)
    return snap


_new = object.__new__
# (the slots' member descriptors, from the class's namespace)
_snap_agent_id = vars(Snapshot)["agent_id"].__set__
_snap_seq = vars(Snapshot)["seq"].__set__
_snap_fsm_state = vars(Snapshot)["fsm_state"].__set__
_snap_data = vars(Snapshot)["data"].__set__
_snap_schema_version = vars(Snapshot)["schema_version"].__set__
_snap_created_at = vars(Snapshot)["created_at"].__set__
_snap_updated_at = vars(Snapshot)["updated_at"].__set__
_snap_state_entered_at = vars(Snapshot)["state_entered_at"].__set__


@dataclass(frozen=True, slots=True)
class RawEvent:
    """An encoded event as a backend stores it. ``checksum`` covers agent, seq, type,
    payload. ``kind`` (attribute and keyword) is the deprecated name of ``type`` (the
    engines' stored column keeps the name ``kind``)."""

    seq: int
    type: str
    timestamp: float
    payload: bytes
    checksum: bytes

    # written out (as the generated one would be) to take the old keyword too
    @overload
    def __init__(
        self, seq: int, type: str, timestamp: float, payload: bytes, checksum: bytes
    ) -> None: ...
    @overload
    @deprecated("RawEvent(kind=...) is deprecated: use RawEvent(type=...)")
    def __init__(
        self, seq: int, *, kind: str, timestamp: float, payload: bytes, checksum: bytes
    ) -> None: ...
    def __init__(
        self,
        seq: int,
        type: str | None = None,
        timestamp: float | None = None,
        payload: bytes | None = None,
        checksum: bytes | None = None,
        *,
        kind: str | None = None,
    ) -> None:
        if type is None or timestamp is None or payload is None or checksum is None:
            if kind is not None and type is None:
                _renamed("RawEvent(kind=...)", "RawEvent(type=...)")
                type = kind
            missing = [
                name
                for name, value in (
                    ("type", type),
                    ("timestamp", timestamp),
                    ("payload", payload),
                    ("checksum", checksum),
                )
                if value is None
            ]
            if missing:
                raise TypeError(f"RawEvent() missing required arguments: {missing}")
        put = object.__setattr__
        put(self, "seq", seq)
        put(self, "type", type)
        put(self, "timestamp", timestamp)
        put(self, "payload", payload)
        put(self, "checksum", checksum)

    @property
    @deprecated("RawEvent.kind is deprecated: use RawEvent.type")
    def kind(self) -> str:
        """Deprecated name of :attr:`type`."""
        return self.type


def event_rows(events: Sequence[RawEvent]) -> list[EventRow]:
    """``events`` as :data:`EventRow` tuples: what the read path folds (an engine whose
    cursor returns such rows hands them over with no :class:`RawEvent` built per event:
    a Python ``__init__``, ~1 us each)."""
    return [(e.seq, e.type, e.timestamp, e.payload, e.checksum) for e in events]


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    """An encoded snapshot as a backend stores it."""

    seq: int
    timestamp: float
    payload: bytes
    checksum: bytes


def make_raw_snapshot(seq: int, timestamp: float, payload: bytes, checksum: bytes) -> RawSnapshot:
    """A :class:`RawSnapshot`, as ``RawSnapshot(...)`` builds it, through the slots'
    setters (see :func:`make_snapshot`): what an engine's read of a snapshot row makes
    (every cold load at a snapshot)."""
    raw = _new(RawSnapshot)
    _raw_seq(raw, seq)
    _raw_timestamp(raw, timestamp)
    _raw_payload(raw, payload)
    _raw_checksum(raw, checksum)
    return raw


_raw_seq = vars(RawSnapshot)["seq"].__set__
_raw_timestamp = vars(RawSnapshot)["timestamp"].__set__
_raw_payload = vars(RawSnapshot)["payload"].__set__
_raw_checksum = vars(RawSnapshot)["checksum"].__set__


#: ``(holder, token)``: the lease a write is made under (see :class:`AppendRequest`)
Fence: TypeAlias = tuple[str, int]


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Append ``events`` to ``agent_id`` if and only if its head is ``expected_seq``.

    The events' ``seq`` values must be ``expected_seq + 1 …`` without gaps. When
    ``idempotency_key`` was already used for this agent, nothing is written and the
    result of the first append is returned with ``duplicate=True``. ``snapshot``, when
    given, is stored in the same atomic write.

    ``fence`` is ``(holder, token)`` of the lease the write is made under: the backend
    accepts the append only if that is still the agent's newest lease, checked in the
    same atomic step as the append, and otherwise raises
    :class:`~statekeeper.errors.LeaseLost` (checked before the idempotency key and the
    head). ``None`` writes without a lease (optimistic concurrency only).

    ``head_tag`` is the authenticated stream head after this append (opaque bytes made
    by the codec): the backend stores it with the head in the same atomic write,
    replacing the previous one (``None`` stores no tag), and returns it from
    :meth:`~statekeeper.backends.base.Backend.head_tag`. A duplicate or failed append
    leaves the stored tag unchanged.

    With ``check_tag`` the head must also still carry the tag ``expected_tag``
    (``None`` matching a stream stored without a tag), compared in the same atomic
    step as the head seq, else :class:`~statekeeper.errors.ConflictError`: the tag
    commits to the whole chain, so a stream deleted and re-created up to the same seq
    by another writer is told from the one the writer folded (its *incarnation*).
    Only a backend whose ``compares_head_tag`` is true is given ``check_tag``.
    """

    agent_id: str
    expected_seq: int
    events: Sequence[RawEvent]
    snapshot: RawSnapshot | None = None
    idempotency_key: str | None = None
    fence: Fence | None = None
    head_tag: bytes | None = None
    expected_tag: bytes | None = None
    check_tag: bool = False


@dataclass(frozen=True, slots=True)
class StreamChange:
    """A change of one stream other than an append, committed in the same transaction
    as appends (``Backend.append_together(requests, changes)``): the governed store
    writes a delete or a snapshot and its audit entry as one commit.

    Either ``delete_at`` alone: the stream (events, snapshots, idempotency keys) is
    deleted if and only if its head is still that seq, else
    :class:`~statekeeper.errors.ConflictError` (so the entry names the head it
    erased) — and, with ``delete_checksum``, only if its head event's stored checksum
    is still that one (the head record's identity: a stream deleted and written again
    up to the same seq has another, so it is not deleted); or ``snapshot`` and/or
    ``prune_to``: ``snapshot`` is stored (its event must
    exist, else :class:`~statekeeper.errors.ConflictError`), then the stream is pruned
    as by ``Backend.prune(agent_id, prune_to, drop_snapshots)`` (history up to
    ``prune_to`` removed, 0: none; the snapshots ``drop_snapshots`` removed), so a
    retention run's compaction or thinning commits with its entry. A prune whose
    preconditions fail (``check_prune``) raises
    :class:`~statekeeper.errors.ConfigurationError` and nothing is written. With
    ``prune_head`` (and ``prune_checksum``), the snapshot and the prune are made only
    while the head is still that seq (and its event's stored checksum that one: the
    head record's identity, as ``Backend.prune`` takes them), else
    :class:`~statekeeper.errors.ConflictError` and nothing is written — a stream
    deleted and written again up to the same seq since the prune was planned is
    another stream.

    Or ``lease`` alone (engines with leases): the agent's lease granted or released
    as :class:`LeaseChange` says, so a lease and its audit entry are one commit. Or
    ``rewrite`` alone (engines with ``rewrite``): the :class:`RewriteRequest` of the
    same agent applied as by ``Backend.rewrite`` (a stale head raises
    :class:`~statekeeper.errors.ConflictError`), so a key rotation or a schema
    migration of an agent commits with its entry.

    Or ``absent=True`` alone (engines with ``checks_absence_together``): nothing is
    changed, the commit is made only while the stream has no events (head 0), else
    :class:`~statekeeper.errors.ConflictError` naming it (expected 0, its head) and
    nothing is written — a write of another stream (a feed tombstone of an agent an
    import writes anew) conditional on the agent not existing at its commit."""

    agent_id: str
    delete_at: int | None = None
    snapshot: RawSnapshot | None = None
    prune_to: int | None = None
    drop_snapshots: tuple[int, ...] = ()
    lease: LeaseChange | None = None
    rewrite: RewriteRequest | None = None
    delete_checksum: bytes | None = None
    prune_head: int | None = None
    prune_checksum: bytes | None = None
    absent: bool = False


@dataclass(frozen=True, slots=True)
class LeaseChange:
    """A lease grant or release made in an ``append_together`` commit
    (:class:`StreamChange`).

    A grant (``ttl`` given): the lease goes to ``holder`` for ``ttl`` seconds with
    fencing token ``token``, which must be the stored token plus one (1 for an agent
    never leased), else :class:`~statekeeper.errors.ConflictError` (the token the
    audit entry names is the one granted); another holder's running lease raises
    :class:`~statekeeper.errors.LeaseHeld`. A release (``ttl`` None): ``(holder,
    token)`` must be the current lease, else :class:`~statekeeper.errors.LeaseLost`.
    Either way nothing of the commit is written when it fails."""

    holder: str
    token: int
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class RewriteRequest:
    """Replace the stored bytes of existing records of ``agent_id`` (key rotation,
    format upgrades), atomically, if and only if its head is still ``expected_seq``
    with head tag ``expected_tag`` (``None`` matching a stream stored without a tag).

    Each event in ``events`` replaces the payload and checksum of the stored event with
    the same seq (its type and timestamp are not changed; its seq must be within
    ``1..expected_seq``, and it must be stored: one below the stream's pruned base
    raises :class:`~statekeeper.errors.ConfigurationError` naming the agent and the seq,
    and nothing of the request is written); each snapshot in ``snapshots`` is stored as by
    ``save_snapshot`` (replacing one at the same seq; one below the stream's pruned
    base, which the prune removed, is refused the same way — the one AT the base is
    kept by the prune and rewrites); ``head_tag``, when not None,
    replaces the stored head tag (the head seq never changes). A stale head raises
    :class:`~statekeeper.errors.ConflictError` and writes nothing.
    """

    agent_id: str
    expected_seq: int
    expected_tag: bytes | None
    events: Sequence[RawEvent] = ()
    snapshots: Sequence[RawSnapshot] = ()
    head_tag: bytes | None = None


@dataclass(frozen=True, slots=True)
class StreamExport:
    """A slice of one agent's stream as stored, for backups
    (:meth:`~statekeeper.backends.base.Backend.export_streams`): the events with
    ``after_seq <= seq <= to_seq`` (the event *at* ``after_seq`` included, so a reader
    can check the stream still continues the one it copied before), the latest snapshot
    at or below ``to_seq``, the stored head and head tag, and the idempotency keys as
    ``(key, first_seq, last_seq)``."""

    agent_id: str
    head: int
    head_tag: bytes | None
    events: list[RawEvent]
    snapshot: RawSnapshot | None
    keys: list[tuple[str, int, int]]


#: an event as stored, as a plain tuple: ``(seq, type, timestamp, payload, checksum)``
EventRow = tuple[int, str, float, bytes, bytes]
#: a snapshot as stored, as a plain tuple: ``(seq, timestamp, payload, checksum)``
SnapshotRow = tuple[int, float, bytes, bytes]


class StreamRows(NamedTuple):
    """:class:`StreamExport` with its records as plain tuples, what a backup packs
    (:meth:`~statekeeper.backends.base.Backend.export_rows`): no object per record, so
    an engine can hand over its rows as it reads them."""

    agent_id: str
    head: int
    head_tag: bytes | None
    events: list[EventRow]
    snapshot: SnapshotRow | None
    keys: list[tuple[str, int, int]]
    #: a stream compacted by retention: its base snapshot (the events start after it);
    #: filled by readers that need it (a restore of a file backup), else None
    base: SnapshotRow | None = None


@dataclass(frozen=True, slots=True, init=False)
class AppendResult:
    """Where an append landed: ``first_seq``..``last_seq`` of ``agent_id``."""

    agent_id: str
    first_seq: int
    last_seq: int
    duplicate: bool = False

    def __init__(
        self, agent_id: str, first_seq: int, last_seq: int, duplicate: bool = False
    ) -> None:
        # (the generated __init__ of a frozen dataclass, without its four
        # ``object.__setattr__(self, name, value)``: each slot's own setter, bound once
        # below, skips the lookup of the name; made on every save, measured 2.5x faster
        # by timeit — docs/benchmarks.md, "seqfloor")
        _set_agent_id(self, agent_id)
        _set_first_seq(self, first_seq)
        _set_last_seq(self, last_seq)
        _set_duplicate(self, duplicate)


# (the slots' member descriptors, from the class's namespace)
_set_agent_id = vars(AppendResult)["agent_id"].__set__
_set_first_seq = vars(AppendResult)["first_seq"].__set__
_set_last_seq = vars(AppendResult)["last_seq"].__set__
_set_duplicate = vars(AppendResult)["duplicate"].__set__


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """A row of :meth:`Backend.list_agents`: an agent and its stream head."""

    agent_id: str
    head_seq: int
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """An agent's lease as a backend stores it.

    ``token`` is the fencing token: it grows by at least one with every grant and never
    goes back for an agent (not even after the agent is deleted). ``expires_at`` is in
    seconds since the epoch on the backend's clock (see each backend); a released
    lease has ``holder`` None.
    """

    agent_id: str
    holder: str | None
    token: int
    expires_at: float

    @property
    def fence(self) -> Fence:
        """``(holder, token)`` to put on writes made under this lease."""
        return (self.holder or "", self.token)


@dataclass(frozen=True, slots=True)
class FeedRecord:
    """A row of the change feed as a backend returns it (see
    :meth:`~statekeeper.backends.base.Backend.read_feed`): the stored event of
    ``agent_id`` and its store-wide ``position``."""

    position: int
    agent_id: str
    event: RawEvent


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One verified event of the change feed: ``event`` and its store-wide ``position``
    (increasing in the order the appends committed; gaps are normal). Resume a
    subscription after a crash with ``from_position=`` the last position handled."""

    position: int
    event: Event
    #: the shard whose feed ``position`` belongs to (0 on a store with one feed; on a
    #: sharded store positions are per shard, see ``statekeeper.store.feed_cursor``)
    shard: int = 0
    #: True for a tombstone: the agent ``event.agent_id`` was deleted or forgotten
    #: (``event.type`` is ``"statekeeper.agent_deleted"``, ``event.seq`` the head it
    #: ended at, ``event.info["forgotten"]``): drop what was derived from its events
    deleted: bool = False

    @property
    def agent_id(self) -> str:
        return self.event.agent_id

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def type(self) -> str:
        return self.event.type


def _renamed(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


#: old public names of this module -> their new names (they warn on each access)
_RENAMED = {"EventKind": "EventType"}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"statekeeper.records.{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2
    )
    return globals()[new]
