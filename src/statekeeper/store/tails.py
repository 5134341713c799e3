"""Tail snapshots: the change since the latest whole snapshot, stored every few events.

Under the default snapshot policy (``snapshot_every="bounded"``) a chat-like agent
reaches ~60 events past its latest whole snapshot before the next one is due, and a
cold load replays every one of them (~40k instructions an event: its row, its hash,
its parse; docs/benchmarks.md, "coldtail"). A *tail snapshot* bounds that replay at
:data:`TAIL_EVERY` - 1 events for about an event's bytes a save: every
:data:`TAIL_EVERY` events past the latest snapshot, the append carries a delta snapshot
(the format ``full_snapshot_every`` writes, understood by every engine and every reader
of snapshots) whose ops take the latest whole snapshot's data to the head's: a load
reads it, the whole snapshot it names, and the few events after it.

The ops are made from bytes the save holds already, never by diffing documents: the
packed bytes of each top-level value at the latest snapshot (``AgentRecord.tail_base``,
kept by reference when that snapshot was written: the same bytes objects, no copy) and
at the head (``AgentRecord.dumped``). A list whose old bytes start its new ones grew:
one ``add …/-`` op per new item, each item's packed bytes spliced in as they are; a
value that changed otherwise is replaced, a key gone removed, a key new added. The body
is msgpack, as a whole snapshot's is. Anything not held as such bytes (a state folded
from storage, typed values) writes no tail: the events are replayed, as before.

A tail snapshot is a snapshot: sealed and chained like one (its ``prev`` the head's link,
``bl`` its base's), verified like one on every load, and an edited or removed one is
passed over like a damaged snapshot (the load falls back to the one before it, or to the
events). Only ``snapshot_every="bounded"`` writes them, with ``full_snapshot_every=1``
(deltas of the user's own choosing keep their rule).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from .. import patch
from ..codec import Codec
from ..codec.formats import MSGPACK
from ..errors import PatchError
from ..patch import escape, list_at
from ..records import RawSnapshot
from .body import SNAPSHOT_TYPE
from .change import _array, _grew
from .state import AgentRecord

__all__ = [
    "MAX_TAILS",
    "TAIL_EVERY",
    "apply_tail_ops",
    "tail_body",
    "tail_data",
    "tail_now",
    "tail_stored",
]

#: events past the latest snapshot (whole or tail) after which a tail snapshot is
#: stored with the next event: a load replays at most ``TAIL_EVERY - 1`` events after
#: one (docs/benchmarks.md, "coldtail")
TAIL_EVERY = 8
#: the most tails after a whole snapshot (the general fold resolves a chain of deltas
#: up to 64 deep): past it, events are replayed until the next whole one
MAX_TAILS = 48

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


_local = threading.local()


def _items(tail: bytes, count: int, unpacker: Any) -> list[bytes] | None:
    """The packed bytes of the ``count`` msgpack items ``tail`` is made of, or None.
    (One ``Unpacker`` kept per thread: a new one zeroes its ~40 KB parse stack.)"""
    u = getattr(_local, "unpacker", None)
    if u is None:
        u = _local.unpacker = unpacker()
    u.feed(tail)
    out = []
    begin = start = u.tell()
    try:
        for _ in range(count):
            u.skip()
            end = u.tell()
            out.append(tail[start - begin : end - begin])
            start = end
    except Exception:  # (not that many items: not a growth after all)
        _local.unpacker = None  # (bytes left in it: a new one next time)
        return None
    if start - begin != len(tail):
        _local.unpacker = None
        return None
    return out


def _ops(before: dict[str, bytes], after: dict[str, bytes]) -> list[bytes] | None:
    """The packed JSON Patch ops (each a msgpack map) taking the document whose
    top-level values packed to ``before`` to the one that packs to ``after``; None when
    a key is not a plain string."""
    packb, unpacker = _msgpack()
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
            items = _items(new[offset:], head[0] - length, unpacker)
            if items is not None:
                add = b"\x83\xa2op\xa3add\xa4path" + packb("/" + escape(key) + "/-") + b"\xa5value"
                ops.extend(add + item for item in items)
                continue
        ops.append(b"\x83\xa2op\xa7replace\xa4path" + path + b"\xa5value" + new)
    for key in before:
        if key not in after:
            if type(key) is not str:
                return None
            ops.append(b"\x82\xa2op\xa6remove\xa4path" + packb("/" + escape(key)))
    return ops


def tail_body(record: AgentRecord) -> bytes | None:
    """The msgpack body of a tail snapshot of ``record``: a delta against its latest
    snapshot (``tail_base``, whole or tail), or None when its bytes are not at hand."""
    if record.dumped is None or record.rich:
        return None
    return _plaintext(
        record, record.dumped, record.updated_at, record.replay_bytes, record.fsm_state
    )


def _plaintext(
    record: AgentRecord, after: dict[str, bytes], updated: float, replay: int, fsm: Any
) -> bytes | None:
    base = record.tail_base
    if base is None:
        return None
    base_seq, base_link, before = base
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
            "w": record.full_seq,
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
    when :data:`TAIL_EVERY` events went by since ``record.tail_base``: the state after
    the event is ``record`` with ``dumped`` at ``now`` (a flat save changes no FSM
    state), ``link`` the event's. None: the save is handed on (``save_fast`` then asks
    the policy, as for a whole snapshot)."""
    if record.deltas >= MAX_TAILS or record.rich:
        return None
    plaintext = _plaintext(record, dumped, now, replay, record.fsm_state)
    if plaintext is None:
        return None
    sealed = codec.seal(record.agent_id, seq, SNAPSHOT_TYPE, now, plaintext, link, fmt=MSGPACK)
    return RawSnapshot(seq, now, sealed.payload, sealed.checksum)


