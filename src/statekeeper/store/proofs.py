"""Proof that a saved list of large flat messages is unchanged, without packing it.

The flat save (:mod:`.flat`) proves that a message list only grew by packing the whole
list (strict-types msgpack, in C) and checking that the cached bytes start the new
ones: O(bytes of the history). For a history of *large* flat messages (tool outputs of
kilobytes), an exact proof by identity is much cheaper (``benchmarks/
bench_change_proofs.py``: 0.07x the pack at 300 messages of 4,000 characters; 2.9x at
15 of 300, so it is only made where the items are large):

- the old items are the very dict objects seen at the last save, in order;
- each has as many keys as then;
- every key and every value is the very object seen then.

It is exact for dicts whose values are all ``str``, ``int``, ``float``, ``bool`` or
``None`` (immutable: an edit puts another object in the slot; the pure proof holds a
reference to each object it saw, so no identity is reused while it is kept). A proof
is tied to the packed bytes of the list it was made with (``proof.packed``): the record's
cached bytes for that key must be that very object, so any save that went another way
(new bytes) leaves it unused. Written with C builtins (``map``, ``operator.is_``,
``itertools.chain``): no Python loop over the history.

**With the version tags (``statekeeper.store._stamps``, from ``native/stamps.c``).**
Where that extension is built (CPython 3.11-3.13) and ``STATEKEEPER_PURE`` is not set,
the proof is the items' addresses and each dict's version tag (PEP 509: a new tag at
every change of a dict's contents), compared in one C pass: each old item the very
dict seen then, its tag unchanged — so its keys and values are the very objects seen
then, all immutable scalars when the proof was made. It holds no reference to the
items (16 bytes an item: a cached agent's proof does not keep the caller's messages
alive); a tag is never given twice, so a dict made later at a freed one's address is
never taken for it (native/stamps.c). That costs ~1 % of packing the
list, so proofs are made for lists of items of any size (:data:`PROOF_FROM` 0): the
steady save of a chat of 300-character messages packs only its new message
(docs/benchmarks.md, "normal13"). Without it, the pure proof above, for large items only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import chain
from operator import is_
from typing import Any, NamedTuple

__all__ = [
    "NATIVE",
    "PROOF_FROM",
    "Proof",
    "array_head",
    "extend",
    "flat_scalars",
    "grown",
    "head_size",
    "holds",
    "make",
    "seal",
]

_SCALARS = frozenset((str, int, float, bool, type(None)))
_values = dict.values


class Proof(NamedTuple):
    """What a list of ``length`` items held when ``packed`` was made of it. ``marks``:
    the items' addresses and version tags (``bytes``, 16 an item, :mod:`._stamps`), or
    the pure proof's ``(items, lengths, keys, values)`` (private lists: never mutated)."""

    packed: bytes
    length: int
    marks: Any


def flat_scalars(items: list[Any]) -> bool:
    """Every item is a ``dict`` (exactly) whose values are all immutable scalars."""
    try:
        return (
            set(map(type, items)) <= {dict}
            and set(map(type, chain.from_iterable(map(_values, items)))) <= _SCALARS
        )
    except TypeError:  # (dict.values of an item that is not a dict)
        return False


def pure_make(packed: bytes, items: list[Any]) -> Proof | None:
    """The proof of ``items`` (packed as ``packed``), None when they are not all flat
    dicts of scalars."""
    if not flat_scalars(items):
        return None
    own = list(items)
    return Proof(
        packed,
        len(own),
        (
            own,
            list(map(len, own)),
            list(chain.from_iterable(own)),
            list(chain.from_iterable(map(_values, own))),
        ),
    )


def pure_holds(proof: Proof, value: list[Any]) -> bool:
    """``value`` starts with the proof's items, each unchanged since the proof."""
    items, lengths, keys, values = proof.marks
    return (
        len(items) <= len(value)
        and all(map(is_, value, items))
        and list(map(len, items)) == lengths
        and all(map(is_, chain.from_iterable(items), keys))
        and all(map(is_, chain.from_iterable(map(_values, items)), values))
    )


def pure_grown(proof: Proof, packed: bytes, added: list[Any]) -> Proof | None:
    """The proof after ``added`` were appended (``packed``: the bytes of the whole new
    list); None when they are not flat dicts of scalars."""
    if not flat_scalars(added):
        return None
    items, lengths, keys, values = proof.marks
    return Proof(
        packed,
        proof.length + len(added),
        (
            items + added,
            lengths + list(map(len, added)),
            keys + list(chain.from_iterable(added)),
            values + list(chain.from_iterable(map(_values, added))),
        ),
    )


