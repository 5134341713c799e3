"""What a write is given, and what it makes of it: the checks of a write's arguments
(:func:`event_info`, :func:`check_event_type`, :func:`check_write_options`, the lease's
agent), the changes a save or an append makes on the state it is written onto
(:func:`save_changes`, :func:`append_changes`), a serialization error located in what
was given (:func:`locate`), and what a caller carries through a write (:data:`SEEN`,
:data:`SAVE_CARRY`). Used by the store's write calls and by :class:`~.writes.WritePipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from .. import patch
from ..arguments import check_mapping, check_name, check_optional_name
from ..codec import TypeRegistry
from ..codec.types import to_plain
from ..errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    SerializationError,
)
from ..records import Fence, LeaseInfo
from . import feed_deletes
from .body import RESERVED, SNAPSHOT_TYPE
from .change import diff_by_key, dump_keys, plain
from .state import AgentRecord, document, unpack_document

__all__ = [
    "SAVE_CARRY",
    "SEEN",
    "Leased",
    "Make",
    "Packed",
    "Seen",
    "append_changes",
    "check_event_type",
    "check_lease_agent",
    "check_write_options",
    "event_info",
    "lease_agent",
    "locate",
    "recreated",
    "save_changes",
]


class Seen:
    """What a :class:`~.agent.DurableAgent` carries through :data:`SEEN`: ``seq`` and
    ``link``, the chain link at ``seq`` of the stream it last read or wrote (None: not
    known), and ``adopted``, set by the store: the chain link of the state the call
    returned (a ``get`` / ``load`` of the latest state) or made (a write; None when not
    made or not known). The agent takes its link from there rather than from the
    store's cache, which may not hold the record (cache off, or evicted). ``tag``:
    the head tag stored with ``seq`` of that stream, when the caller knows it rather
    than the link (the LangGraph saver's compaction fence): compared the same way.
    ``adopted_tag``, set with ``adopted``: the head tag stored with that state (None:
    not known), which the saver remembers where the store's cache does not hold the
    record (``cache_size=0``, or evicted) — without it, its writes were made at the
    seq alone. ``adopted_checksum``, set by a write with ``adopted``: the stored
    checksum of the event it wrote at the head (what a delete conditional on that
    record compares: the compaction's cut-over deletes the fenced generation at it).
    ``adopted_replay``, set by a read with ``adopted``: (stored bytes of the events after
    the state's latest snapshot, stored bytes of that snapshot, 0: none or not known),
    what the LangGraph saver counts towards the thread's next snapshot."""

    __slots__ = (
        "adopted",
        "adopted_checksum",
        "adopted_replay",
        "adopted_tag",
        "link",
        "seq",
        "tag",
    )

    def __init__(self, seq: int, link: bytes | None, tag: bytes | None = None) -> None:
        self.seq = seq
        self.link = link
        self.tag = tag
        self.adopted: bytes | None = None
        self.adopted_tag: bytes | None = None
        self.adopted_checksum: bytes | None = None
        self.adopted_replay: tuple[int, int] | None = None


#: a :class:`Seen`, set by a :class:`~.agent.DurableAgent` around the ``StateStore``
#: call of its write or load (a context variable: the public calls take no such
#: argument, and wrapper stores pass it on unchanged). A write expecting ``seq`` on a
#: stream whose link there differs from ``link`` is a write onto a stream deleted and
#: re-created since: :meth:`WritePipeline.write` refuses it (no read of its own: the
#: link is the head's, already read or cached, that the head tag authenticates).
SEEN: ContextVar[Seen | None] = ContextVar("statekeeper_seen", default=None)

#: The document a save writes, made from the state it is written onto: set around a
#: :meth:`StateStore.save` by a typed save (``statekeeper.schema.TypedStates.save``),
#: which puts back the stored keys its model does not declare (and refuses to write
#: over a state stored by newer code that it cannot read). Called with a function
#: giving that state's document (unpacked only when called) and its schema version by
#: the save's ``make`` (:func:`save_changes`), so on the very record the write is made
#: on — the cached one, or the one the write read, again after a conflict — without a
#: read of its own. Taken by the first save that sees it (a save made inside that save
#: does not).
SAVE_CARRY: ContextVar[Callable[[Callable[[], Any], int | None], Mapping[str, Any]] | None] = (
    ContextVar("statekeeper_save_carry", default=None)
)


def recreated(agent_id: str, seq: int) -> ConflictError:
    """The conflict of a write made on ``seq`` of a stream since deleted and re-created."""
    error = ConflictError(agent_id, seq, seq)
    error.add_note(
        f"agent {agent_id!r} was deleted and re-created since this agent object read it: "
        "its head seq is the same, but it is another stream; nothing was written "
        "(call agent.refresh() to load the stored state)"
    )
    return error


#: what a write changes, given the state it is made on (None: no stream yet):
#: (JSON Patch ops on the data, the FSM state to store or None)
Make = Callable[[AgentRecord | None], tuple[list[dict[str, Any]], str | None]]


class Leased(Protocol):
    """What a write can be made under: anything with a ``fence`` — ``(holder, token)``
    — such as :class:`statekeeper.concurrency.Lease` or a
    :class:`~statekeeper.records.LeaseInfo`."""

    @property
    def fence(self) -> Fence:
        """``(holder, token)`` of the lease."""
        ...


def event_info(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """The caller's event information, refused if it would shadow what the store writes."""
    body = dict(check_mapping(info, "info", optional=True) or {})
    bad = RESERVED.intersection(body)
    if bad:
        raise ConfigurationError(f"event info may not use reserved keys {sorted(bad)}")
    return body


def locate(
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


def check_event_type(event_type: object) -> None:
    """An event type the caller may use: the snapshot's is reserved, and so is a delete's
    tombstone's (an agent's own event of that type was handed to feed consumers with the
    type docs/feed.md tells them a delete has)."""
    check_name(event_type, "event_type")
    if event_type == SNAPSHOT_TYPE or event_type == feed_deletes.AGENT_DELETED:
        raise InvalidArgument("event_type", f"event_type {event_type!r} is reserved")


def check_write_options(idempotency_key: object, actor: object, lease: object) -> None:
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


def lease_agent(lease: object) -> str | None:
    """The stored id of the agent ``lease`` was granted on: a
    :class:`~statekeeper.concurrency.Lease`'s ``stored_id``, a
    :class:`~statekeeper.records.LeaseInfo`'s ``agent_id`` (None: it does not say)."""
    leased = getattr(lease, "stored_id", None)
    if leased is None and isinstance(lease, LeaseInfo):
        leased = lease.agent_id
    return leased if isinstance(leased, str) else None


def check_lease_agent(
    agent_id: str, lease: object, name: Callable[[str], str] | None = None
) -> None:
    """Refuse a write to ``agent_id`` (the stored id) under a lease granted on another
    agent, before anything is written. Fencing tokens count per agent (each agent's
    first lease is token 1), so the backend's token check alone would take the lease of
    one agent for the lease of another. ``name`` gives the ids as the caller names
    them (a namespaced store's relative ids); the error's ``agent_ids`` are
    ``[agent_id, the lease's agent]``."""
    leased = lease_agent(lease)
    if leased is None or leased == agent_id:
        return
    shown = name or str
    error = InvalidArgument(
        "lease",
        f"the lease given was granted on agent {shown(leased)!r}, not on agent "
        f"{shown(agent_id)!r}: a lease fences writes of its own agent only (acquire one "
        f"on {shown(agent_id)!r}); nothing was written",
    )
    error.agent_ids = [agent_id, leased]  # type: ignore[attr-defined]
    raise error


class Packed:
    """What a save's change detection packed of the new data (see :mod:`.change`):
    the bytes of each top-level value (None: not made), and whether the values its
    ops carry are plain JSON (:func:`.change.plain`)."""

    __slots__ = ("packed", "plain")

    def __init__(self) -> None:
        self.packed: dict[str, bytes] | None = None
        self.plain = False


def save_changes(new: Mapping[str, Any], fsm_state: str | None) -> tuple[Make, Packed]:
    """What :meth:`StateStore.save` of the document ``new`` changes on the state it is made on,
    and where the bytes serialized to find that out are left (see :mod:`.change`)."""
    out = Packed()
    carry = SAVE_CARRY.get()
    if carry is not None:
        SAVE_CARRY.set(None)  # (this save's, not that of a save made inside it)

    def make(rec: AgentRecord | None) -> tuple[list[dict[str, Any]], str | None]:
        if rec is None:  # created by this save
            out.packed = dump_keys(new) if type(new) is dict else None
            packed = out.packed
            out.plain = packed is not None and plain(list(packed.values()))
            # (what was packed and is cached, not ``new`` as another thread may have
            # changed it since the pack)
            value = new if packed is None else unpack_document(packed)
            return [{"op": "replace", "path": "", "value": value}], fsm_state
        fsm = fsm_state if fsm_state != rec.fsm_state else None
        doc = new if carry is None else carry(lambda: document(rec), rec.schema_version)
        if rec.rich:  # typed values: the plain diff (their JSON bytes are not them)
            return patch.diff(document(rec), doc), fsm
        old = rec.data if rec.dumped is not None else document(rec)
        carried: list[bytes] = []
        ops, out.packed = diff_by_key(old, doc, rec.dumped, carried)
        out.plain = plain(carried)
        return ops, fsm

    return make, out


def append_changes(agent_id: str, ops: list[dict[str, Any]], fsm_state: str | None) -> Make:
    """What :meth:`StateStore.append` changes: ``ops`` on an existing agent."""

    def make(rec: AgentRecord | None) -> tuple[list[dict[str, Any]], str | None]:
        if rec is None:
            raise AgentNotFound(agent_id)
        return ops, fsm_state

    return make
