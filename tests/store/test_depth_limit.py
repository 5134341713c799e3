"""A document nests at most ``MAX_DEPTH`` containers, refused when written (trialdata).

A state made deeper one small patch at a time was stored — every save acknowledged —
past what the store's own encoders read back (``orjson``: 254 containers): every later
load of the agent raised an untyped ``TypeError: Recursion limit reached``, and once a
snapshot fell due every save failed too. Each change is now checked against the depth
left below its path: the save that would go too deep is refused with a
``SerializationError`` and nothing is written; what was stored before still loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.codec.depth import MAX_DEPTH, depth
from statekeeper.errors import SerializationError


def nest(levels: int) -> Any:
    """``levels`` dicts, one inside the other, around a scalar."""
    value: Any = 1
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("snapshot_every", [2, "bounded"])
async def test_a_document_grown_too_deep_is_refused_and_what_was_stored_loads(
    tmp_path: Path, fmt: str, snapshot_every: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'deep.db'}"
    deepest_ok = MAX_DEPTH - 1  # {"a": nest(k)}: the top-level dict and k more
    async with StateStore(url, format=fmt, snapshot_every=snapshot_every) as store:
        for levels in range(deepest_ok - 6, deepest_ok + 1, 2):
            await store.save("a", {"a": nest(levels)})
        await store.save("a", {"a": nest(deepest_ok)})
        for too_deep in (deepest_ok + 1, deepest_ok + 40):
            with pytest.raises(SerializationError, match="nest deeper than"):
                await store.save("a", {"a": nest(too_deep)})
        head = await store.head("a")
    async with StateStore(url, format=fmt) as store:  # a cold load of every seq
        assert (await store.load("a")).data == {"a": nest(deepest_ok)}
        assert await store.head("a") == head
        for seq in range(1, head + 1):
            await store.load("a", at_seq=seq)


def replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


async def test_an_append_whose_value_lands_too_deep_is_refused(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'deep.db'}") as store:
        await store.save("a", {"a": nest(200)})
        deep_path = "/a" + "/x" * 200  # the scalar at the bottom
        with pytest.raises(SerializationError, match="nest deeper than"):
            await store.append("a", "patch", ops=[replace(deep_path, nest(60))])
        await store.append("a", "patch", ops=[replace(deep_path, nest(50))])
        copy = {"op": "copy", "from": "/a", "path": deep_path}  # a copy of a deep part
        with pytest.raises(SerializationError, match="nest deeper than"):
            await store.append("a", "patch", ops=[copy])
    async with StateStore(f"sqlite:///{tmp_path / 'deep.db'}") as store:
        assert depth((await store.load("a")).data) == MAX_DEPTH


async def test_typed_values_count_as_their_stored_form(tmp_path: Path) -> None:
    assert depth({"s": {1}}) == 3  # {"s": {"$t": "set", "v": [1]}}
    assert depth({"$t": 1}) == 2  # escaped as {"$t": "dict", "v": {...}}
    url = f"sqlite:///{tmp_path / 'deep.db'}"
    async with StateStore(url) as store:
        await store.save("a", {"a": nest_around(MAX_DEPTH - 3, {1})})
        with pytest.raises(SerializationError, match="nest deeper than"):
            await store.save("a", {"a": nest_around(MAX_DEPTH - 2, {1})})
    async with StateStore(url) as store:
        assert (await store.load("a")).data == {"a": nest_around(MAX_DEPTH - 3, {1})}


def nest_around(levels: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(levels):
        value = {"x": value}
    return value
