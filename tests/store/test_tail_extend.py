"""A tail snapshot stores a list that grew as one ``extend`` op holding the new items
(store/tails.py, docs/benchmarks.md "coldload2"), not one ``add …/-`` map per item: a
cold load unpacked an op map per appended message. Tails of the layout before still
load; an ``extend`` that does not apply is refused like any op that does not."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest

from statekeeper import StateStore
from statekeeper.codec.formats import MSGPACK
from statekeeper.errors import PatchError
from statekeeper.store import tails
from statekeeper.store.body import SNAPSHOT_TYPE
from statekeeper.store.tails import EXTEND, apply_tail_ops

from .test_tail_snapshots import _doc, _replayed, _snapshot_seqs, _url

MSGS = _doc(60)["messages"]


def _bodies(tmp_path: Path) -> dict[int, dict[str, Any]]:
    """``{seq: body}`` of agent ``a``'s stored snapshots (no key: the body is at 35)."""
    with closing(sqlite3.connect(tmp_path / "tail.db")) as conn:
        rows = conn.execute("SELECT seq, payload FROM sk_snapshots ORDER BY seq").fetchall()
    return {seq: msgpack.unpackb(payload[35:]) for seq, payload in rows}


async def _saves(url: str, docs: list[dict[str, Any]]) -> None:
    async with StateStore(url, witness=False, snapshot_every=20) as store:
        for doc in docs:
            await store.save("a", doc)


async def test_a_tail_stores_the_grown_list_as_one_extend_op(tmp_path: Path) -> None:
    url = _url(tmp_path)
    docs = [_doc(n) for n in range(1, 40)]
    docs[-4]["task"] = "review"  # (the tail at 36: a replaced value besides the growth)
    await _saves(url, docs)
    assert _snapshot_seqs(tmp_path) == [20, 28, 36]
    bodies = _bodies(tmp_path)
    assert bodies[28]["base"] == 20 and bodies[36]["base"] == 20
    assert bodies[28]["ops"] == [{"op": EXTEND, "path": "/messages", "value": MSGS[20:28]}]
    assert bodies[36]["ops"] == [
        {"op": "replace", "path": "/task", "value": "review"},
        {"op": EXTEND, "path": "/messages", "value": MSGS[20:36]},
    ]
    async with StateStore(url, cache_size=0, witness=False) as cold:
        assert (await cold.load("a")).data == docs[-1]
        assert (await cold.load("a", at_seq=36)).data == docs[35]
        assert (await cold.verify()).ok


def _ops_before(before: dict[str, bytes], after: dict[str, bytes]) -> list[bytes] | None:
    """The layout before ``extend``: one ``add …/-`` map per new item of a grown list."""
    ops: list[bytes] = []
    for key, new in after.items():
        old = before.get(key)
        if old == new:
            continue
        value = msgpack.unpackb(new)
        if old is not None and type(value) is list:
            grown = value[len(msgpack.unpackb(old)) :]
            ops.extend(
                msgpack.packb({"op": "add", "path": f"/{key}/-", "value": item}) for item in grown
            )
            continue
        op = "add" if old is None else "replace"
        ops.append(msgpack.packb({"op": op, "path": f"/{key}", "value": value}))
    return ops


async def test_tails_of_the_layout_before_still_load_on_the_thin_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = _url(tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(tails, "_ops", _ops_before)
        await _saves(url, [_doc(n) for n in range(1, 40)])
    ops = _bodies(tmp_path)[36]["ops"]
    assert [op["op"] for op in ops] == ["add"] * 16 and ops[-1]["value"] == MSGS[35]
    counts = _replayed(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="statekeeper"):
        async with StateStore(url, cache_size=0, witness=False) as cold:
            assert (await cold.load("a")).data == _doc(39)
            assert sum(counts) == 39 - 36  # (from the tail: nothing passed over)
            assert (await cold.verify()).ok
    assert not caplog.records


def test_an_extend_among_other_ops_applies_in_order() -> None:
    data = {"messages": [1], "task": "a"}
    ops = [
        {"op": "replace", "path": "/task", "value": "b"},
        {"op": EXTEND, "path": "/messages", "value": [2, 3]},
        {"op": "add", "path": "/messages/-", "value": 4},
        {"op": EXTEND, "path": "/messages", "value": []},
        {"op": "add", "path": "/seen", "value": True},
    ]
    assert apply_tail_ops(data, ops) == {"messages": [1, 2, 3, 4], "task": "b", "seen": True}
    assert apply_tail_ops({"m": [0]}, [{"op": EXTEND, "path": "/m", "value": [1]}]) == {"m": [0, 1]}


@pytest.mark.parametrize(
    "op",
    [
        {"op": EXTEND, "path": "/task", "value": [1]},  # not a list there
        {"op": EXTEND, "path": "/absent", "value": [1]},
        {"op": EXTEND, "path": "/messages", "value": 1},  # the items not a list
        {"op": EXTEND, "path": 3, "value": [1]},
        {"op": EXTEND, "value": [1]},
        {"op": EXTEND, "path": "/messages", "value": [1], "from": "/x"},
    ],
)
def test_an_extend_that_does_not_apply_is_a_patch_error(op: dict[str, Any]) -> None:
    before = {"op": "add", "path": "/x", "value": 1}
    for ops in ([op], [before, op]):
        with pytest.raises(PatchError):
            apply_tail_ops({"messages": [0], "task": "a"}, ops)


async def test_a_sealed_tail_whose_extend_does_not_apply_is_passed_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a tail that verifies (sealed again after the edit) but whose extend names no
    # list: passed over like a damaged snapshot, the state loaded from below it
    url = _url(tmp_path)
    await _saves(url, [_doc(n) for n in range(1, 40)])
    with closing(sqlite3.connect(tmp_path / "tail.db")) as conn:
        ts, payload = conn.execute("SELECT ts, payload FROM sk_snapshots WHERE seq = 36").fetchone()
    body = msgpack.unpackb(payload[35:])
    body["ops"] = [{"op": EXTEND, "path": "/task", "value": MSGS[20:36]}]
    async with StateStore(url, witness=False) as store:
        sealed = store.codec.seal(
            "a", 36, SNAPSHOT_TYPE, ts, msgpack.packb(body), payload[3:35], fmt=MSGPACK
        )
    with closing(sqlite3.connect(tmp_path / "tail.db")) as conn:
        conn.execute(
            "UPDATE sk_snapshots SET payload = ?, checksum = ? WHERE seq = 36",
            (sealed.payload, sealed.checksum),
        )
        conn.commit()
    with caplog.at_level(logging.WARNING, logger="statekeeper"):
        async with StateStore(url, cache_size=0, witness=False) as cold:
            assert (await cold.load("a")).data == _doc(39)
    assert any("seq 36 is unusable" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("before, after", [(3, 5), (14, 18), (15, 16), (0, 2), (16, 70000)])
def test_the_extend_of_a_list_grown_across_its_header_sizes(before: int, after: int) -> None:
    # msgpack's array header is 1 byte up to 15 items, 3 up to 65,535, 5 above
    items = [{"i": i} for i in range(after)]
    old = {"messages": msgpack.packb(items[:before]), "task": msgpack.packb("t")}
    new = {"messages": msgpack.packb(items), "task": old["task"]}
    ops = tails._ops(old, new)
    assert ops is not None and [msgpack.unpackb(op) for op in ops] == [
        {"op": EXTEND, "path": "/messages", "value": items[before:]}
    ]
    assert apply_tail_ops({"messages": items[:before]}, [msgpack.unpackb(ops[0])]) == {
        "messages": items
    }
