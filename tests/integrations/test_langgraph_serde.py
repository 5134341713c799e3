"""Packing LangGraph values into statekeeper JSON: exact round trips, and loading that
never imports or calls a type named in stored data unless it is allowed."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import math
import sqlite3
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS, JsonPlusSerializer
from langgraph.types import Interrupt, Send

from statekeeper import IntegrityError
from statekeeper.codec import Codec
from statekeeper.integrations.langgraph import StatekeeperSaver, ValueCodec, safe_serializer

from .conftest import checkpoint, config, new_thread


@dataclasses.dataclass
class Point:
    x: int
    y: int


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=6) | st.sampled_from(["$p", "$m", "$s", "$d", "$x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


def roundtrip(value: Any, codec: ValueCodec | None = None, pooled: bool = True) -> Any:
    codec = codec or ValueCodec(safe_serializer())
    new: dict[str, Any] = {}
    packed = codec.pack(value, {}, new if pooled else None)
    return codec.unpack(packed, new)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_plain_json_round_trips_exactly(value: Any) -> None:
    got = roundtrip(value)
    assert got == value
    assert type(got) is type(value)


def test_plain_json_is_stored_readably() -> None:
    codec = ValueCodec(safe_serializer())
    assert codec.pack({"a": [1, "x", None, True, 1.5]}) == {"a": [1, "x", None, True, 1.5]}
    assert codec.pack({"$ref": 1}) == {"$d": {"$ref": 1}}  # never mistaken for a tag
    assert codec.pack((1, 2)) == [1, 2]  # tuples become lists, as LangGraph's serde does


@pytest.mark.parametrize(
    "message",
    [
        HumanMessage("hi", id="1"),
        HumanMessage([{"type": "text", "text": "blocks"}], id="2", name="ann"),
        AIMessage(
            "calling",
            id="3",
            tool_calls=[
                {"name": "search", "args": {"q": "ducks"}, "id": "call-1", "type": "tool_call"}
            ],
            usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
            response_metadata={"model": "m"},
        ),
        AIMessageChunk("partial", id="4"),  # type: ignore[call-arg]
        SystemMessage("be nice"),
        ToolMessage("result", tool_call_id="call-1", artifact={"raw": [1, 2]}),
        RemoveMessage(id="1"),
        AIMessage(
            "odd kwargs",
            additional_kwargs={"when": dt.datetime(2024, 1, 2, tzinfo=dt.UTC)},
        ),
    ],
)
def test_messages_round_trip_exactly(message: Any) -> None:
    got = roundtrip(message)
    assert type(got) is type(message)
    assert got == message
    assert got.model_dump() == message.model_dump()


def test_messages_are_readable_json_without_defaults() -> None:
    codec = ValueCodec(safe_serializer())
    assert codec.pack(HumanMessage("hi", id="1")) == {
        "$m": ["HumanMessage", {"content": "hi", "id": "1"}]
    }


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(2024, 5, 4, 6, 32, tzinfo=dt.UTC),
        uuid.UUID(int=7),
        Decimal("1.10"),
        {1, 2, 3},
        b"\x00raw bytes",
        {1: "int key"},
        Send("node", {"arg": 1}),
        Interrupt(value={"q": "approve?"}, id="i-1"),
    ],
)
def test_other_values_go_through_serde(value: Any) -> None:
    codec = ValueCodec(safe_serializer())
    packed = codec.pack(value)
    assert "$s" in packed
    assert roundtrip(value) == value


def test_values_langgraph_cannot_store_fail_before_anything_is_written(tmp_path: Path) -> None:
    thread = new_thread()
    with StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/big.db") as saver:
        with pytest.raises(TypeError):  # as LangGraph's own serializer: > 64-bit ints
            saver.put(config(thread), checkpoint({"n": 2**70}, {"n": 1}), {}, {"n": 1})
        assert saver.get_tuple(config(thread)) is None


def test_non_finite_floats_survive() -> None:
    assert math.isnan(roundtrip(float("nan")))
    assert roundtrip([float("inf")]) == [float("inf")]


def test_pooling_stores_a_big_value_once() -> None:
    codec = ValueCodec(safe_serializer())
    message = AIMessage("long " * 40, id="x")
    new: dict[str, Any] = {}
    first = codec.pack([message], {}, new)
    second = codec.pack({"nested": [message, message]}, {}, new)
    assert len(new) == 1
    assert first == [{"$p": next(iter(new))}]
    assert codec.unpack(second, new) == {"nested": [message, message]}


def test_memo_reuses_packed_messages_by_identity() -> None:
    codec = ValueCodec(safe_serializer())
    message = AIMessage("long " * 40, id="x")
    memo: dict[int, tuple[Any, Any]] = {}
    pool: dict[str, Any] = {}
    new: dict[str, Any] = {}
    codec.pack([message], pool, new, memo)
    pool.update(new)
    calls = 0
    original = AIMessage.model_dump

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(self, *args, **kwargs)

    AIMessage.model_dump = counting  # type: ignore[method-assign]
    try:
        again = codec.pack([message, AIMessage("other " * 30, id="y")], pool, {}, memo)
    finally:
        AIMessage.model_dump = original  # type: ignore[method-assign]
    assert calls == 1  # only the new message was serialized
    assert again[0] == {"$p": next(iter(pool))}


def test_native_json_off_sends_everything_through_serde() -> None:
    codec = ValueCodec(safe_serializer(), native=False)
    packed = codec.pack([{"a": 1}, HumanMessage("hi", id="1")], {}, {})
    assert all(set(cell) <= {"$s", "$p"} for cell in packed)
    assert roundtrip([{"a": 1}, HumanMessage("hi", id="1")], codec) == [
        {"a": 1},
        HumanMessage("hi", id="1"),
    ]


# -- safety --------------------------------------------------------------------------


def _hostile_blob(target: Path) -> dict[str, Any]:
    payload = ormsgpack.packb(("os", "system", [f"echo pwned > {target}"]))
    blob = ormsgpack.packb(ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, payload))
    return {"$s": ["msgpack", base64.b64encode(blob).decode()]}


def test_stored_type_names_are_never_imported_or_called(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    codec = ValueCodec(safe_serializer())
    got = codec.unpack(_hostile_blob(target), {})
    assert not target.exists()
    assert got == [f"echo pwned > {target}"]  # the raw arguments, inert
    with pytest.raises(KeyError):  # a message class outside the fixed table
        codec.unpack({"$m": ["os.system", {"content": "x"}]}, {})


def test_the_permissive_langgraph_default_would_have_run_it(tmp_path: Path) -> None:
    """Why the default matters: LangGraph's permissive serializer calls the named type."""
    target = tmp_path / "pwned"
    permissive = ValueCodec(JsonPlusSerializer(allowed_msgpack_modules=True))
    permissive.unpack(_hostile_blob(target), {})
    assert target.exists()


