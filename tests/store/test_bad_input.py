"""Bad input and damaged storage: typed errors that say where, nothing half-written,
nothing else lost."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
import pytest

from statekeeper import (
    ConfigurationError,
    ConflictError,
    IntegrityError,
    SerializationError,
    StatekeeperError,
    StateStore,
    StateTransition,
    UnsavedChangesWarning,
)
from statekeeper.codec import Codec

# -- values that are not JSON -----------------------------------------------------------


class Opaque:
    pass


class Color(Enum):
    RED = 1


@dataclass
class Point:
    x: int


# Sets, bytes, tz-aware datetimes, UUIDs… are stored as typed values now (see
# tests/codec); what is refused is anything the codec could not rebuild exactly.
BAD_VALUES: list[Any] = [
    pytest.param(Opaque(), "Opaque", id="object"),
    pytest.param(Color.RED, "Color (not registered", id="unregistered-enum"),
    pytest.param(Point(1), "Point (not registered", id="unregistered-dataclass"),
    pytest.param(datetime(2024, 1, 2, 3, 4), "naive datetime", id="naive-datetime"),
    pytest.param({(1, 2)}, "tuple inside a set", id="tuple-in-set"),
    pytest.param(float("nan"), "non-finite", id="nan"),
    pytest.param(float("inf"), "non-finite", id="infinity"),
    pytest.param(2**64, "64-bit", id="int-too-big"),
    pytest.param(-(2**63) - 1, "64-bit", id="int-too-small"),
    pytest.param("\ud800", "not valid Unicode", id="lone-surrogate"),
]


def _chat(content: Any) -> dict[str, Any]:
    return {
        "messages": [{"content": "a"}, {"content": "b"}, {"content": "c"}, {"content": content}]
    }


@pytest.mark.parametrize(("value", "problem"), BAD_VALUES)
async def test_save_names_the_bad_path_and_writes_nothing(
    store: StateStore, value: Any, problem: str
) -> None:
    good = {"messages": [{"content": "a"}, {"content": "b"}, {"content": "c"}]}
    await store.save("a1", good)
    with pytest.raises(SerializationError) as info:
        await store.save("a1", _chat(value))
    assert info.value.path == "data.messages[3].content"
    assert "data.messages[3].content" in str(info.value)
    assert problem in str(info.value)
    assert await store.head("a1") == 1
    assert (await store.load("a1")).data == good
    # the store is still usable, and the earlier state is the base of the next write
    assert (await store.save("a1", _chat("d"))).last_seq == 2
    assert (await store.load("a1")).data == _chat("d")


@pytest.mark.parametrize(("value", "problem"), BAD_VALUES)
async def test_create_names_the_bad_path_and_writes_nothing(
    store: StateStore, value: Any, problem: str
) -> None:
    with pytest.raises(SerializationError) as info:
        await store.save("new", _chat(value))
    assert info.value.path == "data.messages[3].content"
    with pytest.raises(SerializationError) as info:
        await store.create("new", _chat(value))
    assert info.value.path == "data.messages[3].content"
    assert await store.get("new") is None
    assert await store.count_agents() == 0


def _nested(depth: int) -> list[Any]:
    """``[[[…]]]``: lists nested ``depth`` deep (built without recursion)."""
    top: list[Any] = []
    inner = top
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return top


async def test_a_value_nested_deeper_than_python_can_walk_is_a_typed_error(
    store: StateStore,
) -> None:
    too_deep = sys.getrecursionlimit() + 100
    agent = await store.agent("a1")
    agent.data["messages"] = [{"content": "a"}]
    await agent.save()
    with pytest.raises(SerializationError) as info:
        agent.data["messages"][0]["content"] = _nested(too_deep)
    assert info.value.path == "data.messages[0].content"
    with pytest.raises(SerializationError) as info:
        agent.data["messages"].append(_nested(too_deep))
    assert info.value.path == "data.messages[1]"
    assert agent.data == {"messages": [{"content": "a"}]}  # left as it was
    assert not agent.dirty


async def test_saving_a_document_nested_too_deeply_is_a_typed_error(
    db_url: str,
) -> None:
    store = StateStore(db_url)
    agent = await store.agent("a1")
    log: list[Any] = []
    agent.data["log"] = log  # the caller's own list: changed behind the tracker's back
    await agent.save()
    log.append(_nested(sys.getrecursionlimit() + 100))
    with pytest.raises(SerializationError, match="nested too deeply") as info:
        await agent.save()
    assert info.value.path == "data"
    with pytest.raises(SerializationError, match="nested too deeply"):
        await agent.transition(StateTransition.START_PROCESSING)
    # closing still closes, and says the change was not written
    with pytest.warns(UnsavedChangesWarning, match="'a1'"):
        await store.close()
    async with StateStore(db_url) as again:
        assert (await again.load("a1")).data == {"log": []}


async def test_a_non_string_key_names_its_dict(store: StateStore) -> None:
    await store.save("a1", {"meta": {}})
    with pytest.raises(SerializationError) as info:
        await store.save("a1", {"meta": {"ok": 1, 7: "seven"}})
    assert info.value.path == "data.meta"
    assert "7" in str(info.value) and "int" in str(info.value)
    assert (await store.load("a1")).data == {"meta": {}}


@pytest.mark.parametrize("key", [7, None, (1, 2)])
async def test_a_non_string_key_at_the_top_is_a_typed_error_on_a_later_save(
    store: StateStore, key: Any
) -> None:
    """A save made on a cached state diffs its top-level keys before packing them: a
    key that is not a str raised a bare TypeError there ("argument of type 'int' is
    not iterable"), where the first save of the same document got SerializationError."""
    await store.save("a1", {"meta": {}})
    await store.save("a1", {"meta": {"n": 1}})  # a state the store holds as bytes
    with pytest.raises(SerializationError) as info:
        await store.save("a1", {"meta": {"n": 1}, key: "seven"})
    assert info.value.path == "data"
    assert "keys must be str" in str(info.value)
    assert (await store.load("a1")).data == {"meta": {"n": 1}}


async def test_odd_keys_are_quoted_in_the_path(store: StateStore) -> None:
    with pytest.raises(SerializationError) as info:
        await store.save("a1", {"tool results": {"web.search": [None, Opaque()]}})
    assert info.value.path == "data['tool results']['web.search'][1]"


async def test_append_names_bad_info_and_ops(store: StateStore) -> None:
    await store.create("a1", {"log": []})
    with pytest.raises(SerializationError) as info:
        await store.append("a1", "tool", {"result": {"rows": [1, Opaque()]}})
    assert info.value.path == "info.result.rows[1]"
    with pytest.raises(SerializationError) as info:
        await store.append("a1", "edit", ops=[{"op": "add", "path": "/log/-", "value": Opaque()}])
    assert info.value.path == "ops[0].value"
    with pytest.raises(SerializationError) as info:
        await store.save("a1", {"log": []}, info={"why": float("nan")})
    assert info.value.path == "info.why"
    assert await store.head("a1") == 1


async def test_save_refuses_reserved_info_keys(store: StateStore) -> None:
    await store.create("a1", {"n": 1})
    with pytest.raises(ConfigurationError):
        await store.save("a1", {"n": 1}, info={"ops": [{"op": "remove", "path": "/n"}]})
    assert (await store.load("a1")).data == {"n": 1}


async def test_serialization_errors_are_typed(store: StateStore) -> None:
    with pytest.raises(StatekeeperError):
        await store.save("a1", {"x": Opaque()})
    with pytest.raises(TypeError):  # SerializationError is also a TypeError
        await store.save("a1", {"x": Opaque()})


# -- a conflicting append --------------------------------------------------------------


async def test_conflicting_append_loses_nothing(store: StateStore) -> None:
    for i in range(7):
        await store.append("a1", "step", {"i": i}) if i else await store.create("a1", {"i": 0})
    with pytest.raises(ConflictError) as info:
        await store.append("a1", "step", {"i": "late"}, expected_seq=3)
    assert info.value.current_seq == 7
    events = [e async for e in store.history("a1")]
    assert [e.seq for e in events] == list(range(1, 8))
    assert "late" not in [e.info.get("i") for e in events]
    assert (await store.verify()).ok


# -- damaged storage ----------------------------------------------------------------------


def _db(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


async def _populate(url: str, open_store: Callable[..., StateStore]) -> None:
    store = open_store(url, snapshot_every=4)
    for agent_id in ("alpha", "beta", "gamma"):
        for i in range(1, 7):
            await store.save(agent_id, {"owner": agent_id, "n": i, "note": f"MARK-{agent_id}-{i}"})
    await store.close()  # the last connection checkpoints the WAL into the main file


async def test_flipped_payload_bytes_name_agent_and_seq(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    await _populate(db_url, open_store)
    with closing(sqlite3.connect(_db(db_url))) as conn, conn:
        (payload,) = conn.execute(
            "SELECT payload FROM sk_events WHERE agent_id = 'beta' AND seq = 6"
        ).fetchone()
        flipped = payload.replace(b"MARK", b"MARX")
        conn.execute(
            "UPDATE sk_events SET payload = ? WHERE agent_id = 'beta' AND seq = 6", (flipped,)
        )
    store = open_store(db_url, snapshot_every=4)
    with pytest.raises(IntegrityError) as info:
        await store.load("beta")
    assert (info.value.agent_id, info.value.seq) == ("beta", 6)
    assert "'beta'" in str(info.value) and "seq 6" in str(info.value)
    with pytest.raises(IntegrityError):
        [e async for e in store.history("beta")]
    assert (await store.load("beta", at_seq=5)).data["n"] == 5  # before the damage
    assert (await store.load("alpha")).data["n"] == 6
    assert (await store.load("gamma")).data["n"] == 6
    report = await store.verify()
    assert not report.ok
    assert [(p.agent_id, p.seq) for p in report.problems] == [("beta", 6)]
    assert report.agents == 3


async def test_flipped_snapshot_bytes_are_detected(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    await _populate(db_url, open_store)
    with closing(sqlite3.connect(_db(db_url))) as conn, conn:
        where = "WHERE agent_id = 'gamma' AND seq = 4"
        (payload,) = conn.execute(f"SELECT payload FROM sk_snapshots {where}").fetchone()
        # n=4 made 5 in whichever format the snapshot is stored (JSON, or msgpack: the
        # packed bytes of a save): the record stays well-formed, only its checksum tells
        changed = payload.replace(b'"n":4', b'"n":5').replace(b"\xa1n\x04", b"\xa1n\x05")
        assert changed != payload
        conn.execute(f"UPDATE sk_snapshots SET payload = ? {where}", (changed,))
        assert conn.total_changes == 1
    store = open_store(db_url)
    # the damaged snapshot is skipped: the load replays the intact events instead
    loaded = await store.load("gamma")
    assert loaded.data == {"owner": "gamma", "n": 6, "note": "MARK-gamma-6"}
    assert loaded.seq == 6
    report = await store.verify(["gamma", "alpha"])
    assert [(p.agent_id, p.seq) for p in report.problems] == [("gamma", 4)]


async def test_a_record_moved_to_another_agent_is_detected(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    # Both payload and checksum are valid, but for alpha's seq 3, not beta's.
    await _populate(db_url, open_store)
    with closing(sqlite3.connect(_db(db_url))) as conn, conn:
        conn.execute(
            "UPDATE sk_events SET (payload, checksum) = (SELECT payload, checksum FROM sk_events"
            " WHERE agent_id = 'alpha' AND seq = 3) WHERE agent_id = 'beta' AND seq = 3"
        )
    store = open_store(db_url)
    with pytest.raises(IntegrityError) as info:
        await store.load("beta", at_seq=3)
    assert (info.value.agent_id, info.value.seq) == ("beta", 3)


async def test_damaged_file_pages_name_agent_and_seq(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    await _populate(db_url, open_store)
    path = _db(db_url)
    raw = bytearray(path.read_bytes())
    marker = b"MARK-alpha-5"
    offset = raw.find(marker)
    assert offset > 0 and raw.find(marker, offset + 1) == -1  # exactly one copy on disk
    raw[offset : offset + len(marker)] = b"\x00\xff" * (len(marker) // 2)  # bit rot
    path.write_bytes(bytes(raw))
    store = open_store(db_url, snapshot_every=4)
    with pytest.raises(IntegrityError) as info:
        await store.load("alpha")
    assert (info.value.agent_id, info.value.seq) == ("alpha", 5)
    assert (await store.load("beta")).data["n"] == 6
    report = await store.verify()
    assert [(p.agent_id, p.seq) for p in report.problems] == [("alpha", 5)]


async def test_a_patch_that_does_not_apply_is_an_integrity_error(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    # A record with a valid checksum whose patch cannot apply (written by a buggy or
    # hostile writer that knows the plain checksum) must not load as a wrong state.
    await _populate(db_url, open_store)
    body = orjson.dumps({"ops": [{"op": "remove", "path": "/no/such/key"}]})
    with closing(sqlite3.connect(_db(db_url))) as conn, conn:
        ts, prev = conn.execute(
            "SELECT e.ts, p.checksum FROM sk_events e JOIN sk_events p ON p.agent_id ="
            " e.agent_id AND p.seq = e.seq - 1 WHERE e.agent_id = 'alpha' AND e.seq = 6"
        ).fetchone()
        sealed = Codec().seal("alpha", 6, "patch", ts, body, prev)  # a valid chain link
        conn.execute(
            "UPDATE sk_events SET payload = ?, checksum = ? WHERE agent_id = 'alpha' AND seq = 6",
            (sealed.payload, sealed.checksum),
        )
    store = open_store(db_url, snapshot_every=4)
    with pytest.raises(IntegrityError) as info:
        await store.load("alpha")
    assert (info.value.agent_id, info.value.seq) == ("alpha", 6)
    report = await store.verify(["alpha"])
    # the record, and the authenticated head that no longer matches the replaced record
    assert [(p.agent_id, p.seq, p.kind) for p in report.problems] == [
        ("alpha", 6, "event"),
        ("alpha", 6, "head"),
    ]


async def test_a_missing_event_is_a_gap(db_url: str, open_store: Callable[..., StateStore]) -> None:
    await _populate(db_url, open_store)
    with closing(sqlite3.connect(_db(db_url))) as conn, conn:
        conn.execute("DELETE FROM sk_events WHERE agent_id = 'beta' AND seq = 6")
        conn.execute("DELETE FROM sk_events WHERE agent_id = 'gamma' AND seq = 2")
    store = open_store(db_url, snapshot_every=4)
    with pytest.raises(IntegrityError) as info:
        await store.load("beta")
    assert (info.value.agent_id, info.value.seq) == ("beta", 6)
    report = await store.verify()
    assert sorted((p.agent_id, p.seq) for p in report.problems) == [("beta", 6), ("gamma", 2)]


def _forged_snapshot(
    url: str, agent_id: str, seq: int, data: dict[str, Any]
) -> tuple[bytes, bytes]:
    """A snapshot record with a valid checksum and chain link (as a buggy writer that
    knows the plain SHA-256 scheme would store it), stamped 0.0."""
    body = {"fsm": None, "data": data, "v": 1, "created_at": 0.0, "updated_at": 0.0}
    with closing(sqlite3.connect(_db(url))) as conn:
        row = conn.execute(
            "SELECT checksum FROM sk_events WHERE agent_id = ? AND seq = ?", (agent_id, seq)
        ).fetchone()
    link = row[0] if row is not None else bytes(32)  # no event: any link will do
    sealed = Codec().encode(agent_id, seq, "snapshot", 0.0, {**body, "entered": 0.0}, link)
    return sealed.payload, sealed.checksum


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"note": "MARK-gamma-4", "n": 99, "owner": "gamma"}, id="other-value"),
        pytest.param({"note": "MARK-gamma-4", "n": 4.0, "owner": "gamma"}, id="4.0-is-not-4"),
    ],
)
async def test_a_snapshot_that_disagrees_with_the_events_is_reported(
    db_url: str, open_store: Callable[..., StateStore], data: dict[str, Any]
) -> None:
    await _populate(db_url, open_store)
    stored, tag = _forged_snapshot(db_url, "gamma", 4, data)
    with closing(sqlite3.connect(_db(db_url))) as conn, conn:
        conn.execute(
            "UPDATE sk_snapshots SET payload = ?, checksum = ?, ts = 0.0"
            " WHERE agent_id = 'gamma' AND seq = 4",
            (stored, tag),
        )
    store = open_store(db_url)
    report = await store.verify()
    assert [(p.agent_id, p.seq) for p in report.problems] == [("gamma", 4)]
    assert "snapshot differs" in report.problems[0].reason


async def test_a_snapshot_past_the_end_of_the_stream_is_reported(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    await _populate(db_url, open_store)
    stored, tag = _forged_snapshot(db_url, "beta", 50, {"n": 50})
    with closing(sqlite3.connect(_db(db_url))) as conn, conn:
        conn.execute(
            "INSERT INTO sk_snapshots(agent_id, seq, ts, payload, checksum)"
            " VALUES ('beta', 50, 0.0, ?, ?)",
            (stored, tag),
        )
    store = open_store(db_url)
    assert (await store.load("beta")).seq == 6  # never used: it is above the head
    report = await store.verify()
    assert [(p.agent_id, p.seq) for p in report.problems] == [("beta", 50)]


async def test_verify_on_a_clean_store(url: str, open_store: Callable[..., StateStore]) -> None:
    store = open_store(url, snapshot_every=3)
    for agent_id in ("a", "b"):
        for i in range(10):
            await store.save(agent_id, {"n": i, "items": list(range(i))}, fsm_state=f"s{i % 2}")
    report = await store.verify()
    assert report.ok
    assert report.problems == []
    assert (report.agents, report.events, report.snapshots) == (2, 20, 6)


async def test_a_damaged_table_page_is_a_typed_error_naming_the_agent(
    db_url: str, open_store: Callable[..., StateStore]
) -> None:
    await _populate(db_url, open_store)
    path = _db(db_url)
    with closing(sqlite3.connect(path)) as conn:
        (root,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'sk_events'"
        ).fetchone()
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    raw = bytearray(path.read_bytes())
    offset = (root - 1) * page_size
    raw[offset : offset + 8] = b"\xff" * 8  # garbage b-tree page header
    path.write_bytes(bytes(raw))
    store = open_store(db_url)
    with pytest.raises(IntegrityError) as info:
        await store.load("beta", at_seq=2)  # must read events through the broken page
    assert not isinstance(info.value, sqlite3.Error)
    assert (info.value.agent_id, info.value.seq) == ("beta", 1)
    # the latest states come from snapshots on intact pages: still readable
    assert (await store.load("gamma", at_seq=4)).data["n"] == 4
    report = await store.verify()
    assert not report.ok
    assert {p.agent_id for p in report.problems} == {"alpha", "beta", "gamma"}
