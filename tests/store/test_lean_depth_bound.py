"""The lean keyed append's depth check told from the body's bytes (h/lgwrite2, issue 12).

A document nests at most ``MAX_DEPTH`` containers (``codec/depth.py``); the lean append
(``store/lean.py``) checked each change by walking its ops' values (``too_deep``, ~74 k
instructions a LangGraph checkpoint's six ops). It now counts the ``/``, ``{`` and ``[``
bytes of the body it encodes anyway (``bounded``): when those cannot reach the limit no
op can, and the walk is made only when they could. These tests hold the bound to the
walk — it never passes what the walk refuses, at the limit and past it, for every kind
of value the body's encoder takes — and the append to the same answers as before."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeeper import StateStore
from statekeeper.codec import depth as depth_module
from statekeeper.codec.depth import MAX_DEPTH, bounded, too_deep
from statekeeper.errors import SerializationError
from statekeeper.records import AppendResult


class Colour(enum.Enum):
    RED = "red"
    NESTED = ("a", (1, 2))


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Point:
    x: int
    y: list[int]


#: leaves that ``depth`` counts as typed values (two containers) while ``orjson``
#: encodes them with no or fewer brackets, and plain ones
LEAVES: list[Any] = [
    1,
    "text with / and { and [",
    None,
    datetime.datetime(2026, 12, 6, 3, 0, tzinfo=datetime.UTC),
    Colour.RED,
    Colour.NESTED,
    Level.LOW,
    Point(1, [2]),
    {},
    [],
    (),
]


def nest(levels: int, leaf: Any, kinds: str) -> Any:
    """``levels`` containers around ``leaf``, cycling through ``kinds`` (d: dict, l:
    list, t: tuple)."""
    value = leaf
    for i in range(levels):
        kind = kinds[i % len(kinds)]
        value = {"k": value} if kind == "d" else [value] if kind == "l" else (value,)
    return value


def _cases() -> list[tuple[int, int, Any, str]]:
    out = []
    for above in (1, 2, 5):
        for levels in range(MAX_DEPTH - above - 4, MAX_DEPTH - above + 3):
            for leaf in LEAVES:
                for kinds in ("d", "l", "dlt"):
                    out.append((above, levels, leaf, kinds))
    return out


def test_the_bound_never_passes_ops_the_walk_refuses() -> None:
    checked = refused = 0
    for above, levels, leaf, kinds in _cases():
        path = "/p" * above
        ops = [{"op": "add", "path": path, "value": nest(levels, leaf, kinds)}]
        try:
            body = orjson.dumps({"ops": ops, "key": "k1"})
        except TypeError:  # (past orjson's own limit: the lean append hands it back)
            continue
        checked += 1
        walked = too_deep(ops)
        refused += walked is not None
        if bounded(body):
            assert walked is None, (above, levels, leaf, kinds)
    assert checked > 500 and refused > 100  # (both sides of the limit were reached)


def test_the_bound_passes_a_langgraph_checkpoint_without_a_walk() -> None:
    ops = [
        {"op": "replace", "path": "/ns//cp", "value": {"h": ["id", "ts", None], "v": 2}},
        {"op": "replace", "path": "/ns//meta", "value": {"source": "loop", "parents": {}}},
        {"op": "replace", "path": "/ns//vals/n", "value": 1},
        {"op": "remove", "path": "/ns//w/1f1f11d5"},
    ]
    assert bounded(orjson.dumps({"ops": ops, "key": "k"}))
    assert not bounded(b"[" * MAX_DEPTH)  # (a body that could reach it: the walk decides)


def _ops(value: Any, path: str = "/a") -> list[dict[str, Any]]:
    return [{"op": "replace", "path": path, "value": value}]


async def _lean(store: StateStore, ops: list[dict[str, Any]], doc: Any, key: str) -> Any:
    lean = store._writes.lean
    assert lean is not None
    seq = await store.head("a")
    done = lean("a", "lg.cp", ops, seq, key, doc)
    if done is None or isinstance(done, AppendResult):
        return done
    return await done


@pytest.mark.parametrize("compression", ["none", "zstd-dict"])
async def test_the_lean_append_takes_the_deepest_change_and_hands_back_one_level_more(
    tmp_path: Path, compression: str
) -> None:
    from statekeeper.codec import Codec

    codec = Codec(compression=compression, compress_min_bytes=64)
    async with StateStore(
        f"sqlite:///{tmp_path / 'd.db'}", codec=codec, snapshot_every=1000
    ) as store:
        await store.create("a", {"a": 0})
        deepest = nest(MAX_DEPTH - 1, 1, "dl")  # {"a": …}: the top-level dict and these
        done = await _lean(store, _ops(deepest), {"a": deepest}, "k1")
        assert done is not None and done.last_seq == 2
        deeper = nest(MAX_DEPTH, 1, "dl")
        assert await _lean(store, _ops(deeper), {"a": deeper}, "k2") is None  # handed back
        with pytest.raises(SerializationError, match="nest deeper than"):
            await store.append("a", "lg.cp", ops=_ops(deeper), expected_seq=2)
        assert await store.head("a") == 2
        assert (await store.verify()).ok
    async with StateStore(f"sqlite:///{tmp_path / 'd.db'}", codec=codec) as again:
        assert (await again.load("a")).data == {"a": deepest}


async def test_a_shallow_change_is_appended_without_walking_its_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks: list[Any] = []
    real = depth_module.depth

    def counted(value: Any, limit: int = MAX_DEPTH) -> int:
        walks.append(value)
        return real(value, limit)

    monkeypatch.setattr(depth_module, "depth", counted)
    async with StateStore(f"sqlite:///{tmp_path / 's.db'}", snapshot_every=1000) as store:
        await store.create("a", {"a": 0})
        value = {"h": ["id", "ts", None], "v": 2, "cv": {"n": 1}, "vs": {"s": {"n": 0}}}
        done = await _lean(store, _ops(value), {"a": value}, "k1")
        assert done is not None and done.last_seq == 2
        assert walks == []  # (before: each op's nested value walked)
        assert (await store.load("a")).data == {"a": value}


def _three_counts(body: bytes) -> bool:
    """The bound as h/lgwrite2 wrote it: three ``count`` passes over the body."""
    return body.count(b"/") + body.count(b"{") + body.count(b"[") + 2 <= MAX_DEPTH


@pytest.mark.parametrize("size", [0, 1, MAX_DEPTH - 3, MAX_DEPTH - 2, MAX_DEPTH - 1, 4096])
@pytest.mark.parametrize("fill", [b"/", b"{", b"[", b"a", b"/{[a", b'"x":1,'])
def test_the_one_pass_bound_answers_as_three_counts(size: int, fill: bytes) -> None:
    """``bounded`` counts the three bytes in one pass (and none for a body too short
    to hold ``MAX_DEPTH`` of them): the same answer as the three counts, at the limit
    and either side of it, whatever the body's mix of bytes."""
    body = (fill * (size // len(fill) + 1))[:size]
    assert bounded(body) == _three_counts(body)
    # the limit's neighbourhood, wherever the counted bytes fall in a long body
    for counted in range(MAX_DEPTH - 4, MAX_DEPTH + 2):
        mixed = b"a" * size + b"/" * counted
        assert bounded(mixed) == _three_counts(mixed)
        assert bounded(mixed[::-1]) == _three_counts(mixed[::-1])
