"""The saver applies a write's ops with :func:`mapping.apply_once` (each container on
the ops' paths copied once per call, not once per op): its result, its errors and its
copy-on-write are those of :func:`statekeeper.patch.apply`, for any ops on any
document — including ops that reach into a value an earlier op of the same call added,
replaced or removed, list indices that move, and ops that do not fit."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper import patch
from statekeeper.errors import PatchError
from statekeeper.integrations.langgraph import mapping as m

KEYS = st.sampled_from(["a", "b", "ns", "", "x~y", "p/q", "0", "1"])
LEAF = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
DOC = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=25,
)
TOKEN = st.sampled_from(["a", "b", "ns", "", "x~y", "p/q", "0", "1", "2", "-", "01", "9"])
OP = st.builds(
    lambda kind, tokens, value: {
        "op": kind,
        "path": "".join("/" + patch.escape(t) for t in tokens),
        **({} if kind == "remove" else {"value": value}),
    },
    st.sampled_from(["add", "add", "replace", "remove"]),
    st.lists(TOKEN, min_size=1, max_size=4),
    DOC,
)


def _outcome(fn: Any, doc: Any, ops: list[dict[str, Any]]) -> tuple[str, Any]:
    try:
        return "ok", fn(doc, ops)
    except PatchError as exc:
        return "error", str(exc)


@settings(max_examples=200, deadline=None)
@given(DOC.filter(lambda d: isinstance(d, dict | list)), st.lists(OP, max_size=6))
def test_apply_once_is_patch_apply(doc: Any, ops: list[dict[str, Any]]) -> None:
    before_doc, before_ops = copy.deepcopy(doc), copy.deepcopy(ops)
    expected = _outcome(patch.apply, copy.deepcopy(doc), copy.deepcopy(ops))
    got = _outcome(m.apply_once, doc, ops)
    assert got[0] == expected[0]
    if got[0] == "ok":
        assert orjson.dumps(got[1]) == orjson.dumps(expected[1])
    assert doc == before_doc  # copy-on-write: the input document is never changed
    assert ops == before_ops  # nor the ops' values


def test_a_container_reached_twice_is_copied_once() -> None:
    doc: dict[str, Any] = {"ns": {"": {"vals": {"a": 1}, "w": {}}}, "pool": {}}
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/ns//vals/b", "value": 2},
        {"op": "replace", "path": "/ns//vals/a", "value": 3},
        {"op": "add", "path": "/ns//w/c", "value": {"t": {}}},
        {"op": "add", "path": "/ns//w/c/t/u", "value": 4},  # into the value just added
    ]
    value = ops[2]["value"]
    out = m.apply_once(doc, ops)
    assert out == {"ns": {"": {"vals": {"a": 3, "b": 2}, "w": {"c": {"t": {"u": 4}}}}}, "pool": {}}
    assert doc == {"ns": {"": {"vals": {"a": 1}, "w": {}}}, "pool": {}}
    assert value == {"t": {}}  # the op's value is copied before it is changed
    assert out["pool"] is doc["pool"]  # untouched containers are shared


def test_an_op_that_does_not_fit_raises_patch_error() -> None:
    with pytest.raises(PatchError):
        m.apply_once({"a": {}}, [{"op": "replace", "path": "/a/b", "value": 1}])
    with pytest.raises(PatchError):
        m.apply_once({"a": [1]}, [{"op": "remove", "path": "/a/1"}])
