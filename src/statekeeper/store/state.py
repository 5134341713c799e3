"""Folding events into state: the one place that defines what an event *does*.

An agent's state is its FSM state plus a JSON data document. Each stored event payload
may carry ``ops`` (a JSON Patch applied to the data) and ``fsm`` (the machine's state
after the event); every other key is information for readers (history, audit) and does
not change state. Replay is therefore a loop over :func:`apply_payload`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import orjson

from .. import patch
from ..errors import IntegrityError, PatchError

if TYPE_CHECKING:
    from ..records import EventRow
    from .tails import TailBase

__all__ = [
    "HELD_AS_BYTES",
    "AgentRecord",
    "apply_payload",
    "apply_payloads",
    "document",
    "extend_list",
]


class _HeldAsBytes:
    """``AgentRecord.data`` when the document is held only as bytes: the packed bytes
    of its top-level values (``AgentRecord.dumped``: the state after a save, whose
    bytes the change detection made already), or its JSON (``AgentRecord.blob``: a
    freshly folded state whose objects went to the caller of a load). See
    :func:`document`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "HELD_AS_BYTES"


HELD_AS_BYTES: Any = _HeldAsBytes()
_payload = itemgetter(3)  # (an EventRow's stored payload)
_unpack: Any = None  # msgpack.unpackb (imported on first use)


def unpack_value(packed: bytes) -> Any:
    """The value one packed top-level value holds (msgpack imported at the first use)."""
    global _unpack
    if _unpack is None:
        import msgpack  # type: ignore[import-untyped]

        _unpack = msgpack.unpackb
    return _unpack(packed)


def unpack_document(dumped: dict[str, bytes]) -> dict[str, Any]:
    """A fresh document from the packed bytes of its top-level values."""
    if _unpack is None:
        unpack_value(b"\xc0")  # (msgpack imported once)
    unpack = _unpack
    return {key: unpack(value) for key, value in dumped.items()}


def document(record: AgentRecord) -> Any:
    """``record.data``, unpacked first when it is held as bytes only (the packed
    top-level values in ``dumped``, or the JSON of a plain document in ``blob``)."""
    data = record.data
    if data is HELD_AS_BYTES:
        if record.dumped is not None:
            data = unpack_document(record.dumped)
        else:
            assert record.blob is not None and not record.rich
            data = orjson.loads(record.blob)
        record.data = data
    return data


@dataclass(slots=True)
class AgentRecord:
    """The store's private, mutable view of an agent at ``seq`` (never handed to users)."""

    agent_id: str
    seq: int
    fsm_state: str | None
    data: Any
    schema_version: int
    created_at: float
    updated_at: float
    snapshot_seq: int = 0
    #: when the FSM entered ``fsm_state`` (timestamp of the event that moved it)
    fsm_entered_at: float = 0.0
    #: serialized ``data`` at ``seq`` (computed lazily, dropped on every change)
    blob: bytes | None = None
    #: chain link of the record at ``seq`` (None: not known yet, e.g. folded from a
    #: version-0 snapshot with no event after it)
    link: bytes | None = None
    #: stored checksum of the event at ``seq`` (to recognise it when revalidating)
    checksum: bytes | None = None
    #: seq of the latest full snapshot known (base of delta snapshots), 0 if none
    full_seq: int = 0
    #: chain link at ``full_seq`` (binds a delta snapshot to its base)
    full_link: bytes | None = None
    #: that snapshot's data, private and never mutated (None: not loaded)
    full_data: Any = None
    #: delta snapshots written since that full one
    deltas: int = 0
    #: ``data`` may hold typed values (datetimes, sets…): copies go through the codec
    rich: bool = False
    #: the stored head tag at ``seq`` (see ``tag_known``)
    tag: bytes | None = None
    #: ``tag`` is the tag stored with the head at ``seq`` (read with it, or written by
    #: this store): a write may then be made on this record without reading the head
    #: first, the backend comparing the tag in its compare-and-set
    tag_known: bool = False
    #: stored bytes of the events after ``snapshot_seq`` (what a load replays)
    replay_bytes: int = 0
    #: packed bytes of each top-level value of the document last saved onto ``data``
    #: (see :mod:`.change`); None when ``data`` changed otherwise. ``data`` may then be
    #: :data:`HELD_AS_BYTES` (read it with :func:`document`)
    dumped: dict[str, bytes] | None = None
    #: folded from storage and never handed out: the first copy for a caller may be
    #: ``data`` itself (the record then holds the data as ``blob``, see ``reads.public``)
    fresh: bool = False
    #: stored bytes of the snapshot at ``snapshot_seq`` (0: none, or not known); what
    #: ``snapshot_every="auto"`` weighs the replay after it against
    snapshot_bytes: int = 0
    #: ``data`` shares containers with a caller's document (handed over by
    #: ``WritePipeline.append_applied``; the caller applies its next changes
    #: copy-on-write): copied before events are folded into it in place
    shared: bool = False
    #: what the next tail snapshot's ops are made against (:class:`.tails.TailBase`: the
    #: latest snapshots' seqs, links and packed top-level values, kept by reference as
    #: this store wrote them or read them); None when not at hand
    tail_base: TailBase | None = None
    #: per top-level key, the proof that its list is unchanged without packing it
    #: (:mod:`.proofs`), made by the flat save; None: none (a copy drops them)
    proofs: dict[str, Any] | None = None


