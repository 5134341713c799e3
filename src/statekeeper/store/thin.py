"""A cold load's thin path (:meth:`ReadPath.at_snapshot`): the latest state from the
snapshot and the events one read returned, without the general fold's coroutines; and
at a whole snapshot that nothing keeps, the caller's copy made straight from its body
(:meth:`ReadPath.bare_copy`, docs/benchmarks.md "cold5")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

from ..codec import ZERO_LINK
from ..codec.formats import JSON, MSGPACK
from ..errors import IntegrityError, StatekeeperError
from ..records import EventRow, RawSnapshot, Snapshot, make_snapshot
from .body import SNAPSHOT_TYPE, plain_data, snapshot_record
from .state import AgentRecord
from .tails import TailBase, tail_data

if TYPE_CHECKING:
    from .reads import ReadPath

__all__ = ["at_snapshot", "bare_copy"]


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
            if bare and not events and "n" in body and not cache.max_size and not cache.gone:
                # (as a whole one's, below; "n": what snapshot_record reads of a tail)
                return self.bare_copy(agent_id, head, tag, snap.seq, body, data, prev)
            typed = typed or base_typed
        elif "data" not in body:
            return None
        else:
            data = body["data"]
            if bare and not events and not self.cache.max_size and not self.cache.gone:
                # the head is this whole snapshot, and nothing keeps its record
                return self.bare_copy(agent_id, head, tag, snap.seq, body, data, prev)
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