def test_user_types_need_to_be_allowed_without_known_types() -> None:
    strict = ValueCodec(safe_serializer(known_types=False))
    assert roundtrip(Point(1, 2), strict) == {"x": 1, "y": 2}  # not allowed: raw fields
    allowed = ValueCodec(safe_serializer([Point], known_types=False))
    assert roundtrip(Point(1, 2), allowed) == Point(1, 2)


def test_data_classes_this_process_knows_round_trip_by_default() -> None:
    assert roundtrip(Point(1, 2)) == Point(1, 2)


def test_saver_allowed_types_option(tmp_path: Path) -> None:
    thread = new_thread()
    with StatekeeperSaver.from_url(f"sqlite:///{tmp_path}/a.db", allowed_types=[Point]) as saver:
        saver.put(config(thread), checkpoint({"p": Point(1, 2)}, {"p": 1}), {}, {"p": 1})
        got = saver.get_tuple(config(thread))
        assert got is not None and got.checkpoint["channel_values"]["p"] == Point(1, 2)


# -- through the codec -----------------------------------------------------------------


def test_stored_records_are_verified_on_read(tmp_path: Path) -> None:
    path = tmp_path / "tamper.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(f"sqlite:///{path}") as saver:
        saver.put(
            config(thread),
            checkpoint({"secret": "plans"}, {"secret": 1}),
            {"step": 1},
            {"secret": 1},
        )
    conn = sqlite3.connect(path)
    # the checkpoint's record is compressed: flip a bit of its stored bytes (one of
    # the compressed "plans"), as a bad disk or an edit by hand would
    rowid, payload = conn.execute(
        "SELECT rowid, payload FROM sk_events WHERE kind = 'lg.cp'"
    ).fetchone()
    assert b"plans" not in payload and payload[1] & 0x0C  # compressed, not in the clear
    tampered = payload[:-4] + bytes([payload[-4] ^ 0x20]) + payload[-3:]
    conn.execute("UPDATE sk_events SET payload = ? WHERE rowid = ?", (tampered, rowid))
    conn.commit()
    conn.close()
    with StatekeeperSaver.from_url(f"sqlite:///{path}") as saver, pytest.raises(IntegrityError):
        saver.get_tuple(config(thread))


