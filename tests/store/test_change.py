"""``diff_by_key`` (the store's change detection) returns exactly the ops of
``patch.diff``, on random histories of chat-like documents."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper import patch
from statekeeper.store.change import diff_by_key

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, 2.5, -1.0]),
    st.text(max_size=4),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)
# one step of a history: what happens to the document the caller saves next
steps = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["messages", "log"]), values),
    st.tuples(st.just("set"), st.sampled_from(["step", "mode", "messages", "x/y", "~"]), values),
    st.tuples(st.just("edit"), st.sampled_from(["messages", "log"]), values),
    st.tuples(st.just("pop"), st.sampled_from(["messages", "log"]), st.none()),
    st.tuples(st.just("drop"), st.sampled_from(["step", "mode", "log", "x/y"]), st.none()),
    st.tuples(st.just("reorder"), st.none(), st.none()),
    st.tuples(st.just("same"), st.none(), st.none()),
)


def step(doc: dict[str, Any], what: tuple[str, Any, Any]) -> dict[str, Any]:
    """The caller's next document (the caller mutates its own objects in place)."""
    kind, key, value = what
    if kind == "append":
        target = doc.setdefault(key, [])
        if type(target) is list:
            target.append(value)
        else:
            doc[key] = [value]
    elif kind == "set":
        doc[key] = value
    elif kind == "edit" and type(doc.get(key)) is list and doc[key]:
        doc[key][len(doc[key]) // 2] = value  # in the middle of the history
    elif kind == "pop" and type(doc.get(key)) is list and doc[key]:
        doc[key].pop()
    elif kind == "drop":
        doc.pop(key, None)
    elif kind == "reorder":
        doc = dict(reversed(list(doc.items())))
    return doc


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, min_size=1, max_size=25))
def test_diff_by_key_is_patch_diff_on_random_histories(history: list[Any]) -> None:
    caller: dict[str, Any] = {"messages": [], "step": 0}
    stored = copy.deepcopy(caller)  # the store's private copy, as folded
    cached = None
    for what in history:
        caller = step(caller, what)
        ops, cached = diff_by_key(stored, caller, cached)
        assert ops == patch.diff(stored, caller)
        stored = orjson.loads(orjson.dumps(patch.apply(stored, ops)))
        assert patch.diff(stored, caller) == []


def test_a_grown_history_is_proven_from_the_bytes() -> None:
    old = {"messages": [{"role": "ai", "content": "hi"}], "n": 1}
    _, cached = diff_by_key(old, old, None)
    new = {"messages": [*old["messages"], {"role": "user", "content": "yo"}], "n": 1}  # type: ignore[misc]
    ops, _ = diff_by_key(old, new, cached)
    assert ops == [{"op": "add", "path": "/messages/-", "value": new["messages"][1]}]  # type: ignore[index]


def test_true_and_one_are_not_the_same_bytes() -> None:
    old = {"messages": [1, 2], "flag": 1}
    _, cached = diff_by_key(old, old, None)
    new = {"messages": [True, 2, 3], "flag": True}
    ops, _ = diff_by_key(old, new, cached)
    assert ops == patch.diff(old, new)
    assert {"op": "replace", "path": "/flag", "value": True} in ops


def test_a_value_that_only_renders_the_same_is_still_a_change() -> None:
    """Typed values and tuples are not compared by their bytes: the plain diff decides
    (a string that becomes a UUID with the same text is a change)."""
    import uuid

    ident = uuid.uuid4()
    old = {"id": str(ident), "pair": [1, 2], "messages": ["a"]}
    _, cached = diff_by_key(old, old, None)
    for new in (
        {"id": ident, "pair": [1, 2], "messages": ["a"]},
        {"id": str(ident), "pair": (1, 2), "messages": ["a", "b"]},
        {"id": str(ident), "pair": [1, 2], "messages": ["a", 2**70]},
    ):
        ops, _ = diff_by_key(old, new, cached)
        assert ops == patch.diff(old, new) != []


def test_long_arrays_grow_across_msgpack_header_sizes() -> None:
    old: dict[str, Any] = {"messages": []}
    cached = None
    for n in (1, 14, 15, 16, 17, 300, 65535, 65536, 65540):
        new = {"messages": list(range(n))}
        ops, cached = diff_by_key(old, new, cached)
        assert ops == patch.diff(old, new)
        old = orjson.loads(orjson.dumps(new))


