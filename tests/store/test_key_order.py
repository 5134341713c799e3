"""A load gives back the keys of every dict in the order they were saved.

Save ``{"a": 1, "b": 2}`` then ``{"c": 3, "b": 2, "a": 1}``: the values are equal, and
the diff by value recorded nothing for the order (or, for ``c``, an add at the end),
so a fresh process loaded ``a, b, c`` while the live copy had ``c, b, a`` — prompts,
tool lists and JSON built from a state changed after a restart. The property test
saves random sequences of states whose dicts (top level and nested) have their keys in
random orders, then checks, in a fresh store, the load at the head, the load at every
seq and the history's states, with snapshots taken often (whole and delta) or never,
in both formats, on memory and SQLite.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekeeper import StateStore, patch
from statekeeper.backends.memory import MemoryBackend


def exact(a: Any) -> str:
    """JSON with every dict's keys in their order and True/1/1.0 told apart."""

    def tag(x: Any) -> Any:
        if isinstance(x, dict):
            return [[k, tag(v)] for k, v in x.items()]
        if isinstance(x, list):
            return [tag(v) for v in x]
        return [type(x).__name__, x]

    return json.dumps(tag(a))


def _ordered(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.text("xy", max_size=2))


def dicts(values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    # few keys, drawn in any order: the same keys come back often in another order
    return st.lists(
        st.tuples(st.sampled_from("abcde"), values), max_size=5, unique_by=lambda p: p[0]
    ).map(_ordered)


values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), dicts(inner)), max_leaves=8
)
states = st.lists(dicts(values), min_size=1, max_size=6)


def reorders(state: dict[str, Any], rnd: st.DataObject) -> dict[str, Any]:
    """``state`` with the keys of some of its dicts permuted (the values kept)."""

    def go(x: Any) -> Any:
        if isinstance(x, dict):
            keys = list(x)
            if len(keys) > 1 and rnd.draw(st.booleans()):
                keys = rnd.draw(st.permutations(keys))
            return {k: go(x[k]) for k in keys}
        if isinstance(x, list):
            return [go(v) for v in x]
        return x

    return go(state)  # type: ignore[no-any-return]


async def _check(url_or_backend: Any, seq_states: list[dict[str, Any]], **kw: Any) -> None:
    async with StateStore(url_or_backend, durability="sync", **kw) as store:
        for state in seq_states:
            await store.save("a", state)
            live = await store.get("a")
            assert live is not None and exact(live.data) == exact(state)
        if isinstance(url_or_backend, MemoryBackend):
            await _reads(StateStore(url_or_backend, durability="sync", **kw), seq_states)
            return
    async with StateStore(url_or_backend, durability="sync", **kw) as fresh:
        await _reads(fresh, seq_states)


async def _reads(store: StateStore, seq_states: list[dict[str, Any]]) -> None:
    head = await store.get("a")
    assert head is not None and exact(head.data) == exact(seq_states[-1])
    for seq, state in enumerate(seq_states, start=1):
        assert exact((await store.load("a", at_seq=seq)).data) == exact(state), seq
    doc: Any = {}  # the history's patches folded: every state in its order
    async for event in store.history("a"):
        doc = patch.apply(doc, event.ops)
        assert exact(doc) == exact(seq_states[event.seq - 1]), event.seq


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("snapshot_every", [2, 1000])
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(base=states, rnd=st.data())
def test_load_after_a_fresh_open_keeps_every_key_order(
    engine: str, fmt: str, snapshot_every: int, base: list[dict[str, Any]], rnd: st.DataObject
) -> None:
    import asyncio

    seq_states = []
    for state in base:  # each state, then the same values in another key order
        seq_states.append(state)
        seq_states.append(reorders(state, rnd))
    kw: dict[str, Any] = {"format": fmt, "snapshot_every": snapshot_every}
    if snapshot_every == 2:
        kw["full_snapshot_every"] = 3  # (delta snapshots between whole ones)
    if engine == "memory":
        asyncio.run(_check(MemoryBackend(), seq_states, **kw))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(_check(f"sqlite:///{Path(tmp) / 's.db'}", seq_states, **kw))


def test_the_trial_two_saves() -> None:
    """The trial's case, whole: ``c, b, a`` loaded as ``c, b, a``."""
    import asyncio

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(
            _check(f"sqlite:///{Path(tmp) / 's.db'}", [{"a": 1, "b": 2}, {"c": 3, "b": 2, "a": 1}])
        )


def test_a_key_deleted_and_set_again_is_one_remove_and_one_add() -> None:
    """O(the change): the key moved to the end, not the whole dict, is in the ops."""
    old = {"a": 1, "b": {"x": [1, 2]}, "c": 3}
    new = {"a": 1, "c": 3, "b": {"x": [1, 2]}}
    ops = patch.diff(old, new)
    assert ops == [{"op": "remove", "path": "/b"}, {"op": "add", "path": "/b", "value": new["b"]}]
    assert exact(patch.apply(old, ops)) == exact(new)
    assert patch.diff(old, dict(old)) == []  # the same order: nothing
    # a patch's test op still compares objects unordered (RFC 6902)
    patch.apply(old, [{"op": "test", "path": "", "value": new}])
