"""The durable vocabulary: events, snapshots, and the encoded records backends store.

Two layers of types live here:

* :class:`Event` and :class:`Snapshot` are what users see: decoded, verified values.
* :class:`RawEvent`, :class:`RawSnapshot`, :class:`AppendRequest`,
  :class:`AppendResult` and :class:`AgentInfo` are what a backend sees: opaque
  payload bytes plus the few identifiers it must index (agent id, seq, kind,
  timestamp). A backend never interprets a payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "AgentInfo",
    "AppendRequest",
    "AppendResult",
    "AuditMark",
    "Event",
    "EventKind",
    "FeedEvent",
    "FeedRecord",
    "Fence",
    "LeaseInfo",
    "RawEvent",
    "RawSnapshot",
    "RewriteRequest",
    "Snapshot",
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


class EventKind:
    """Kinds of events the store itself writes. Any other string is a custom event."""

    CREATED = "created"
    TRANSITION = "transition"
    PATCH = "patch"
    STEP = "step"


@dataclass(frozen=True, slots=True)
class Event:
    """One verified, decoded event of an agent's stream.

    ``ops`` is the JSON Patch (RFC 6902) this event applied to the data document (empty
    for events that did not change data); ``fsm_state`` is the state machine state
    after the event when the event moved it, else ``None``.
    """

    agent_id: str
    seq: int
    type: str
    timestamp: float
    data: dict[str, Any] = field(default_factory=dict)
    ops: list[dict[str, Any]] = field(default_factory=list)
    fsm_state: str | None = None
    schema_version: int = 1
    actor: str | None = None
    idempotency_key: str | None = None


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


@dataclass(frozen=True, slots=True)
class RawEvent:
    """An encoded event as a backend stores it. ``checksum`` covers agent, seq, kind, payload."""

    seq: int
    kind: str
    timestamp: float
    payload: bytes
    checksum: bytes


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    """An encoded snapshot as a backend stores it."""

    seq: int
    timestamp: float
    payload: bytes
    checksum: bytes


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
class RewriteRequest:
    """Replace the stored bytes of existing records of ``agent_id`` (key rotation,
    format upgrades), atomically, if and only if its head is still ``expected_seq``
    with head tag ``expected_tag`` (``None`` matching a stream stored without a tag).

    Each event in ``events`` replaces the payload and checksum of the stored event with
    the same seq (its kind and timestamp are not changed; its seq must be within
    ``1..expected_seq``); each snapshot in ``snapshots`` is stored as by
    ``save_snapshot`` (replacing one at the same seq); ``head_tag``, when not None,
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


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed: ``first_seq``..``last_seq`` of ``agent_id``."""

    agent_id: str
    first_seq: int
    last_seq: int
    duplicate: bool = False


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

    @property
    def agent_id(self) -> str:
        return self.event.agent_id

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def type(self) -> str:
        return self.event.type
