"""The stored record body: what an event's and a snapshot's payload hold, built and
read in one place.

An event body is the caller's ``info`` plus the reserved keys the store writes:
``ops`` (JSON Patch on ``data``), ``fsm`` (the machine's state after the event),
``v`` (schema version), ``actor`` and ``key`` (idempotency key). A snapshot body is
``fsm``, ``v``, ``created_at``, ``updated_at``, ``entered`` and either ``data`` (a whole
snapshot) or ``base``/``bl``/``n``/``ops`` (a delta against the whole snapshot at seq
``base`` whose chain link is ``bl``). :mod:`.state` says what an event *does*; this
module says what a record *holds*.
"""

from __future__ import annotations

from typing import Any

from ..codec.formats import has_marker
from ..errors import IntegrityError
from ..records import Event, RawEvent, RawSnapshot
from .state import AgentRecord, document

__all__ = [
    "RESERVED",
    "SNAPSHOT_TYPE",
    "event_body",
    "next_record",
    "packed_snapshot_body",
    "snapshot_body",
    "snapshot_record",
    "to_event",
]

SNAPSHOT_TYPE = "snapshot"
#: the event body keys the store writes (never the caller's ``info``)
#: (``schema.pre``: the pre-migration bytes a schema migration keeps, see
#: :mod:`statekeeper.schema.rewrite`)
RESERVED = frozenset({"ops", "fsm", "v", "actor", "key", "schema.pre"})


