"""What users see: :class:`Event` and :class:`Snapshot` (decoded, verified values), the
store's own :class:`EventType` names, and the read path's :func:`make_snapshot`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload

from .deprecation import _renamed, deprecated

__all__ = ["STEP_KEY_PREFIX", "Event", "EventType", "Snapshot", "make_snapshot"]


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


# The read path's hot names (make_snapshot runs on every load) stay bound here, in the
# module of the function that calls them, by assignment as before the split: not
# imported from another module.
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
