"""JSON Patch (RFC 6902): diff/apply round trips, strict JSON equality, no mutation,
compatibility with the ``jsonpatch`` library, and errors."""

from __future__ import annotations

import copy
import datetime as dt
from decimal import Decimal
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from statekeeper import SerializationError
from statekeeper.errors import PatchError
from statekeeper.patch import apply, diff, escape, unescape

# -- strategies and strict equality -------------------------------------------------------

KEYS = st.one_of(
    st.sampled_from(["a", "b", "messages", "", "~", "/", "a/b", "~1", "0", "-"]),
    st.text(max_size=6),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, 0.0, 1.0, -0.0, True, False, "", "1"]),  # the look-alikes
    st.text(max_size=8),
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(KEYS, children, max_size=6),
    ),
    max_leaves=20,
)
DOCS = st.dictionaries(KEYS, JSON, max_size=6)


def strict(a: Any, b: Any) -> bool:
    """JSON equality: ``True``, ``1`` and ``1.0`` are three different values, and so
    are ``0.0`` and ``-0.0`` (and typed values equal by ``==`` but not as data:
    ``Decimal("1.10")`` and ``Decimal("1.100")``, one instant at two UTC offsets)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(strict(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(strict(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and repr(a) == repr(b)


@st.composite
def related_pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    """Two documents, usually an edit of one another (the case diff is tuned for)."""
    old = draw(DOCS)
    new = copy.deepcopy(old)
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(["set", "drop", "grow", "shrink", "retype"]))
        if action == "set":
            new[draw(KEYS)] = draw(JSON)
        elif action == "drop" and new:
            del new[draw(st.sampled_from(sorted(new)))]
        elif action == "grow":
            key = draw(KEYS)
            base = new.get(key) if isinstance(new.get(key), list) else []
            new[key] = [*base, *draw(st.lists(JSON, min_size=1, max_size=3))]  # type: ignore[misc]
        elif action == "shrink":
            lists = sorted(k for k, v in new.items() if isinstance(v, list) and v)
            if lists:
                key = draw(st.sampled_from(lists))
                new[key] = new[key][: draw(st.integers(0, len(new[key]) - 1))]
        elif action == "retype" and new:
            key = draw(st.sampled_from(sorted(new)))
            value = new[key]
            if type(value) in (int, float, bool):
                new[key] = draw(st.sampled_from([1, 1.0, True, 0, 0.0, False]))
    if draw(st.booleans()):
        return old, new
    return old, draw(DOCS)  # or two unrelated documents


PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: the jsonpatch library is slow (deep copies everywhere): fewer examples keep the suite fast
INTEROP = settings(PROPS, max_examples=60)


# -- properties -------------------------------------------------------------------------------


@PROPS
@given(related_pairs())
def test_apply_of_diff_gives_the_new_document_without_mutating(pair: tuple[Any, Any]) -> None:
    old, new = pair
    old_copy, new_copy = copy.deepcopy(old), copy.deepcopy(new)
    ops = diff(old, new)
    ops_copy = copy.deepcopy(ops)
    assert strict(apply(old, ops), new)
    # neither diff nor apply touched their inputs (apply is not in place by default)
    assert strict(old, old_copy) and strict(new, new_copy) and strict(ops, ops_copy)
    # in place gives the same result
    assert strict(apply(copy.deepcopy(old), ops_copy, in_place=True), new)


@settings(max_examples=50, deadline=None)
@given(DOCS)
def test_diff_of_equal_documents_is_empty(doc: Any) -> None:
    assert diff(doc, copy.deepcopy(doc)) == []


@INTEROP
@given(related_pairs())
def test_our_patches_apply_with_the_jsonpatch_library(pair: tuple[Any, Any]) -> None:
    old, new = pair
    ops = diff(old, new)
    result = jsonpatch.JsonPatch(copy.deepcopy(ops)).apply(copy.deepcopy(old))
    assert strict(result, new)


@INTEROP
@given(related_pairs())
def test_jsonpatch_library_patches_apply_here(pair: tuple[Any, Any]) -> None:
    old, new = pair
    theirs = jsonpatch.make_patch(old, new).patch  # may use move and copy
    expected = jsonpatch.apply_patch(copy.deepcopy(old), theirs)
    assume(strict(expected, new))  # jsonpatch compares with ==, so True == 1 for it
    assert strict(apply(old, theirs), new)


@given(st.text())
def test_escape_round_trip(token: str) -> None:
    assert unescape(escape(token)) == token
    assert escape(token).count("/") == 0


# -- what the diffs look like ------------------------------------------------------------------


def test_diff_shapes() -> None:
    assert diff({"m": [1, 2]}, {"m": [1, 2, 3, 4]}) == [
        {"op": "add", "path": "/m/-", "value": 3},
        {"op": "add", "path": "/m/-", "value": 4},
    ]
    assert diff({"m": [1, 2, 3]}, {"m": [1]}) == [
        {"op": "remove", "path": "/m/2"},
        {"op": "remove", "path": "/m/1"},
    ]
    assert diff({"a": {"x": 1, "y": 2}}, {"a": {"x": 1, "y": 3}}) == [
        {"op": "replace", "path": "/a/y", "value": 3}
    ]
    assert diff({"a/b": 1, "c~d": 2}, {"a/b": 2}) == [
        {"op": "replace", "path": "/a~1b", "value": 2},
        {"op": "remove", "path": "/c~0d"},
    ]
    assert diff({"x": 1}, [1]) == [{"op": "replace", "path": "", "value": [1]}]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"x": 1}, {"x": True}),
        ({"x": True}, {"x": 1.0}),
        ({"x": 1}, {"x": 1.0}),
        ({"x": [0]}, {"x": [False]}),
        ({"x": {"y": [1, 2]}}, {"x": {"y": [1, 2.0]}}),
    ],
)
def test_diff_tells_json_look_alikes_apart(old: Any, new: Any) -> None:
    ops = diff(old, new)
    assert ops
    assert strict(apply(old, ops), new)


_UTC = dt.UTC
_PARIS = dt.timezone(dt.timedelta(hours=1))
_NOON = dt.datetime(2025, 1, 1, 12, tzinfo=_UTC)
_NOON_PARIS = dt.datetime(2025, 1, 1, 13, tzinfo=_PARIS)  # the same instant


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"x": 0.0}, {"x": -0.0}),
        ({"x": [1, 0.0]}, {"x": [1, -0.0]}),
        ({"x": Decimal("1.10")}, {"x": Decimal("1.100")}),
        ({"x": Decimal("0")}, {"x": Decimal("-0")}),
        ({"x": _NOON}, {"x": _NOON_PARIS}),
        ({"x": {"at": dt.time(12, tzinfo=_UTC)}}, {"x": {"at": dt.time(13, tzinfo=_PARIS)}}),
        ({"x": [_NOON]}, {"x": [_NOON_PARIS]}),
        ({"x": {1, 2}}, {"x": {True, 2}}),
        ({"x": frozenset({Decimal("1.10")})}, {"x": frozenset({Decimal("1.100")})}),
    ],
    ids=["zero-sign", "zero-sign-in-list", "decimal-exponent", "decimal-sign", "datetime-offset",
         "time-offset", "datetime-offset-in-list", "set-item-type", "frozenset-item-exponent"],
)  # fmt: skip
def test_diff_tells_values_equal_by_python_but_not_as_data_apart(old: Any, new: Any) -> None:
    # Python's == calls each pair equal; stored, each is another value (a diff that
    # called them the same dropped the change: the old value was loaded back)
    assert old == new
    ops = diff(old, new)
    assert ops
    assert strict(apply(old, ops), new)


def test_diff_refuses_a_non_string_key() -> None:
    with pytest.raises(SerializationError):
        diff({"a": 1}, {"a": 1, 2: "x"})


# -- applying patches from elsewhere -------------------------------------------------------------


def test_all_six_operations() -> None:
    doc = {"a": {"b": [1, 2, 3]}, "c": "x"}
    ops = [
        {"op": "test", "path": "/c", "value": "x"},
        {"op": "add", "path": "/a/b/1", "value": 9},
        {"op": "remove", "path": "/a/b/0"},
        {"op": "replace", "path": "/c", "value": {"deep": True}},
        {"op": "copy", "from": "/c", "path": "/d"},
        {"op": "move", "from": "/a/b", "path": "/list"},
        {"op": "add", "path": "/d/deep", "value": False},
    ]
    result = apply(doc, ops)
    assert result == {"a": {}, "c": {"deep": True}, "d": {"deep": False}, "list": [9, 2, 3]}
    assert doc == {"a": {"b": [1, 2, 3]}, "c": "x"}


def test_in_place_mutates_and_returns_the_document() -> None:
    doc: dict[str, Any] = {"m": []}
    assert apply(doc, [{"op": "add", "path": "/m/-", "value": 1}], in_place=True) is doc
    assert doc == {"m": [1]}


@pytest.mark.parametrize(
    "op",
    [
        pytest.param({"op": "remove", "path": "/missing"}, id="remove-missing"),
        pytest.param({"op": "replace", "path": "/missing", "value": 1}, id="replace-missing"),
        pytest.param({"op": "add", "path": "/no/parent", "value": 1}, id="add-no-parent"),
        pytest.param({"op": "add", "path": "list/-", "value": 1}, id="pointer-without-slash"),
        pytest.param({"op": "add", "path": "/list/5", "value": 1}, id="index-past-end"),
        pytest.param({"op": "add", "path": "/list/01", "value": 1}, id="leading-zero"),
        pytest.param({"op": "add", "path": "/list/x", "value": 1}, id="non-numeric-index"),
        pytest.param({"op": "remove", "path": "/list/-"}, id="dash-in-remove"),
        pytest.param({"op": "remove", "path": "/list/4"}, id="remove-past-end"),
        pytest.param({"op": "remove", "path": ""}, id="remove-root"),
        pytest.param({"op": "add", "path": "/s/x", "value": 1}, id="into-a-string"),
        pytest.param({"op": "test", "path": "/n", "value": True}, id="test-1-is-not-true"),
        pytest.param({"op": "test", "path": "/n", "value": 1.0}, id="test-1-is-not-1.0"),
        pytest.param({"op": "test", "path": "/missing", "value": 1}, id="test-missing"),
        pytest.param({"op": "jump", "path": "/n"}, id="unknown-op"),
        pytest.param({"path": "/n"}, id="no-op"),
        pytest.param({"op": "add", "path": "/n"}, id="add-without-value"),
        pytest.param({"op": "replace", "path": "/n"}, id="replace-without-value"),
        pytest.param({"op": "add", "value": 1}, id="no-path"),
        pytest.param({"op": "add", "path": 3, "value": 1}, id="path-not-a-string"),
        pytest.param({"op": "move", "from": "/d", "path": "/d/inner"}, id="move-into-child"),
        pytest.param({"op": "move", "from": "/missing", "path": "/x"}, id="move-from-missing"),
        pytest.param({"op": "copy", "path": "/x"}, id="copy-without-from"),
    ],
)
def test_bad_operations_raise_patch_error_and_change_nothing(op: dict[str, Any]) -> None:
    doc = {"list": [1, 2, 3], "n": 1, "s": "text", "d": {"k": 1}}
    before = copy.deepcopy(doc)
    ok = {"op": "add", "path": "/list/-", "value": 4}  # applies, then the bad op fails
    with pytest.raises(PatchError):
        apply(doc, [ok, op])
    assert strict(doc, before)


def test_patch_error_says_which_op_failed() -> None:
    with pytest.raises(PatchError, match=r"op 1 'remove' at '/gone'"):
        apply({"a": 1}, [{"op": "remove", "path": "/a"}, {"op": "remove", "path": "/gone"}])
