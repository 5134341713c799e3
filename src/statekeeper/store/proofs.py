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
``None`` (immutable: an edit puts another object in the slot; the proof holds a
reference to each object it saw, so no identity is reused while it is kept). A proof
is tied to the packed bytes of the list it was made with (``proof.packed``): the record's
cached bytes for that key must be that very object, so any save that went another way
(new bytes) leaves it unused. Written with C builtins (``map``, ``operator.is_``,
``itertools.chain``): no Python loop over the history.
"""

from __future__ import annotations

from itertools import chain
from operator import is_
from typing import Any, NamedTuple

__all__ = [
    "PROOF_FROM",
    "Proof",
    "array_head",
    "flat_scalars",
    "grown",
    "head_size",
    "holds",
    "make",
]

#: the smallest average packed size of an item (bytes) for which a proof is made: below
#: it packing the list is as cheap as proving it (bench_change_proofs.py)
PROOF_FROM = 2048

_SCALARS = frozenset((str, int, float, bool, type(None)))
_values = dict.values


class Proof(NamedTuple):
    """What a list held when ``packed`` was made of it (private lists: never mutated)."""

    packed: bytes
    items: list[dict[str, Any]]
    lengths: list[int]
    keys: list[str]
    values: list[Any]


def flat_scalars(items: list[Any]) -> bool:
    """Every item is a ``dict`` (exactly) whose values are all immutable scalars."""
    try:
        return (
            set(map(type, items)) <= {dict}
            and set(map(type, chain.from_iterable(map(_values, items)))) <= _SCALARS
        )
    except TypeError:  # (dict.values of an item that is not a dict)
        return False


def make(packed: bytes, items: list[Any]) -> Proof | None:
    """The proof of ``items`` (packed as ``packed``), None when they are not all flat
    dicts of scalars."""
    if not flat_scalars(items):
        return None
    own = list(items)
    return Proof(
        packed,
        own,
        list(map(len, own)),
        list(chain.from_iterable(own)),
        list(chain.from_iterable(map(_values, own))),
    )


def holds(proof: Proof, value: list[Any]) -> bool:
    """``value`` starts with the proof's items, each unchanged since the proof."""
    items = proof.items
    return (
        len(items) <= len(value)
        and all(map(is_, value, items))
        and list(map(len, items)) == proof.lengths
        and all(map(is_, chain.from_iterable(items), proof.keys))
        and all(map(is_, chain.from_iterable(map(_values, items)), proof.values))
    )


def grown(proof: Proof, packed: bytes, added: list[Any]) -> Proof | None:
    """The proof after ``added`` were appended (``packed``: the bytes of the whole new
    list); None when they are not flat dicts of scalars."""
    if not flat_scalars(added):
        return None
    return Proof(
        packed,
        proof.items + added,
        proof.lengths + list(map(len, added)),
        proof.keys + list(chain.from_iterable(added)),
        proof.values + list(chain.from_iterable(map(_values, added))),
    )


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
