"""A cold load's thin path (:meth:`ReadPath.at_snapshot`): the latest state from the
snapshot and the events one read returned, without the general fold's coroutines; and
at a whole snapshot that nothing keeps, the caller's copy made straight from its body
(:meth:`ReadPath.bare_copy`, docs/benchmarks.md "cold5")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

from ..codec import ZERO_LINK
from ..codec.formats import JSON, MSGPACK
from ..errors import IntegrityError, StatekeeperError
from ..patch import list_at
from ..records import EventRow, RawSnapshot, Snapshot, make_snapshot
from .body import SNAPSHOT_TYPE, plain_data, snapshot_record
from .state import AgentRecord
from .tails import TailBase, tail_data

if TYPE_CHECKING:
    from .reads import ReadPath

__all__ = ["at_snapshot", "bare_copy", "bare_fold"]


@overload
def at_snapshot(
    self: ReadPath,
    agent_id: str,
    head: int,
    tag: bytes | None,
    snap: RawSnapshot | None,
    events: list[EventRow] | None = None,
    bare: Literal[False] = False,
) -> AgentRecord | None: ...


@overload
def at_snapshot(
    self: ReadPath,
    agent_id: str,
    head: int,
    tag: bytes | None,
    snap: RawSnapshot | None,
    events: list[EventRow] | None,
    bare: bool,
) -> AgentRecord | Snapshot | None: ...


def at_snapshot(
    self: ReadPath,
    agent_id: str,
    head: int,
    tag: bytes | None,
    snap: RawSnapshot | None,
    events: list[EventRow] | None = None,
    bare: bool = False,
) -> AgentRecord | Snapshot | None:
    """The state at the head from the latest snapshot and ``events``, the events
    after it read with it (none: the head is the snapshot), or None to fold it the
    general way (:meth:`fold`). No snapshot (a stream shorter than the snapshot
    interval): from the stream's start, ``events`` its whole stream.

    A load's thin path: the hash, the parse, the record, the events applied as
    ``fold_from`` applies them (:meth:`apply_events`: verified, chained from the
    snapshot's link) and the head check, without the three coroutines of ``fold`` /
    ``decode_snapshot`` / ``fold_from`` (docs/benchmarks.md, "coldload2", "cold11b").
    Anything else — a delta snapshot, ``snapshot_every="auto"`` (its tuner learns
    from the fold), a record that does not verify or fold, a stream that ends before
    its head, a head tag that does not match (or none, and no events to check) —
    answers None: the general fold then does what it always did (an older snapshot,
    a full replay, or the typed error).

    ``bare`` (the caller is a load that keeps no record: no :class:`DurableAgent`'s
    link to tell): when the head is a whole snapshot and the store has no cache, the
    answer is the caller's :class:`Snapshot` itself (:meth:`bare_copy`), verified
    and head-checked as the record would be.
    """
    if self.tuner is not None:
        return None
    codec = self.codec
    if snap is None:  # (what fold_from folds from: no coroutine of fold or fold_from)
        if not events:
            return None
        record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0, link=ZERO_LINK)
        try:
            self.apply_events(record, events)
            if record.seq != head:
                return None
            codec.check_head(agent_id, head, record.link, tag)
        except StatekeeperError:
            return None
        self.loads += 1
        record.tag, record.tag_known, record.fresh = tag, record.link is not None, True
        return record
    payload = snap.payload
    try:
        viewed = codec.decode_view(  # (parsed from a view of the row: no copy, no Opened)
            agent_id, snap.seq, SNAPSHOT_TYPE, snap.timestamp, payload, snap.checksum
        )
        if viewed is None:  # a key, compression, an older record: the general decode
            body, opened, typed = codec.decode_typed(
                agent_id, snap.seq, SNAPSHOT_TYPE, snap.timestamp, payload, snap.checksum
            )
            prev, fmt, text, begin = opened.prev, opened.format, opened.body, 0
        else:
            body, prev, _, fmt, typed = viewed
            text, begin = payload, 35
        if type(body) is not dict or not (events or tag):
            return None  # (neither events nor a head tag to bind it to this stream)
        size = len(payload)
        tail = "base" in body
        stored: tuple[bytes, int] | None = None  # the whole one's msgpack body
        if tail:  # a tail snapshot (store/tails.py): its base, read now
            based = tail_data(codec, self.at_now, self.chain_now, agent_id, snap.seq, body)
            if based is None:
                return None
            data, size, whole_link, base_typed, stored = based
            cache = self.cache
            if bare and "n" in body and not cache.max_size and not cache.gone:
                # (as a whole one's, below; "n": what snapshot_record reads of a tail)
                if not events:
                    return self.bare_copy(agent_id, head, tag, snap.seq, body, data, prev)
                folded = self.bare_fold(agent_id, head, tag, snap.seq, body, data, prev, events)
                if folded is not None:
                    return folded
            typed = typed or base_typed
        elif "data" not in body:
            return None
        else:
            data = body["data"]
            if bare and not self.cache.max_size and not self.cache.gone:
                # the head is this whole snapshot (or a run of appends after it), and
                # nothing keeps its record
                if not events:
                    return self.bare_copy(agent_id, head, tag, snap.seq, body, data, prev)
                folded = self.bare_fold(agent_id, head, tag, snap.seq, body, data, prev, events)
                if folded is not None:
                    return folded
            if fmt == MSGPACK:
                stored = (text, begin)
        record = snapshot_record(agent_id, snap, body, prev, data)
        record.rich = typed
        if tail:  # (the whole one's, and the replay after it: the snapshot rule's)
            record.snapshot_seq = record.full_seq = body["w"]
            record.full_link = whole_link
            if type(rb := body.get("rb")) is int:
                record.replay_bytes = rb
        if self.tails and stored is not None and not typed and record.full_link is not None:
            # the next tails' base: the whole snapshot read (split when one is made)
            whole, link = record.full_seq, record.full_link
            record.tail_base = TailBase(snap.seq, whole, link, stored, whole, link, stored, 0)
        if events:  # verified, and chained from the snapshot's link
            self.apply_events(record, events)
            if record.seq != head:
                return None  # (the stream ends before its head: the fold says so)
        elif not typed and not tail and self.cache.max_size and fmt == JSON:
            record.blob = plain_data(text, body, begin)
        codec.check_head(agent_id, head, record.link, tag)
    except StatekeeperError:
        return None
    self.loads += 1
    record.snapshot_bytes = size
    record.tag, record.tag_known, record.fresh = tag, record.link is not None, True
    return record


def bare_copy(
    self: ReadPath,
    agent_id: str,
    head: int,
    tag: bytes | None,
    seq: int,
    body: dict[str, Any],
    data: Any,
    prev: bytes | None,
) -> Snapshot:
    """The caller's :class:`Snapshot` of a whole snapshot at the head, verified and
    parsed by :meth:`at_snapshot`, made straight from its body: no
    :class:`AgentRecord` when nothing would keep one (no cache, not pinned, no
    :class:`DurableAgent` asking for its link) — what ``public`` of a fresh record
    kept by nobody hands over (its parsed objects, uncopied). The head tag is
    checked against the snapshot's link as :meth:`at_snapshot` checks the record's.
    Raises ``IntegrityError`` (the thin path then folds the general way, which says
    why) for a body without its fields."""
    self.codec.check_head(agent_id, head, prev, tag)
    try:
        updated = body["updated_at"]
        snap = make_snapshot(
            agent_id,
            seq,
            body["fsm"],
            data,
            body["v"],
            body["created_at"],
            updated,
            body.get("entered", updated),
        )
    except (KeyError, TypeError, ValueError) as exc:  # (as snapshot_record)
        raise IntegrityError(agent_id, seq, f"snapshot is missing {exc}") from exc
    self.loads += 1
    return snap


def bare_fold(
    self: ReadPath,
    agent_id: str,
    head: int,
    tag: bytes | None,
    seq: int,
    body: dict[str, Any],
    data: Any,
    prev: bytes | None,
    events: list[EventRow],
) -> Snapshot | None:
    """:meth:`bare_copy` of the state ``events`` after the snapshot at ``seq`` make,
    when they are a run of plain appends to one list (a chat's saves): the caller's
    :class:`Snapshot` folded onto the parsed snapshot's data, no :class:`AgentRecord`
    (docs/benchmarks.md, "cold6"). The same checks as the record path's
    (:meth:`apply_events`, then ``check_head``): the events are the seqs after the
    snapshot up to the head, none missing; :meth:`Codec.decode_appends` verifies each
    (header, chain link from the snapshot's link ``prev``, its own checksum with its
    event type) and parses its value; the head tag is checked against the last link.
    An append changes no FSM state, schema version or creation time: those are the
    snapshot's, the update time the last event's. None — anything else (another kind
    of event, a record that does not verify, a gap, no list at the pointer) — and
    nothing is changed: the record path then folds it, or says what is wrong.
    Raises ``IntegrityError`` as :meth:`bare_copy` does."""
    if len(events) != head - seq or events[0][0] != seq + 1 or events[-1][0] != head:
        return None
    appended = self.codec.decode_appends(agent_id, events, prev)
    if appended is None:
        return None
    pointer, values, link = appended
    target = list_at(data, pointer[:-2]) if pointer[-2:] == "/-" else None
    if target is None:
        return None
    self.codec.check_head(agent_id, head, link, tag)
    try:
        snap = make_snapshot(
            agent_id,
            head,
            body["fsm"],
            data,
            body["v"],
            body["created_at"],
            events[-1][2],
            body.get("entered", body["updated_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:  # (as snapshot_record)
        raise IntegrityError(agent_id, seq, f"snapshot is missing {exc}") from exc
    target.extend(values)
    self.loads += 1
    return snap
