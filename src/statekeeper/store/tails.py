"""Tail snapshots: the change since the latest whole snapshot, stored every few events.

Under the default snapshot policy (``snapshot_every="bounded"``) a chat-like agent
reaches ~60 events past its latest whole snapshot before the next one is due, and a
cold load replays every one of them (~40k instructions an event: its row, its hash,
its parse; docs/benchmarks.md, "coldtail"). A *tail snapshot* bounds that replay at
:data:`TAIL_EVERY` - 1 events: every :data:`TAIL_EVERY` events past the latest snapshot,
the append carries a delta snapshot (the format ``full_snapshot_every`` writes,
understood by every engine and every reader of snapshots) whose ops take its base's
data to the head's.

Which base (docs/benchmarks.md, "coldload"): every :data:`CUMULATIVE_EVERY`-th tail is a
delta on the latest *whole* snapshot (a *cumulative* tail: all the change since it) and
becomes the base of the tails after it; the others are deltas on that latest cumulative
tail (or on the whole snapshot, before the first). So a chain is never more than whole
snapshot, cumulative tail, tail: a cold load reads the tail with the head, its base and
its whole snapshot in one more statement (``snapshots_at_now``: two primary-key
lookups), whatever the distance to the whole snapshot; a chain of one tail on the one
before it (the layout written before) still loads, through the range read
(``snapshots_now``). The bytes a save stores for it stay about two items of the change
a save (a cumulative tail carries all the change since the whole snapshot).

The ops are made from bytes the save holds already, never by diffing documents: the
packed bytes of each top-level value at the base (:class:`TailBase`, kept by reference
when that snapshot was written: the same bytes objects, no copy; after a cold load, the
stored body of the whole snapshot read, split into its values when the first tail is
made) and at the head (``AgentRecord.dumped``). A list whose old bytes start its new
ones grew: one :data:`EXTEND` op holding the new items, their packed bytes spliced in
as they are (tails written before it hold one ``add …/-`` op per item, and still
load); a value that changed otherwise is replaced, a key gone removed, a key new added.
The body is msgpack, as a whole snapshot's is. Anything not held as such bytes (a state
folded from storage with typed values, a whole snapshot stored in JSON) writes no tail:
the events are replayed, as before.

A tail snapshot is a snapshot: sealed and chained like one (its ``prev`` the head's link,
``bl`` its base's), verified like one on every load, and an edited or removed one is
passed over like a damaged snapshot (the load falls back to the one before it, or to the
events). Only ``snapshot_every="bounded"`` (and a number of events above
``2 * TAIL_EVERY``) writes them, with ``full_snapshot_every=1`` (deltas of the user's own
choosing keep their rule).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter, methodcaller
from typing import Any, NamedTuple, TypeAlias

from .. import patch
from ..codec import Codec
from ..codec.formats import MSGPACK
from ..errors import IntegrityError, PatchError
from ..patch import escape, list_at
from ..records import RawSnapshot
from .body import SNAPSHOT_TYPE
from .change import _array, _grew
from .state import AgentRecord

__all__ = [
    "CUMULATIVE_EVERY",
    "EXTEND",
    "MAX_TAILS",
    "TAIL_EVERY",
    "BaseMissing",
    "TailBase",
    "apply_tail_ops",
    "tail_body",
    "tail_data",
    "tail_now",
    "tail_stored",
    "whole_base",
]

#: events past the latest snapshot (whole or tail) after which a tail snapshot is
#: stored with the next event: a load replays at most ``TAIL_EVERY - 1`` events after
#: one (docs/benchmarks.md, "coldtail")
TAIL_EVERY = 8
#: the most tails after a whole snapshot: past it, events are replayed until the next
#: whole one
MAX_TAILS = 48
#: every this many-th tail past a whole snapshot is cumulative (a delta on the whole
#: snapshot, the base of the tails after it): a chain is at most whole, cumulative, tail,
#: and a save stores about ``CUMULATIVE_EVERY / 2 + 1`` items of the change (measured:
#: docs/benchmarks.md, "coldload")
CUMULATIVE_EVERY = 4

#: the packed bytes of each top-level value of a snapshot's data, or ``(stored body,
#: offset)``: a whole snapshot's msgpack body as read, split on first use (:func:`_split`)
Packed: TypeAlias = "dict[str, bytes] | tuple[bytes, int]"


class BaseMissing(IntegrityError):
    """A delta (tail) snapshot whose base snapshot (seq ``base``) is not stored. Damage
    unless a usable snapshot lies between the two: then the base was *replaced* — by a
    settle (store/settle.py) in one process while another, its cache still valid, went
    on making tails on the base it held — and every load the tail would serve is served
    from that snapshot, within the policy's bound (the other process's next whole
    snapshot was due by the distance from its own, older base): bytes, not damage. A
    load passes over it quietly then, and verify does not report it."""

    def __init__(self, agent_id: str, seq: int, base: int) -> None:
        super().__init__(agent_id, seq, f"the base snapshot (seq {base}) is missing")
        self.base = base


class TailBase(NamedTuple):
    """What the next tail snapshot of an agent is made against (``AgentRecord.tail_base``).
    ``last`` first: the flat save reads it by index (a tail is due ``TAIL_EVERY`` events
    past it)."""

    #: seq of the latest snapshot, whole or tail
    last: int
    #: the snapshot the next (non-cumulative) tail is a delta on: the latest cumulative
    #: tail, or the whole snapshot; its link and packed values
    seq: int
    link: bytes
    dumped: Packed
    #: the latest whole snapshot (the base of a cumulative tail)
    whole_seq: int
    whole_link: bytes
    whole: Packed
    #: tails made on ``seq`` since it became the base
    since: int


def whole_base(seq: int, link: bytes, dumped: Packed) -> TailBase:
    """The tail base right after a whole snapshot at ``seq``."""
    return TailBase(seq, seq, link, dumped, seq, link, dumped, 0)


def _cumulative(base: TailBase) -> bool:
    """The next tail on ``base`` is a cumulative one (on the whole snapshot)."""
    return base.since + 1 >= CUMULATIVE_EVERY


def _advanced(base: TailBase, seq: int, link: bytes, dumped: dict[str, bytes]) -> TailBase:
    """``base`` once the tail at ``seq`` made on it (:func:`_plaintext`) is stored."""
    if _cumulative(base):
        return TailBase(seq, seq, link, dumped, base.whole_seq, base.whole_link, base.whole, 0)
    return base._replace(last=seq, since=base.since + 1)


def _split(stored: tuple[bytes, int]) -> dict[str, bytes] | None:
    """The packed bytes of each top-level value of the data of a whole snapshot's msgpack
    body (``stored``: the bytes it is in, and where it starts), or None (not such a body,
    a key that is not a string). One skip per value, in C: ~2 us for a 33 KB chat."""
    _, unpacker = _msgpack()
    text, begin = stored
    u = unpacker(raw=False, strict_map_key=True)
    u.feed(memoryview(text)[begin:])
    try:
        for _ in range(u.read_map_header()):
            if u.unpack() != "data":
                u.skip()
                continue
            out: dict[str, bytes] = {}
            for _ in range(u.read_map_header()):
                key = u.unpack()
                if type(key) is not str:
                    return None
                start = u.tell()
                u.skip()
                out[key] = text[begin + start : begin + u.tell()]
            return out
    except Exception:  # (not a msgpack body as a whole snapshot's: no tail)
        return None
    return None


def resolved(record: AgentRecord) -> TailBase | None:
    """``record.tail_base`` with its packed values at hand (a stored body split now), or
    None, then also in the record (no tail until the next whole snapshot)."""
    base = record.tail_base
    if base is None or (type(base.dumped) is dict and type(base.whole) is dict):
        return base
    whole = base.whole if type(base.whole) is dict else _split(base.whole)  # type: ignore[arg-type]
    if base.dumped is base.whole:
        dumped: Any = whole
    else:
        dumped = base.dumped if type(base.dumped) is dict else _split(base.dumped)  # type: ignore[arg-type]
    if whole is None or dumped is None:
        record.tail_base = None
        return None
    record.tail_base = base = base._replace(dumped=dumped, whole=whole)
    return base


#: the tag key of a typed value as msgpack packs it (as in :mod:`.body`)
_PACKED_TAG = b"\xa2$t"
_packb: Any = None  # msgpack.packb (imported on first use)
_Unpacker: Any = None


def _msgpack() -> tuple[Any, Any]:
    global _packb, _Unpacker
    if _packb is None:
        import msgpack  # type: ignore[import-untyped]

        _packb, _Unpacker = msgpack.packb, msgpack.Unpacker
    return _packb, _Unpacker


def _array_head(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


#: the op a tail stores for a list that grew: ``{"op": "extend", "path": <the list>,
#: "value": [<the new items>]}`` (a statekeeper op of delta snapshots only, never of
#: events; :func:`apply_tail_ops`). One map for the run, not one ``add …/-`` map per
#: item: a load unpacked an op map per appended message, about the message's own cost
#: (docs/benchmarks.md, "coldload2"). A reader from before it refuses the tail (unknown
#: op: passed over as a damaged snapshot, never misread).
EXTEND = "extend"
_EXTEND_OP = b"\x83\xa2op\xa6extend\xa4path"


def _ops(before: dict[str, bytes], after: dict[str, bytes]) -> list[bytes] | None:
    """The packed ops (each a msgpack map) taking the document whose top-level values
    packed to ``before`` to the one that packs to ``after``: JSON Patch ops, and one
    :data:`EXTEND` for a list that grew; None when a key is not a plain string."""
    packb, _ = _msgpack()
    ops: list[bytes] = []
    for key, new in after.items():
        old = before.get(key)
        if old is new or old == new:
            continue
        if type(key) is not str:
            return None
        path = packb("/" + escape(key))
        if old is None:
            ops.append(b"\x83\xa2op\xa3add\xa4path" + path + b"\xa5value" + new)
            continue
        grown = _grew(old, new) if _array(old) is not None else None
        if grown is not None:
            length, offset = grown
            head = _array(new)
            assert head is not None
            if head[0] > length:  # (msgpack items are self-delimiting: the rest are the
                # new items, spliced in as one array: no op map per item)
                count = _array_head(head[0] - length)
                ops.append(b"".join((_EXTEND_OP, path, b"\xa5value", count, new[offset:])))
                continue
        ops.append(b"\x83\xa2op\xa7replace\xa4path" + path + b"\xa5value" + new)
    for key in before:
        if key not in after:
            if type(key) is not str:
                return None
            ops.append(b"\x82\xa2op\xa6remove\xa4path" + packb("/" + escape(key)))
    return ops


def tail_body(record: AgentRecord) -> bytes | None:
    """The msgpack body of a tail snapshot of ``record``: a delta against its base
    (:class:`TailBase`: the latest cumulative tail or whole snapshot), or None when its
    bytes are not at hand."""
    if record.dumped is None or record.rich:
        return None
    return _plaintext(
        record, record.dumped, record.updated_at, record.replay_bytes, record.fsm_state
    )


def _plaintext(
    record: AgentRecord, after: dict[str, bytes], updated: float, replay: int, fsm: Any
) -> bytes | None:
    tb = resolved(record)
    if tb is None:
        return None
    if _cumulative(tb):
        base_seq, base_link, before = tb.whole_seq, tb.whole_link, tb.whole
    else:
        base_seq, base_link, before = tb.seq, tb.link, tb.dumped
    assert type(before) is dict  # (resolved)
    ops = _ops(before, after)
    if ops is None or any(_PACKED_TAG in op for op in ops):
        return None  # (a typed value's tag: a whole snapshot goes through the codec)
    packb, _ = _msgpack()
    head = packb(
        {
            "fsm": fsm,
            "v": record.schema_version,
            "created_at": record.created_at,
            "updated_at": updated,
            "entered": record.fsm_entered_at,
            "base": base_seq,
            "bl": base_link.hex(),
            "n": record.deltas + 1,
            "w": tb.whole_seq,
            "rb": replay,
        }
    )  # a fixmap of 10 keys: one more for "ops", the last
    return b"".join((bytes((head[0] + 1,)), head[1:], b"\xa3ops", _array_head(len(ops)), *ops))


def tail_now(
    codec: Codec,
    record: AgentRecord,
    seq: int,
    now: float,
    link: bytes,
    dumped: dict[str, bytes],
    replay: int,
) -> RawSnapshot | None:
    """The tail snapshot the flat save (:mod:`.flat`) stores with its event at ``seq``
    when :data:`TAIL_EVERY` events went by since the latest snapshot
    (``record.tail_base.last``): the state after the event is ``record`` with ``dumped``
    at ``now`` (a flat save changes no FSM state), ``link`` the event's. None: the save
    is handed on (``save_fast`` then asks the policy, as for a whole snapshot)."""
    if record.deltas >= MAX_TAILS or record.rich:
        return None
    plaintext = _plaintext(record, dumped, now, replay, record.fsm_state)
    if plaintext is None:
        return None
    sealed = codec.seal(record.agent_id, seq, SNAPSHOT_TYPE, now, plaintext, link, fmt=MSGPACK)
    return RawSnapshot(seq, now, sealed.payload, sealed.checksum)


def tail_stored(record: AgentRecord, seq: int, link: bytes, dumped: dict[str, bytes]) -> None:
    """Once a tail stored by the flat save is acknowledged: the next is made on it (or
    on its base)."""
    assert record.tail_base is not None
    record.tail_base = _advanced(record.tail_base, seq, link, dumped)
    record.deltas += 1


def tail_marked(record: AgentRecord) -> TailBase:
    """The tail base once a tail of ``record`` made by :func:`tail_body` is stored."""
    assert record.tail_base is not None and record.link is not None
    assert record.dumped is not None
    return _advanced(record.tail_base, record.seq, record.link, record.dumped)


_value = itemgetter("value")
_op_path = itemgetter("op", "path")
_kind = methodcaller("get", "op")


def apply_tail_ops(data: Any, ops: Any) -> Any:
    """``data`` (private: changed in place) with a delta snapshot's ``ops`` applied:
    JSON Patch ops, and :data:`EXTEND` (a list that grew: its new items in one array,
    one ``list.extend``). A tail of the layout before it holds a run of ``add …/-`` to
    one list instead, applied as one ``list.extend`` too (:func:`_apply_patch`). Raises
    :class:`PatchError` as ``patch.apply`` does, and for an ``extend`` that is not a
    3-key map of a pointer to a list and a list of items."""
    if type(ops) is not list:
        raise PatchError("the ops are not a list")
    if len(ops) == 1 and type(op := ops[0]) is dict and op.get("op") == EXTEND:
        _extend(data, op)  # (a chat's tail: one grown list, as the loop below applies it)
        return data
    try:  # (C-level: no Python step per op of a tail of the layout before)
        extends = EXTEND in map(_kind, ops)
    except (AttributeError, TypeError):  # (an op that is not a map: the patch says so)
        extends = False
    if not extends:
        return _apply_patch(data, ops)
    start = 0
    for i, op in enumerate(ops):
        if type(op) is dict and op.get("op") == EXTEND:
            if start < i:
                data = _apply_patch(data, ops[start:i])
            _extend(data, op)
            start = i + 1
    return _apply_patch(data, ops[start:]) if start < len(ops) else data


def _extend(data: Any, op: dict[str, Any]) -> None:
    """Apply an :data:`EXTEND` op to ``data`` in place."""
    path, values = op.get("path"), op.get("value")
    if len(op) != 3 or type(path) is not str or type(values) is not list:
        raise PatchError(f"invalid {EXTEND!r} op")
    target = list_at(data, path)
    if target is None:
        raise PatchError(f"{EXTEND!r}: no list at {path!r}")
    target.extend(values)


def _apply_patch(data: Any, ops: list[Any]) -> Any:
    """JSON Patch ``ops`` applied to ``data`` in place; a run of ``add …/-`` to one list
    as one ``list.extend``, its ops checked by C-level passes (no Python step per op, no
    string hashed: counts of equal items)."""
    first = ops[0] if ops else None
    path = first.get("path") if type(first) is dict else None
    if type(path) is str and path[-2:] == "/-":
        n = len(ops)
        try:
            same = (
                list(map(type, ops)).count(dict) == n
                and list(map(len, ops)).count(3) == n
                and list(map(_op_path, ops)).count(("add", path)) == n
            )
            values = list(map(_value, ops)) if same else None
        except (KeyError, TypeError):  # (not that shape: the patch says what is wrong)
            values = None
        if values is not None:
            target = list_at(data, path[:-2])
            if target is not None:
                target.extend(values)
                return data
    return patch.apply(data, ops, in_place=True)


#: what :func:`tail_data` answers: the data, the whole snapshot's stored bytes, its link,
#: whether the data may hold typed values, and the whole snapshot's msgpack body
#: (``(bytes, offset)``: the base of the next tails, :class:`TailBase`) or None
TailData = tuple[Any, int, bytes, bool, "tuple[bytes, int] | None"]


def tail_data(
    codec: Codec,
    read_at: Callable[[str, int, int], list[RawSnapshot]] | None,
    chain_now: Callable[[str, int, int], list[RawSnapshot]] | None,
    agent_id: str,
    seq: int,
    body: dict[str, Any],
) -> TailData | None:
    """The data of a tail snapshot's verified ``body`` at ``seq``: its whole snapshot
    (``w``) and, when its base is a cumulative tail, that one, read in one statement by
    ``read_at`` (the engine's inline read of the snapshots at two seqs); a chain of the
    older layout (each tail on the one before) by ``chain_now`` (the snapshots
    ``w <= seq < top``). Each one verified and checked to be the base its successor
    names (``base``, and ``bl``: its link), their ops applied in order. None (the
    general fold then resolves the chain, or says what is wrong) when there is no such
    read or the chain does not hold together. Raises what verifying a record raises."""
    whole, base = body.get("w"), body.get("base")
    if type(whole) is not int or type(base) is not int or not 0 < whole <= base < seq:
        return None
    if read_at is not None:
        got = _chain(codec, read_at(agent_id, whole, base), agent_id, whole, body)
        if got is not None or base == whole:
            return got
    if chain_now is None:
        return None
    return _chain(codec, chain_now(agent_id, whole, seq), agent_id, whole, body)


def _chain(
    codec: Codec, rows: list[RawSnapshot], agent_id: str, whole: int, body: dict[str, Any]
) -> TailData | None:
    """:func:`tail_data` of the snapshots read (``rows``, in seq order): the chain from
    ``body``'s base down to the whole snapshot at ``whole``, each decoded only when it
    is a link of it."""
    if not rows or rows[0].seq != whole:
        return None
    by_seq = {raw.seq: raw for raw in rows}
    typed_any = False
    chain: list[tuple[int, dict[str, Any], bytes]] = []  # (seq, body, link): base first
    stored: tuple[bytes, int] | None = None
    need: Any = body.get("base")
    while True:
        raw = by_seq.pop(need, None) if type(need) is int else None
        if raw is None:
            return None
        viewed = codec.decode_view(
            agent_id, raw.seq, SNAPSHOT_TYPE, raw.timestamp, raw.payload, raw.checksum
        )
        if viewed is None:  # a key, compression, typed values: the general decode
            got, opened, typed = codec.decode_typed(
                agent_id, raw.seq, SNAPSHOT_TYPE, raw.timestamp, raw.payload, raw.checksum
            )
            prev, stored = opened.prev, (opened.body, 0) if opened.format == MSGPACK else None
        else:
            got, prev, _, fmt, typed = viewed
            stored = (raw.payload, 35) if fmt == MSGPACK else None
        if type(got) is not dict or prev is None:
            return None
        typed_any = typed_any or typed
        chain.append((raw.seq, got, prev))
        if need == whole:
            break
        if got.get("w") != whole:  # (a tail of another whole snapshot's)
            return None
        need = got.get("base")
    _, got, whole_link = chain.pop()
    if "base" in got or "data" not in got:
        return None
    data, expect_seq, expect_link = got["data"], whole, whole_link.hex()
    for seq, got, link in reversed(chain):  # (each a delta on the one before it)
        if got.get("base") != expect_seq or got.get("bl") != expect_link:
            return None
        data = apply_tail_ops(data, got.get("ops"))
        expect_seq, expect_link = seq, link.hex()
    if body.get("base") != expect_seq or body.get("bl") != expect_link:
        return None
    size = len(rows[0].payload)
    return (
        apply_tail_ops(data, body.get("ops")),
        size,
        whole_link,
        typed_any,
        None if typed_any else stored,
    )
