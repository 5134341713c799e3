"""The lean append's body made around the ops the caller encoded already
(``store/lean.py: body_around``; the LangGraph saver encodes a write's ops for its
snapshot estimate and hands them over: docs/benchmarks.md, "lgonepath"): the same bytes
as encoding ``{"ops": ops, "key": key}`` whole, so the same record is stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeeper import StateStore
from statekeeper.codec import Codec
from statekeeper.records import AppendResult
from statekeeper.store.lean import body_around

_KEYS = [
    None,
    "",
    "cp::1ef",
    "ns/with/slash",
    'quote"back\\slash',
    "tab\tnew\nline\x01",
    "é✓😀",
    "$t",
]
_OPS: list[list[dict[str, Any]]] = [
    [],
    [{"op": "replace", "path": "/ns//vals/n", "value": 1}],
    [
        {"op": "add", "path": "/pool/abc", "value": {"k": [1, 2.5, None, True, "s"]}},
        {"op": "replace", "path": "/ns//cp", "value": {"h": ["id", "ts", None], "v": 4}},
        {"op": "remove", "path": "/ns//w/1f1"},
    ],
]


@pytest.mark.parametrize("key", _KEYS)
@pytest.mark.parametrize("ops", _OPS)
def test_the_body_around_the_ops_is_the_whole_body_encoded(
    ops: list[dict[str, Any]], key: str | None
) -> None:
    whole = orjson.dumps({"ops": ops, "key": key} if key is not None else {"ops": ops})
    assert body_around(orjson.dumps(ops), key) == whole


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


async def _stored(path: Path, compression: str, handed: bool) -> list[tuple[Any, ...]]:
    codec = Codec(compression=compression, compress_min_bytes=64)
    async with StateStore(
        f"sqlite:///{path}", codec=codec, snapshot_every=1000, clock=_Clock()
    ) as store:
        await store.create("a", {"n": 0, "pool": {}})
        lean = store._writes.lean
        assert lean is not None
        for step, key in enumerate(["k1", None, "k/3", "é"], start=1):
            ops: list[dict[str, Any]] = [
                {"op": "replace", "path": "/n", "value": step},
                {"op": "add", "path": f"/pool/p{step}", "value": {"text": "x" * 80 * step}},
            ]
            doc: dict[str, Any] = (await store.load("a")).data
            pool: dict[str, Any] = {**doc["pool"], f"p{step}": ops[1]["value"]}
            after = {**doc, "n": step, "pool": pool}
            seq = await store.head("a")
            done = lean("a", "lg.cp", ops, seq, key, after, orjson.dumps(ops) if handed else None)
            if done is not None and not isinstance(done, AppendResult):
                done = await done
            assert done is not None and done.last_seq == seq + 1
        assert (await store.verify()).ok
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM sk_events ORDER BY agent_id, seq").fetchall()


@pytest.mark.parametrize("compression", ["none", "zstd-dict"])
async def test_a_lean_append_handed_its_ops_stores_the_same_record(
    tmp_path: Path, compression: str
) -> None:
    encoded = await _stored(tmp_path / "encoded.db", compression, handed=False)
    handed = await _stored(tmp_path / "handed.db", compression, handed=True)
    assert len(encoded) == 5
    assert handed == encoded
