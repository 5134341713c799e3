"""Change detection for :meth:`StateStore.save` in one serialization pass.

:func:`statekeeper.patch.diff` proves that a grown message list still starts with the
old one by comparing the whole history, twice over (Python equality, then the JSON
bytes of both sides to tell ``True`` from ``1``). The store can do better: it keeps,
with the cached state, the bytes of each top-level value of the document the caller
saved last (``AgentRecord.dumped``). A save serializes each new top-level value once
(msgpack in strict-types mode, in C) and compares bytes:

- equal bytes: the value is unchanged (no op);
- the items of the old array start the items of the new one: the list grew at the end
  (one ``add …/-`` op per new item);
- anything else: that one value is diffed by :func:`statekeeper.patch.diff`.

Strict types make the bytes exact: only dict, list, str, int, float, bool and None are
serialized (each type with its own encoding: ``True``, ``1`` and ``1.0`` differ), and a
document holding anything else — tuples, typed values (datetimes, UUIDs, enums…),
integers beyond 64 bits — takes the plain diff. So the ops are exactly those
:func:`statekeeper.patch.diff` returns for the same documents (tested on random
histories); the bytes only replace its proofs. A state folded from storage has its
bytes made when its load hands its objects to the caller (``ReadPath.public``), or at
its first save (:func:`kept_bytes`), so that save is proven on bytes too.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import patch
from ..codec.serializer import find_unserializable
from ..errors import SerializationError
from .state import HELD_AS_BYTES, document, unpack_document, unpack_value

if TYPE_CHECKING:
    from .state import AgentRecord

__all__ = ["UNKNOWN", "diff_by_key", "dump_keys", "fast_packer", "kept_bytes", "plain"]

Op = dict[str, Any]
# One msgpack Packer (strict types) per thread, reused: ``msgpack.packb`` makes a Packer
# and grows a fresh buffer on every call, which made packing 2-3x slower than reusing
# one (its buffer stays allocated between calls; a Packer is not thread-safe).
_packers = threading.local()


def _packer() -> Any:
    import msgpack  # type: ignore[import-untyped]

    packer = _packers.packer = msgpack.Packer(strict_types=True, use_bin_type=True)
    return packer


#: ``ormsgpack.packb`` when it is installed (see :func:`fast_packer`); False: not looked
#: for yet
_PACKB: Any = False
#: its options that make it as strict as the msgpack ``Packer`` above
_STRICT = 0


def fast_packer() -> tuple[Any, int] | None:
    """``(ormsgpack.packb, options)`` when ``ormsgpack`` is installed (a core dependency,
    absent only where no wheel exists), else None: ``packb(value, None, options)`` makes the
    bytes the strict msgpack ``Packer`` makes, in half its time (a 50-message chat history,
    16 KB: 4.1 against 8.9 us; docs/benchmarks.md, "group (session 2)"), and refuses with a
    ``TypeError`` what it refuses (tuples, subclasses, typed values, integers beyond 64
    bits, strings that do not encode) — and two things more, which the codec refuses anyway
    (orjson): keys that are not strings, nesting deeper than 255 levels. Stateless: no
    buffer per thread, nothing to reset after a refusal."""
    global _PACKB, _STRICT
    if _PACKB is False:
        found = patch.strict_packer()  # (the one definition of "strict")
        _PACKB, _STRICT = found if found is not None else (None, 0)
    return None if _PACKB is None else (_PACKB, _STRICT)


def dump_keys(document: Mapping[str, Any]) -> dict[str, bytes] | None:
    """The bytes of each top-level value, or None when one is not plain JSON."""
    packb: Any = _PACKB
    if packb is False:
        fast_packer()
        packb = _PACKB
    if packb is not None:
        strict = _STRICT
        dumped: dict[str, bytes] = {}
        try:  # (no default: what it passes through is refused with a TypeError)
            for key, value in document.items():
                dumped[key] = packb(value, None, strict)
            return dumped
        except TypeError:  # (ormsgpack.MsgpackEncodeError is one)
            return None
    packer = getattr(_packers, "packer", None) or _packer()
    pack = packer.pack
    dumped = {}
    try:  # (a loop, not a comprehension: no function of its own on every save)
        for key, value in document.items():
            dumped[key] = pack(value)
        return dumped
    except (TypeError, ValueError, OverflowError):  # (UnicodeEncodeError is a ValueError)
        packer.reset()  # a failed pack leaves its partial bytes in the buffer
        return None


def kept_bytes(record: AgentRecord) -> dict[str, bytes] | None:
    """``record.dumped``, made first of the record's own document when it has none
    (a state folded from storage, or brought up to date with another writer's events):
    the bytes of the state the record holds — objects parsed from the records its read
    verified, or JSON bytes of them (``blob``), never handed to a caller — so the save
    made on it is proven on bytes as any later save is, instead of by the plain diff
    of the whole document. None, with nothing kept, when the document has typed values
    (``rich``), is not a dict or holds a value that does not pack (:func:`dump_keys`)."""
    dumped = record.dumped
    if dumped is None and not record.rich:
        data = document(record)
        if type(data) is dict:
            dumped = dump_keys(data)
            if dumped is not None:
                # held as those bytes alone, as a save leaves a record (the flat save
                # makes a save of several changes only on a record so held): its objects
                # no longer go to a caller as they are (``fresh``), nor share a caller's
                # containers (``shared``)
                record.data, record.dumped, record.blob = HELD_AS_BYTES, dumped, None
                record.fresh = record.shared = False
    return dumped


def diff_by_key(
    old: Any,
    new: Mapping[str, Any],
    cached: dict[str, bytes] | None,
    carried: list[bytes] | None = None,
) -> tuple[list[Op], dict[str, bytes] | None]:
    """:func:`_diff_by_key`, a value no JSON holds in ``new`` (a key that is not a
    str, at the top level too: its path was made before anything was packed) refused
    as the codec refuses it, with :class:`SerializationError`, not a bare TypeError."""
    try:
        return _diff_by_key(old, new, cached, carried)
    except TypeError as exc:
        if isinstance(exc, SerializationError):
            raise
        found = find_unserializable(new, "data")
        if found is None:
            raise
        raise SerializationError(f"cannot serialize {found[1]}", found[0]) from exc


def _diff_by_key(
    old: Any,
    new: Mapping[str, Any],
    cached: dict[str, bytes] | None,
    carried: list[bytes] | None = None,
) -> tuple[list[Op], dict[str, bytes] | None]:
    """The ops that turn ``old`` into ``new`` (as :func:`statekeeper.patch.diff`),
    and the bytes of ``new``'s top-level values to cache for the next save.

    ``cached`` must be the bytes :func:`diff_by_key` returned for a document equal,
    as JSON, to ``old`` (None: nothing cached). ``old`` may be
    :data:`~.state.HELD_AS_BYTES`: the document ``cached`` holds, of which only the
    values that changed other than by growing are unpacked.

    ``carried``, when given, receives packed bytes holding every value the ops carry
    (O(size of the change): a grown list gives the bytes of its new items), or
    :data:`UNKNOWN` when the ops were found without packing (see :func:`plain`)."""
    held = old is HELD_AS_BYTES
    if held and cached is None:  # pragma: no cover - the store never holds it so
        raise ValueError("a document held as bytes needs its bytes")
    dumped = dump_keys(new) if type(new) is dict and (held or type(old) is dict) else None
    if dumped is None or cached is None:
        if held:
            assert cached is not None
            old = unpack_document(cached)
        if carried is not None:
            carried.extend(dumped.values() if dumped is not None else (UNKNOWN,))
        # (the ops of what was packed, not of ``new`` as it is now: see _packed)
        return patch.diff(old, new if dumped is None else unpack_document(dumped)), dumped
    ops: list[Op] = []
    # the top-level keys in another order than those of ``cached`` (the order stored):
    # the keys out of place removed and added again (patch.diff's ops for it)
    moved = patch.moved_keys(cached if held else old, dumped)
    for key in cached if held else old:
        if key not in dumped:  # (what was packed: not ``new``, which may change meanwhile)
            ops.append({"op": "remove", "path": "/" + patch.escape(key)})
            continue
        if moved and key in moved:
            continue
        before, after = cached.get(key), dumped[key]
        if before == after:  # unchanged (the common case: no path made)
            continue
        nval = new.get(key)
        path = "/" + (patch.escape(key) if "~" in key or "/" in key else key)
        if before is not None and type(nval) is list and (held or type(old[key]) is list):
            grown = _grew(before, after)
            if grown is not None:
                # the items packed, not the list as it is now (another thread may have
                # appended since): the count in ``after``'s header
                count = _count(after)
                if len(nval) < count:  # (shrunk since: the new items from their bytes)
                    nval = _packed(after)
                for item in nval[grown[0] : count]:
                    ops.append({"op": "add", "path": path + "/-", "value": item})
                if carried is not None:  # the new items: the bytes after the old ones
                    carried.append(after[grown[1] :])
                continue
        oval = unpack_document({key: before})[key] if held and before is not None else old[key]
        ops.extend(patch.diff(oval, _packed(after), path))
        if carried is not None:
            carried.append(after)
    if moved:
        for key in moved:
            path = "/" + patch.escape(key)
            if key in cached:
                ops.append({"op": "remove", "path": path})
            ops.append({"op": "add", "path": path, "value": _packed(dumped[key])})
            if carried is not None:
                carried.append(dumped[key])
        return ops, dumped
    for key, packed in dumped.items():
        if key not in cached if held else key not in old:
            value = _packed(packed)
            ops.append({"op": "add", "path": "/" + patch.escape(key), "value": value})
            if carried is not None:
                carried.append(packed)
    return ops, dumped


def _packed(packed: bytes) -> Any:
    """The value ``packed`` holds: the ops carry what was packed and cached, not the
    caller's containers as they are now (another thread may have edited or appended to
    them right after the pack: ops and cached bytes then apart for good)."""
    return unpack_value(packed)


def _count(packed: bytes) -> int:
    """The length of the msgpack array ``packed`` (the items it was packed with)."""
    if packed[0] == 0xDC:
        return packed[1] << 8 | packed[2]
    found = _array(packed)
    assert found is not None  # (an array: _grew found it one)
    return found[0]


#: in ``carried``: values whose bytes are not known (they were never packed)
UNKNOWN = b"\xcb"


def plain(carried: list[bytes]) -> bool:
    """The values packed in ``carried`` are plain JSON as the codec writes it without
    tagging: only dict, list, str, int, bool and None (packed in strict-types mode: no
    tuple, no typed value), no float at all (so none that is NaN or infinite: msgpack
    packs every float as ``0xcb`` and 8 bytes), no bytes (``0xc4``-``0xc6``: the codec
    tags them) and no ``"$t"`` string (the codec's tag key). One of those bytes inside
    a string only makes the answer a false "no". (A dict key that is not a str is not
    seen here: orjson refuses it, and the caller then serialises through the codec.)"""
    # (the bytes as ints: ``b"\xcb" in packed`` makes and clears a TypeError inside
    # CPython before it searches — it first tries the operand as an int —, ~600
    # instructions each; ``0xCB in packed`` is one memchr)
    for packed in carried:
        if (
            0xCB in packed
            or 0xC4 in packed
            or 0xC5 in packed
            or 0xC6 in packed
            or (0x24 in packed and b"\xa2$t" in packed)
        ):
            return False
    return True


def _array(packed: bytes) -> tuple[int, int] | None:
    """``(length, header size)`` of a msgpack array, None if ``packed`` is not one."""
    head = packed[0] if packed else 0
    if 0x90 <= head <= 0x9F:
        return head & 0x0F, 1
    if head == 0xDC:
        return int.from_bytes(packed[1:3], "big"), 3
    if head == 0xDD:
        return int.from_bytes(packed[1:5], "big"), 5
    return None


def _grew(before: bytes, after: bytes) -> tuple[int, int] | None:
    """``(length of the array before, offset of the first new item in after)`` when
    ``after`` is the array ``before`` with items appended (msgpack items are
    self-delimiting, so equal leading bytes are equal leading items); else None.

    The old items are compared through a memoryview: ``before[3:]`` copied the whole
    old history on every save (~13 KB in ``bench_save_instructions.py``'s chats: half
    of the loop thread's ``memcpy``, 7.9 -> 3.9 us a comparison by ``timeit``)."""
    # both 16-bit lengths: a history of 16..65535 (the bytes as ints, no slice made: a
    # packed value is never empty, and a 0xdc header is 3 bytes)
    if before[0] == 0xDC == after[0]:
        length = before[1] << 8 | before[2]
        if after[1] << 8 | after[2] < length or not after.startswith(memoryview(before)[3:], 3):
            return None
        return length, len(before)
    old, new = _array(before), _array(after)
    if old is None or new is None:
        return None
    if new[0] < old[0] or not after.startswith(memoryview(before)[old[1] :], new[1]):
        return None
    return old[0], new[1] + len(before) - old[1]