def _load() -> Any:
    if os.environ.get("STATEKEEPER_PURE", "") not in ("", "0"):
        return None
    try:
        from . import _stamps  # type: ignore[attr-defined]
    except ImportError:  # not built (no compiler, another Python): the pure proof
        return None
    if getattr(_stamps, "LAYOUT", 1) != 2:  # (a stale build, of proofs that held their
        return None  # items, or from before seal: the pure proof)
    return _stamps


_native = _load()
#: whether proofs are the items' version tags (:mod:`._stamps`)
NATIVE = _native is not None


def pure_extend(before: bytes, packed: bytes, length: int) -> tuple[bytes, bytes]:
    """``before`` and ``packed`` (msgpack arrays) joined: the array of ``length`` items
    whose first ones are ``before``'s and the rest ``packed``'s; and ``packed``'s
    items' bytes (without its header)."""
    tail = packed[head_size(packed) :]
    # (one allocation, the old items' bytes copied once: no slice of them made first)
    return b"".join((array_head(length), memoryview(before)[head_size(before) :], tail)), tail


def pure_seal(proof: Proof, packed: bytes) -> Proof | None:
    """The proof, made before its list was packed, tied to the bytes ``packed``; None
    when they are not an array of as many items as the proof's (the list grew or shrank
    between the proof and the pack)."""
    if not packed or (first := packed[0]) < 0x90 or 0x9F < first < 0xDC or first > 0xDD:
        return None
    size = head_size(packed)
    count = first & 0x0F if size == 1 else int.from_bytes(packed[1:size], "big")
    if count != proof.length or len(packed) < size:
        return None
    return proof._replace(packed=packed)


#: ``make(packed, items)``: the proof of the list ``items`` packed as ``packed`` (None:
#: not all flat dicts of scalars); ``holds(proof, value)``: ``value`` starts with the
#: proof's items, each unchanged since; ``grown(proof, packed, added)``: the proof
#: after ``added`` were appended (None: not flat); ``extend(before, packed, length)``:
#: the bytes of the grown list and of its new items; ``seal(proof, packed)``: the proof
#: tied to other bytes of its items (None: not an array of as many). Each proof is a
#: 3-tuple ``(packed, length, marks)``; by addresses and version tags (C, no Python
#: frame, no reference to the items) when :data:`NATIVE`, else pure.
#:
#: A proof describes its items as they were when it was made: made (or grown) BEFORE
#: the list is packed, then sealed with the bytes, so that an edit between the two (by
#: another thread: the GIL can pass after the pack returns) leaves a proof that no
#: longer holds, never one that holds for the edited items with the bytes of the
#: unedited ones (tests/store/test_proof_races.py). Both of one private copy of the
#: list (flat.py): an item swapped out of the caller's list between them, and back
#: later, its tag unchanged, would prove the bytes of the one swapped in
make: Callable[[bytes, list[Any]], tuple[Any, ...] | None]
holds: Callable[[tuple[Any, ...], list[Any]], bool]
grown: Callable[[tuple[Any, ...], bytes, list[Any]], tuple[Any, ...] | None]
extend: Callable[[bytes, bytes, int], tuple[bytes, bytes]]
seal: Callable[[tuple[Any, ...], bytes], tuple[Any, ...] | None]
if _native is None:
    make, holds, grown, extend = pure_make, pure_holds, pure_grown, pure_extend  # type: ignore[assignment]
    seal = pure_seal  # type: ignore[assignment]
else:
    make, holds, grown, extend = _native.make, _native.holds, _native.grown, _native.extend
    seal = _native.seal

#: the smallest average packed size of an item (bytes) for which a proof is made: below
#: it packing the list is as cheap as proving it (bench_change_proofs.py); by version
#: tags a proof is cheaper than the pack at any size
PROOF_FROM = 0 if NATIVE else 2048


def array_head(length: int) -> bytes:
    """The msgpack header of an array of ``length`` items."""
    if length < 16:
        return bytes((0x90 | length,))
    if length < 0x10000:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def head_size(packed: bytes) -> int:
    """The size of the msgpack array header ``packed`` starts with (it is an array)."""
    first = packed[0]
    return 1 if first < 0xDC else 3 if first == 0xDC else 5