def tail_stored(record: AgentRecord, seq: int, link: bytes, dumped: dict[str, bytes]) -> None:
    """Once a tail stored by the flat save is acknowledged: the next is made on it."""
    record.tail_base = (seq, link, dumped)
    record.deltas += 1


_op, _path, _value = itemgetter("op"), itemgetter("path"), itemgetter("value")


def apply_tail_ops(data: Any, ops: Any) -> Any:
    """``data`` (private: changed in place) with a delta snapshot's ``ops`` applied; a
    run of ``add …/-`` to one list (a tail's common case) as one ``list.extend``, its
    ops checked by C-level passes (no Python step per op). Raises :class:`PatchError`
    as ``patch.apply`` does."""
    if type(ops) is not list:
        raise PatchError("the ops are not a list")
    first = ops[0] if ops else None
    path = first.get("path") if type(first) is dict else None
    if type(path) is str and path[-2:] == "/-":
        try:
            same = (
                set(map(type, ops)) == {dict}
                and set(map(len, ops)) == {3}
                and set(map(_path, ops)) == {path}
                and set(map(_op, ops)) == {"add"}
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


def tail_data(
    codec: Codec,
    chain_now: Callable[[str, int, int], list[RawSnapshot]] | None,
    agent_id: str,
    seq: int,
    body: dict[str, Any],
) -> tuple[Any, int, bytes | None, bool] | None:
    """The data of a tail snapshot's verified ``body`` at ``seq``: its whole snapshot
    (``w``) and the tails between, read in one statement by ``chain_now`` (the engine's
    inline read of the snapshots ``w <= seq < top``), each verified and checked to be
    the base its successor names (``base``, and ``bl``: its link), their ops applied in
    order. Also the whole one's stored bytes and link, and whether the data may hold
    typed values. None (the general fold then resolves the chain, or says what is
    wrong) when there is no such read or the chain does not hold together. Raises what
    verifying a record raises."""
    whole = body.get("w")
    if chain_now is None or type(whole) is not int or not 0 < whole < seq:
        return None
    rows = chain_now(agent_id, whole, seq)
    if not rows or rows[0].seq != whole:
        return None
    data: Any = None
    typed_any = False
    size, whole_link = 0, None
    expect_seq, expect_link = None, None
    for raw in rows:
        viewed = codec.decode_view(
            agent_id, raw.seq, SNAPSHOT_TYPE, raw.timestamp, raw.payload, raw.checksum
        )
        if viewed is None:  # a key, compression, typed values: the general decode
            got, opened, typed = codec.decode_typed(
                agent_id, raw.seq, SNAPSHOT_TYPE, raw.timestamp, raw.payload, raw.checksum
            )
            prev = opened.prev
        else:
            got, prev, _, _, typed = viewed
        if type(got) is not dict or prev is None:
            return None
        typed_any = typed_any or typed
        if data is None:  # the whole one
            if "base" in got or "data" not in got:
                return None
            data, size, whole_link = got["data"], len(raw.payload), prev
        else:  # a tail on the one before it
            if got.get("base") != expect_seq or got.get("bl") != expect_link:
                return None
            data = apply_tail_ops(data, got.get("ops"))
        expect_seq, expect_link = raw.seq, prev.hex()
    if body.get("base") != expect_seq or body.get("bl") != expect_link:
        return None
    return apply_tail_ops(data, body.get("ops")), size, whole_link, typed_any