def event_body(
    info: dict[str, Any],
    ops: list[dict[str, Any]],
    *,
    fsm: str | None = None,
    schema_version: int | None = None,
    actor: str | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """The body of one event: ``info`` and the reserved keys that are set."""
    body = dict(info)
    if ops:
        body["ops"] = ops
    if fsm is not None:
        body["fsm"] = fsm
    if schema_version is not None:
        body["v"] = schema_version
    if actor is not None:
        body["actor"] = actor
    if key is not None:
        body["key"] = key
    return body


def to_event(agent_id: str, raw: RawEvent, body: dict[str, Any]) -> Event:
    """The public :class:`Event` of a stored event and its decoded body."""
    return Event(
        agent_id=agent_id,
        seq=raw.seq,
        type=raw.type,
        timestamp=raw.timestamp,
        info={k: v for k, v in body.items() if k not in RESERVED},
        ops=body.get("ops") or [],
        fsm_state=body.get("fsm"),
        schema_version=body.get("v", 1),
        actor=body.get("actor"),
        idempotency_key=body.get("key"),
    )


def snapshot_body(
    record: AgentRecord,
    delta_ops: list[dict[str, Any]] | None,
    tune: list[float | None] | None = None,
) -> dict[str, Any]:
    """The body of a snapshot of ``record``: whole, or (with ``delta_ops``, the ops
    from its latest whole snapshot's data) a delta against that one. ``tune``: the
    measurements of ``snapshot_every="auto"`` it carries (:mod:`.autotune`; before the
    data, which a whole snapshot's body ends with)."""
    body: dict[str, Any] = {
        "fsm": record.fsm_state,
        "v": record.schema_version,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "entered": record.fsm_entered_at,
    }
    if tune is not None:
        body["tune"] = tune
    if delta_ops is None:
        body["data"] = document(record)
        return body
    assert record.full_link is not None
    body["base"] = record.full_seq
    body["bl"] = record.full_link.hex()
    body["n"] = record.deltas + 1
    body["ops"] = delta_ops
    return body


#: the tag key of a typed value as msgpack packs it (``"$t"``: see :mod:`..codec.types`)
_PACKED_TAG = b"\xa2$t"
_packb: Any = None  # msgpack.packb (imported on first use)


def packed_snapshot_body(
    record: AgentRecord, tune: list[float | None] | None = None
) -> bytes | None:
    """The body of a whole snapshot of ``record`` in msgpack, made of the packed bytes
    of its top-level values that the save's change detection made already
    (``AgentRecord.dumped``, see :mod:`.change`): the state is not unpacked and
    serialised again, its bytes are the bytes stored. The same keys as
    :func:`snapshot_body`, ``data`` last. None when those bytes are not at hand, or
    may hold something a plain document does not (a typed value's tag): the caller
    then encodes :func:`snapshot_body` through the codec."""
    dumped = record.dumped
    if dumped is None or record.rich:
        return None
    global _packb
    if _packb is None:
        import msgpack  # type: ignore[import-untyped]

        _packb = msgpack.packb
    packb = _packb
    parts = []
    for key, value in dumped.items():
        if type(key) is not str or has_marker(value, _PACKED_TAG):
            return None
        parts.append(packb(key))
        parts.append(value)
    head: dict[str, Any] = {
        "fsm": record.fsm_state,
        "v": record.schema_version,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "entered": record.fsm_entered_at,
    }
    if tune is not None:
        head["tune"] = tune
    packed_head = packb(head)  # a fixmap of its 5-6 keys: one more for "data"
    n = len(dumped)
    count = (
        bytes((0x80 | n,))
        if n < 16
        else b"\xde" + n.to_bytes(2, "big")
        if n < 0x10000
        else b"\xdf" + n.to_bytes(4, "big")
    )
    return b"".join((bytes((packed_head[0] + 1,)), packed_head[1:], b"\xa4data", count, *parts))


def snapshot_record(
    agent_id: str, raw: RawSnapshot, body: dict[str, Any], prev: bytes | None, data: Any
) -> AgentRecord:
    """The folded state a decoded snapshot body holds (``data`` resolved already);
    ``prev``: the link the snapshot record carries, the link of the event at its seq
    (``Opened.prev``; None: version 0)."""
    try:
        updated = body["updated_at"]
        record = AgentRecord(  # positional: every load at a snapshot builds one
            agent_id,
            raw.seq,
            body["fsm"],
            data,
            body["v"],
            body["created_at"],
            updated,
            raw.seq,
            body.get("entered", updated),
            None,
            prev,
        )
        if "base" in body:
            record.full_seq = body["base"]
            record.full_link = bytes.fromhex(body["bl"])
            record.deltas = body["n"]
        else:
            record.full_seq, record.full_link = raw.seq, prev
    except (KeyError, TypeError, ValueError) as exc:
        raise IntegrityError(agent_id, raw.seq, f"snapshot is missing {exc}") from exc
    return record


def next_record(record: AgentRecord) -> AgentRecord:
    """A copy of ``record`` to build the state after its next event on (copy-on-write:
    ``record`` stays untouched until the append is acknowledged). The chain link, the
    checksum and the head tag of the new state are set by the caller, and its data
    and cached bytes when the event changes the data."""
    record.fresh = False  # its data is shared from now on: never hand it to a caller
    return AgentRecord(  # positional: this runs on every write
        record.agent_id,
        record.seq,
        record.fsm_state,
        record.data,
        record.schema_version,
        record.created_at,
        record.updated_at,
        record.snapshot_seq,
        record.fsm_entered_at,
        record.blob,
        None,
        None,
        record.full_seq,
        record.full_link,
        record.full_data,
        record.deltas,
        record.rich,
        None,
        False,
        record.replay_bytes,
        record.dumped,
        False,
        record.snapshot_bytes,
        record.shared,
        record.tail_base,
    )


def plain_data(text: bytes, body: dict[str, Any], begin: int = 0) -> bytes | None:
    """The JSON bytes of a whole plain snapshot's data, sliced out of its body ``text``
    (from ``begin``; None when they cannot be): a whole plain snapshot ends with its data
    (the values before it are a state name and numbers, and a quote inside a JSON string
    is always escaped, so the first ``,"data":`` is the key)."""
    if next(reversed(body)) != "data":
        return None
    start = text.find(b',"data":', begin)
    if start > begin and text.endswith(b"}"):
        return text[start + 8 : -1]
    return None