# -- what the ops carry: the event of a plain save is serialised without a walk -----------

plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["$t", "ë˟", "\u02c0", "ā"]),  # the tag key; a 0xcb or 0xc4 byte
    st.binary(max_size=3),
)
any_values = st.recursive(
    plain_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(
            st.one_of(st.text(max_size=3), st.just("$t"), st.integers(0, 2)), inner, max_size=4
        ),
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["messages", "log", "x"]), any_values), max_size=12))
def test_carried_bytes_say_plain_only_when_the_codec_would_not_tag(
    history: list[tuple[str, Any]],
) -> None:
    """When ``plain(carried)`` says so, serialising the ops straight with orjson gives
    the bytes the codec's format would (nothing to tag, no float to check); a NaN, an
    infinity, a tuple, a ``"$t"`` key or an integer beyond 64 bits never passes."""
    from statekeeper.codec import Codec
    from statekeeper.codec.types import needs_tagging
    from statekeeper.errors import SerializationError
    from statekeeper.store.change import plain

    codec = Codec()
    old: dict[str, Any] = {"messages": [], "log": []}
    _, cached = diff_by_key(old, old, None)
    for key, value in history:
        new = copy.deepcopy(old)
        target = new.get(key)
        if type(target) is list:
            target.append(value)
        else:
            new[key] = value
        carried: list[bytes] = []
        try:
            ops, packed = diff_by_key(old, new, cached, carried)
        except SerializationError:  # (a key that is not a str: the store refuses it)
            return
        if plain(carried):
            assert not needs_tagging(ops)
            try:
                fast = orjson.dumps({"ops": ops})
            except TypeError:  # a key that is not a str: the store falls back to the codec
                continue
            assert fast == codec.serialize({"ops": ops}, "event")
        if packed is None:  # not packable: the next save diffs the plain way
            return
        old, cached = new, packed


def test_values_a_fast_serialisation_would_get_wrong_are_not_plain() -> None:
    from statekeeper.store.change import plain

    old: dict[str, Any] = {"messages": ["a"]}
    _, cached = diff_by_key(old, old, None)
    for item in (float("nan"), float("inf"), 1.5, {"$t": "x"}, "$t", (1, 2), 2**70, b"x"):
        carried: list[bytes] = []
        diff_by_key(old, {"messages": ["a", item]}, cached, carried)
        assert not plain(carried), item
    carried = []
    diff_by_key(old, {"messages": ["a", {"role": "ai", "content": "hi"}]}, cached, carried)
    assert plain(carried)
    assert carried == [msgpack_of({"role": "ai", "content": "hi"})]  # the new item only


def msgpack_of(value: Any) -> bytes:
    import msgpack  # type: ignore[import-untyped]

    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


async def test_a_save_whose_new_values_are_not_json_is_refused_or_tagged_as_before() -> None:
    """The event of a plain save is serialised without the codec's walk; values the
    packed bytes cannot rule out still go through the codec: bytes are tagged and
    stored, a dict key that is not a str is a SerializationError naming it."""
    import pytest

    from statekeeper import StateStore
    from statekeeper.errors import SerializationError

    async with StateStore("memory://") as store:
        await store.save("a", {"messages": ["hi"]})
        await store.save("a", {"messages": ["hi", b"\x00raw"]})
        assert (await store.load("a")).data == {"messages": ["hi", b"\x00raw"]}
        with pytest.raises(SerializationError) as info:
            await store.save("a", {"messages": ["hi", b"\x00raw", {1: "one"}]})
        assert "messages" in str(info.value)
        assert (await store.load("a")).seq == 2  # nothing stored


def test_a_long_array_that_shrinks_or_changes_an_old_item_is_not_a_growth() -> None:
    # (both sides 16-bit msgpack arrays: the branch of _grew that reads the lengths
    # from the header bytes)
    base = list(range(300))
    for new_list in (base[:200], [-1, *base[1:], 300], [*base[:150], "x", *base[151:], 300]):
        old, new = {"messages": base}, {"messages": new_list}
        _, cached = diff_by_key({}, old, None)
        ops, _ = diff_by_key(old, new, cached)
        assert ops == patch.diff(old, new)