def test_metadata_and_values_go_through_the_store_codec(tmp_path: Path) -> None:
    """Nothing is written around the codec: every byte LangGraph stores is an event or
    snapshot payload the codec produced (so a keyed codec encrypts metadata too)."""
    path = tmp_path / "codec.db"
    thread = new_thread()
    with StatekeeperSaver.from_url(f"sqlite:///{path}") as saver:
        saver.put(
            config(thread),
            checkpoint({"v": "value-marker"}, {"v": 1}),
            {"m": "meta-marker"},  # type: ignore[typeddict-unknown-key]
            {"v": 1},
        )
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    # sk_leases holds only lease holders, tokens and expiries (no LangGraph data)
    assert set(tables) <= {
        "sk_meta",
        "sk_agents",
        "sk_events",
        "sk_snapshots",
        "sk_idempotency",
        "sk_leases",
        "sk_feed",  # the change feed: (position, agent id, seq) of each event, no data
        "sk_feed_deleted",  # agent ids and positions only
    }
    assert conn.execute("SELECT count(*) FROM sk_leases").fetchone()[0] == 0
    feed_columns = [r[1] for r in conn.execute("PRAGMA table_info(sk_feed)")]
    assert feed_columns == ["position", "agent_id", "seq"]  # nothing LangGraph wrote
    codec = Codec(compression="zstd-dict")  # the records are compressed: open them
    bodies = b"".join(
        codec.open(agent, seq, kind, ts, payload, checksum).body
        for agent, seq, kind, ts, payload, checksum in conn.execute(
            "SELECT agent_id, seq, kind, ts, payload, checksum FROM sk_events"
        )
    )
    assert b"value-marker" in bodies and b"meta-marker" in bodies
    conn.close()


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.additional_kwargs.__setitem__("k", 1),  # an empty dict filled in place
        lambda m: m.tool_calls.append({"name": "f", "args": {}, "id": "c", "type": "tool_call"}),
        lambda m: setattr(m, "response_metadata", {"model": "m"}),  # replaced
        lambda m: setattr(m, "content", "other " * 40),
    ],
)
def test_memo_sees_every_kind_of_change_to_a_message_with_empty_fields(change: Any) -> None:
    """A message whose containers are empty (most chat messages) is checked against its
    fingerprint in one comparison; every change to it is still seen and stored."""
    codec = ValueCodec(safe_serializer())
    message = AIMessage("long " * 40, id="x")
    memo: dict[int, Any] = {}
    pool: dict[str, Any] = {}
    first = codec.pack([message], pool, pool, memo)
    assert codec.pack([message], pool, pool, memo) == first  # unchanged: reused
    change(message)
    again = codec.pack([message], pool, pool, memo)
    assert again != first
    assert codec.unpack(again, pool) == [message]


def test_memo_treats_an_empty_tuple_as_the_empty_list() -> None:
    """As stored (JSON), an empty tuple is the empty list: swapping one for the other
    in a message field is no change (the message is not stored again)."""
    codec = ValueCodec(safe_serializer())
    message = AIMessage("long " * 40, id="x")
    memo: dict[int, Any] = {}
    pool: dict[str, Any] = {}
    first = codec.pack([message], pool, pool, memo)
    message.__dict__["tool_calls"] = ()
    new_pool: dict[str, Any] = {}
    assert codec.pack([message], pool, new_pool, memo) == first and not new_pool


def test_memo_notices_a_message_changed_in_place() -> None:
    """A memoized message object is reused only while every field is unchanged."""
    codec = ValueCodec(safe_serializer())
    message = AIMessage("long " * 40, id="x", additional_kwargs={"k": [1]})
    memo: dict[int, Any] = {}
    pool: dict[str, Any] = {}
    first = codec.pack([message], pool, pool, memo)
    assert codec.pack([message], pool, pool, memo) == first  # unchanged: reused
    message.additional_kwargs["k"].append(2)  # nested, in place
    changed = codec.pack([message], pool, pool, memo)
    assert changed != first
    assert codec.unpack(changed, pool)[0].additional_kwargs == {"k": [1, 2]}
    message.content = "other " * 40  # reassigned
    assert codec.unpack(codec.pack([message], pool, pool, memo), pool)[0].content == message.content
    message.id = "y"  # only the id: a reference to the stored message with the new id
    by_id = codec.pack([message], pool, pool, memo)
    assert set(by_id[0]) == {"$r"} and by_id[0]["$r"][1] == "y"
    assert codec.unpack(by_id, pool) == [message]
