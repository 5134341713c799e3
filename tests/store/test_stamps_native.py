"""``statekeeper.store._stamps`` (native/stamps.c): a proof by address and version tag
holds exactly while no old item changed — every way a dict's contents change breaks it,
and so does another dict made later at a freed item's address — keeps no reference to
the items, and ``extend`` joins msgpack arrays as packing the whole list does."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

import ormsgpack
import pytest

from statekeeper.store import proofs

stamps = pytest.importorskip("statekeeper.store._stamps")

CHANGES: list[Callable[[dict[str, Any]], Any]] = [
    lambda d: d.__setitem__("content", "other"),
    lambda d: d.__setitem__("content", d["content"] + ""),  # (an equal str, maybe another)
    lambda d: d.__setitem__("new", None),
    lambda d: d.__delitem__("role"),
    lambda d: d.pop("role"),
    lambda d: d.popitem(),
    lambda d: d.clear(),
    lambda d: d.update(role="x"),
    lambda d: d.setdefault("other", 1),
    lambda d: d.__ior__({"role": "y"}),
    lambda d: d.__setitem__("role", d.pop("role")),  # the same values, another order
]


def _items(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"message {i}", "n": i, "x": 1.5} for i in range(n)]


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("at", [0, 2])
def test_any_change_of_an_old_item_breaks_the_proof(change: Any, at: int) -> None:
    items = _items(3)
    proof = stamps.make(b"packed", items)
    assert proof is not None and stamps.holds(proof, items)
    before = dict(items[at])
    change(items[at])
    if items[at] == before and list(items[at]) == list(before):
        return  # (an equal str was the same object: nothing changed)
    assert not stamps.holds(proof, items)


def test_a_replaced_reordered_or_shorter_list_breaks_the_proof() -> None:
    items = _items(3)
    proof = stamps.make(b"p", items)
    assert stamps.holds(proof, [*items, {"role": "new"}])
    assert not stamps.holds(proof, [dict(items[0]), *items[1:]])  # an equal copy
    assert not stamps.holds(proof, items[::-1])
    assert not stamps.holds(proof, items[:2])
    more = {"role": "more"}
    grown = stamps.grown(proof, b"q", [more])
    assert grown[0] == b"q" and grown[1] == 4 and stamps.holds(grown, [*items, more])
    assert not stamps.holds(grown, [*items, dict(more)])
    assert stamps.grown(proof, b"q", [{"role": ["not", "flat"]}]) is None


@pytest.mark.parametrize(
    "items",
    [[1], ["s"], [{"a": [1]}], [{"a": {"b": 1}}], [{"a": b"bytes"}], [{"a": (1,)}]],
)
def test_only_dicts_of_immutable_scalars_are_proven(items: list[Any]) -> None:
    assert stamps.make(b"p", items) is None
    assert proofs.pure_make(b"p", items) is None


class Sub(str):
    pass


def test_a_str_subclass_value_is_not_proven() -> None:
    assert stamps.make(b"p", [{"a": Sub("x")}]) is None


@pytest.mark.parametrize("old", [0, 1, 14, 15, 16, 65534, 65535, 65536])
@pytest.mark.parametrize("new", [1, 2])
def test_extend_packs_as_the_whole_list(old: int, new: int) -> None:
    before = list(range(old))
    added = [{"k": "v"}] * new
    packed_before, packed_added = ormsgpack.packb(before), ormsgpack.packb(added)
    for extend in (stamps.extend, proofs.pure_extend):
        after, tail = extend(packed_before, packed_added, old + new)
        assert after == ormsgpack.packb(before + added)
        assert tail == ormsgpack.packb(added)[1:]


def test_extend_refuses_what_is_not_an_array() -> None:
    with pytest.raises(ValueError):
        stamps.extend(b"\x80", b"\x91\x01", 2)


@pytest.mark.parametrize("count", [0, 1, 15, 16, 65535, 65536])
def test_seal_ties_a_proof_to_the_bytes_of_as_many_items(count: int) -> None:
    items = [{"n": 1}] * count
    packed = ormsgpack.packb(items)
    for make, seal in ((stamps.make, stamps.seal), (proofs.pure_make, proofs.pure_seal)):
        proof = make(b"", items)
        assert proof is not None
        sealed = seal(proof, packed)
        assert sealed is not None and sealed[0] is packed and sealed[1] == count
        assert tuple(sealed[1:]) == tuple(proof[1:])
        # bytes of one item more or fewer (the list changed between stamp and pack)
        assert seal(proof, ormsgpack.packb([*items, {"n": 1}])) is None
        if count:
            assert seal(proof, ormsgpack.packb(items[1:])) is None


@pytest.mark.parametrize("packed", [b"", b"\x80", b"\xdc\x00", b"\xdd\x00\x00\x00", b"\xc0"])
def test_seal_refuses_what_is_not_an_array(packed: bytes) -> None:
    for make, seal in ((stamps.make, stamps.seal), (proofs.pure_make, proofs.pure_seal)):
        proof = make(b"", [])
        assert seal(proof, packed) is None


def test_a_proof_keeps_no_reference_to_its_items() -> None:
    """Before, a proof held a copy of the list: a cached agent's proof kept every message
    of its last save alive after its caller dropped them (docs/benchmarks.md,
    "memproof")."""
    items = _items(20)
    counts = [sys.getrefcount(item) for item in items]
    proof = stamps.make(b"p", items)
    more = _items(2)
    grown = stamps.grown(proof, b"q", more)
    sealed = stamps.seal(grown, ormsgpack.packb(items + more))
    assert sealed is not None and stamps.holds(sealed, items + more)
    assert [sys.getrefcount(item) for item in items] == counts
    held = {id(o) for p in (proof, grown, sealed) for o in gc.get_referents(p)}
    assert not held & {id(item) for item in items + more}


def _at(address: int, make: Callable[[], Any], tries: int = 100_000) -> tuple[Any, list[Any]]:
    """An object made by ``make`` at ``address`` (a freed dict's), and the objects made
    on the way (kept alive, so that each try takes another block)."""
    made: list[Any] = []
    for _ in range(tries):
        obj = make()
        if id(obj) == address:
            return obj, made
        made.append(obj)
    pytest.skip("the allocator did not reuse the freed address here")


@pytest.mark.parametrize("same_values", [True, False])
def test_a_dict_made_at_a_freed_items_address_is_never_taken_for_it(same_values: bool) -> None:
    """The silent corruption an address alone would allow: the caller drops a saved
    message and makes another at the same address (CPython's dict free list hands the
    last freed dict out first). Its version tag is new (a tag is never given twice), so
    the proof does not hold — even with equal contents made of the very same objects."""
    role, content = "user", "message 0"
    items = [{"role": role, "content": content}]
    proof = stamps.make(b"p", items)
    address = id(items[0])
    del items[0]
    if same_values:
        reused, _ = _at(address, lambda: {"role": role, "content": content})
    else:
        reused, _ = _at(address, lambda: {"role": "ai", "content": "another"})
    assert id(reused) == address
    assert not stamps.holds(proof, [reused])


def test_another_kind_of_object_at_a_freed_items_address_is_never_taken_for_it() -> None:
    """What lives at a freed dict's address may be no dict at all (its type is read
    before its tag): a list, of the same block size, in its place."""
    # the dict free list filled first: the item, freed after it, goes to the allocator
    filler: list[dict[str, Any]] = [{} for _ in range(200)]
    items = [{"role": "user", "content": "m"}]
    proof = stamps.make(b"p", items)
    address = id(items[0])
    del filler
    items.clear()
    reused, _ = _at(address, lambda: [None, None])
    assert not stamps.holds(proof, [reused])


def test_the_build_says_the_layout_of_its_proofs() -> None:
    """A stale build (proofs that held their items: no ``LAYOUT``) is not used: the
    pure proof is taken instead of a native one that flat.py would misread."""
    assert stamps.LAYOUT == 2