def apply_payload(record: AgentRecord, seq: int, timestamp: float, payload: dict[str, Any]) -> None:
    """Advance ``record`` by one event, in place (``record.data`` is private to the store)."""
    ops = payload.get("ops")
    if ops:
        record.data = patch.apply(document(record), ops, in_place=True)
        record.dumped = None
        record.blob = None
    fsm = payload.get("fsm")
    if fsm is not None:
        record.fsm_state = fsm
        record.fsm_entered_at = timestamp
    version = payload.get("v")
    if version is not None:
        record.schema_version = version
    record.seq = seq
    record.updated_at = timestamp


def extend_list(
    record: AgentRecord, rows: Sequence[EventRow], pointer: str, values: list[Any]
) -> bool:
    """Apply the stored events ``rows``, each one plain append of ``values[i]`` to the
    list at ``pointer`` (``<list>/-``, :meth:`Codec.decode_appends`), to ``record`` as
    one ``list.extend``: what :func:`apply_payloads` does event by event, without a
    Python step per event. False, and ``record`` unchanged, when there is no list at
    the pointer (:func:`apply_payloads` then says what is wrong)."""
    if pointer[-2:] != "/-":
        return False
    if record.shared:  # (rare: another writer's events on a handed-over document)
        record.data, record.shared = copy.deepcopy(document(record)), False
    target = patch.list_at(document(record), pointer[:-2])
    if target is None:
        return False
    target.extend(values)
    record.dumped = record.blob = None
    first, last = rows[0], rows[-1]
    if first[0] == 1:
        record.created_at = first[2]
    record.seq, record.updated_at = last[0], last[2]
    record.replay_bytes += sum(map(len, map(_payload, rows)))
    return True


def apply_payloads(record: AgentRecord, rows: Sequence[EventRow], docs: list[Any]) -> None:
    """Apply the verified bodies ``docs`` of the stored events ``rows`` (as many as
    there are docs) to ``record``: :func:`apply_payload` of each, with a run of single
    appends to one list made as appends to that list. The record's seq and time are
    set once, after the last event applied (also when an event raises)."""
    agent_id = record.agent_id
    if record.shared:  # (rare: another writer's events on a handed-over document)
        record.data, record.shared = copy.deepcopy(document(record)), False
    target: list[Any] | None = None  # the list the events append to (looked up when
    target_path: str | None = None  # a second event appends at this pointer + "/-")
    replayed = 0
    done, done_ts = record.seq, record.updated_at
    try:
        for (seq, _, ts, payload, _), body in zip(rows, docs, strict=False):
            if type(body) is tuple:  # one plain append, (pointer, value) (decode_chain)
                path, value = body
                if seq == 1:
                    record.created_at = ts
                if path != target_path or target is None:
                    target = (
                        patch.list_at(document(record), path[:-2]) if path[-2:] == "/-" else None
                    )
                    if target is None:  # (not a list there: the patch says what is wrong)
                        body = {"ops": [{"op": "add", "path": path, "value": value}]}
                    else:
                        target_path = path
                        record.dumped = None
                        record.blob = None
                if target is not None:
                    target.append(value)
                    done, done_ts = seq, ts
                    replayed += len(payload)
                    continue
            if type(body) is not dict:
                raise IntegrityError(agent_id, seq, "event payload is not an object")
            if seq == 1:
                record.created_at = ts
            ops = body.get("ops")
            if ops:
                op = ops[0] if type(ops) is list and len(ops) == 1 else None
                path = op.get("path") if type(op) is dict and op.get("op") == "add" else None
                appended = False
                if path is not None and path == target_path and "value" in op:  # type: ignore[operator]
                    if target is None:
                        target = patch.list_at(record.data, path[:-2])
                    if target is not None:
                        target.append(op["value"])  # type: ignore[index]  # (what patch.apply does)
                        appended = True
                if not appended:
                    try:
                        record.data = patch.apply(document(record), ops, in_place=True)
                    except PatchError as exc:
                        raise IntegrityError(agent_id, seq, f"patch does not apply: {exc}") from exc
                    record.dumped = None
                    record.blob = None
                    target = None
                    target_path = path if type(path) is str and path.endswith("/-") else None
            if "fsm" in body and body["fsm"] is not None:
                record.fsm_state = body["fsm"]
                record.fsm_entered_at = ts
            if "v" in body and body["v"] is not None:
                record.schema_version = body["v"]
            done, done_ts = seq, ts
            replayed += len(payload)
    finally:
        record.seq, record.updated_at = done, done_ts
        record.replay_bytes += replayed
