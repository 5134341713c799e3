"""Typed values: every supported type round-trips exactly, in both formats; nothing else
is stored, and loading never rebuilds a type that was not registered."""

from __future__ import annotations

import dataclasses
import enum
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.codec import Codec, TypeRegistry
from statekeeper.codec.formats import JSON, MSGPACK, Format
from statekeeper.codec.types import needs_tagging
from statekeeper.errors import ConfigurationError, SerializationError, UnknownTypeTag

from .strategies import (
    TYPED,
    Counter,
    Level,
    Mode,
    Priority,
    ToolCall,
    documents,
    registry,
    strict,
)

FORMATS = [pytest.param(JSON, id="json"), pytest.param(MSGPACK, id="msgpack")]


def roundtrip(value: Any, fmt: int = JSON, types: TypeRegistry | None = None) -> Any:
    f = Format(fmt, types if types is not None else registry())
    return f.loads(f.dumps(value, "data"), "data")


# -- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=300, deadline=None)
@given(value=TYPED)
def test_every_supported_type_round_trips(fmt: int, value: Any) -> None:
    assert strict(roundtrip(value, fmt)) == strict(value)
    assert strict(roundtrip({"x": [value]}, fmt)) == strict({"x": [value]})


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=300, deadline=None)
@given(doc=documents())
def test_random_nested_documents_round_trip(fmt: int, doc: Any) -> None:
    assert strict(roundtrip(doc, fmt)) == strict(doc)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=200, deadline=None)
@given(doc=documents(st.none() | st.booleans() | st.integers() | st.text()))
def test_plain_documents_take_the_fast_path(fmt: int, doc: Any) -> None:
    """A plain JSON document is written as is (no copy, no tags) and read back equal."""
    try:
        data = Format(fmt, None).dumps(doc, "data")
    except SerializationError:
        return  # an int beyond 64 bits: refused, fine
    if fmt == JSON and not needs_tagging(doc):
        assert data == orjson.dumps(doc)
    assert strict(Format(fmt, None).loads(data)) == strict(doc)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(datetime(2024, 3, 31, 2, 30, tzinfo=ZoneInfo("Europe/Paris")), id="dst-gap"),
        pytest.param(
            datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Paris")),
            id="dst-fold",
        ),
        pytest.param(
            datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=5, minutes=30))), id="offset"
        ),
        pytest.param(datetime.max.replace(tzinfo=UTC), id="max"),
        pytest.param(time(23, 59, 59, 999999, tzinfo=UTC), id="aware-time"),
        pytest.param(date(1, 1, 1), id="date-min"),
        pytest.param(Decimal("-0.000"), id="negative-zero-decimal"),
        pytest.param(Decimal("1E+30"), id="exponent"),
        pytest.param(uuid.UUID(int=0), id="nil-uuid"),
        pytest.param(b"", id="empty-bytes"),
        pytest.param(set(), id="empty-set"),
        pytest.param(-0.0, id="negative-zero"),
        pytest.param(2**64 - 1, id="u64-max"),
        pytest.param(-(2**63), id="i64-min"),
        pytest.param({"$t": "datetime", "v": "not a date"}, id="user-dict-shaped-like-a-tag"),
        pytest.param({"$t": {"$t": "uuid"}}, id="nested-tag-keys"),
        pytest.param([{"$t": 1, "v": 2, "z": 3}], id="tag-key-in-a-list"),
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_edge_values(fmt: int, value: Any) -> None:
    back = roundtrip(value, fmt)
    assert strict(back) == strict(value)
    if isinstance(value, datetime):
        assert back == value and back.utcoffset() == value.utcoffset()


def test_a_zoneinfo_datetime_keeps_its_zone() -> None:
    paris = datetime(2024, 7, 1, 12, tzinfo=ZoneInfo("Europe/Paris"))
    back = roundtrip(paris)
    assert back.tzinfo is ZoneInfo("Europe/Paris")
    assert back + timedelta(days=180) == paris + timedelta(days=180)  # DST still applies


def test_tuples_are_stored_as_lists() -> None:
    assert roundtrip({"t": (1, (2, 3))}) == {"t": [1, [2, 3]]}


def test_enums_are_stored_by_member_name() -> None:
    f = Format(JSON, registry())
    assert orjson.loads(f.dumps(Priority.HIGH)) == {
        "$t": "tests.codec.strategies.Priority",
        "v": "HIGH",
    }
    assert f.loads(f.dumps([Level.TWO, Mode.SAFE])) == [Level.TWO, Mode.SAFE]


def test_dataclasses_are_rebuilt_with_their_types() -> None:
    call = ToolCall(
        "search", {"q": "x", "when": date(2024, 1, 2)}, datetime(2024, 1, 2, tzinfo=UTC)
    )
    back = roundtrip({"call": call, "n": Counter(3, {"a"})})
    assert back["call"] == call and type(back["call"].args["when"]) is date
    assert back["n"] == Counter(3, {"a"}) and back["n"].total == 6  # __post_init__ ran


def test_pydantic_models_round_trip_when_registered() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Answer(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        text: str
        at: datetime
        sources: list[uuid.UUID] = pydantic.Field(default_factory=list)

    types = TypeRegistry([Answer])
    answer = Answer(text="42", at=datetime(2024, 1, 1, tzinfo=UTC), sources=[uuid.UUID(int=5)])
    back = roundtrip({"a": answer}, types=types)
    assert back["a"] == answer and type(back["a"]) is Answer
    assert back["a"].sources[0] == uuid.UUID(int=5)


def test_custom_types_with_encode_and_decode() -> None:
    class Money:
        def __init__(self, cents: int) -> None:
            self.cents = cents

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Money) and other.cents == self.cents

    types = TypeRegistry()
    types.register(Money, name="money", encode=lambda m: m.cents, decode=Money)
    assert roundtrip([Money(250)], types=types) == [Money(250)]


# -- refusals on write ---------------------------------------------------------------------


class Opaque:
    pass


class Unregistered(enum.Enum):
    A = 1


@dataclasses.dataclass
class Loose:
    x: int


class MyStr(str):
    pass


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param(Opaque(), "test_types.Opaque (not registered", id="object"),
        pytest.param(Unregistered.A, "Unregistered (not registered", id="enum"),
        pytest.param(Loose(1), "Loose (not registered", id="dataclass"),
        pytest.param(MyStr("x"), "MyStr (not registered", id="str-subclass"),
        pytest.param(datetime(2024, 1, 1), "naive datetime", id="naive-datetime"),
        pytest.param(float("nan"), "non-finite float", id="nan"),
        pytest.param(float("-inf"), "non-finite float", id="infinity"),
        pytest.param(2**64, "64-bit", id="big-int"),
        pytest.param(bytearray(b"x"), "bytearray", id="bytearray"),
        pytest.param({(1, 2)}, "tuple inside a set", id="tuple-in-set"),
        pytest.param(Priority, "type", id="a-class-itself"),
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_unsupported_values_are_refused_naming_path_and_type(
    fmt: int, value: Any, problem: str
) -> None:
    with pytest.raises(SerializationError) as info:
        Format(fmt, registry()).dumps({"state": {"items": [1, value]}}, "data")
    assert info.value.path == "data.state.items[1]"
    assert problem in str(info.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_string_keys_are_refused(fmt: int) -> None:
    for key in (1, Mode.FAST, MyStr("k"), None):
        with pytest.raises(SerializationError) as info:
            Format(fmt, registry()).dumps({"a": {key: 1}}, "data")
        assert info.value.path == "data.a"


def test_nothing_converts_silently() -> None:
    """orjson on its own writes these as strings or numbers and they come back as
    something else; the codec either round-trips them exactly or refuses."""
    f = Format(JSON, TypeRegistry())
    for value in (uuid.uuid4(), Unregistered.A, Loose(1), datetime(2024, 1, 1, tzinfo=UTC)):
        try:
            back = f.loads(f.dumps(value))
        except SerializationError:
            continue
        assert strict(back) == strict(value)


# -- refusals on read ------------------------------------------------------------------------


def test_unknown_tags_are_a_typed_error_and_nothing_is_imported() -> None:
    hostile = orjson.dumps({"x": [{"$t": "os.system", "v": "echo pwned"}]})
    with pytest.raises(UnknownTypeTag) as info:
        Format(JSON, registry()).loads(hostile, "data")
    assert info.value.tag == "os.system"
    assert info.value.path == "data.x[0]"
    assert isinstance(info.value, SerializationError)


def test_a_type_registered_on_write_but_not_on_read() -> None:
    data = Format(JSON, registry()).dumps({"p": Priority.LOW})
    with pytest.raises(UnknownTypeTag):
        Format(JSON, TypeRegistry()).loads(data)


@pytest.mark.parametrize(
    "tagged",
    [
        {"$t": "datetime", "v": "2024-01-01T00:00:00"},  # naive
        {"$t": "datetime", "v": 12},
        {"$t": "uuid", "v": "nope"},
        {"$t": "bytes", "v": "***"},
        {"$t": "decimal", "v": 1.5},
        {"$t": "set", "v": [[1]]},  # unhashable
        {"$t": "dict", "v": [1]},
        {"$t": "datetime"},  # no value
        {"$t": 7, "v": 1},
    ],
)
def test_malformed_tagged_values_are_refused(tagged: dict[str, Any]) -> None:
    with pytest.raises(SerializationError):
        Format(JSON, registry()).loads(orjson.dumps({"x": tagged}))


# -- the registry --------------------------------------------------------------------------


def test_registry_rules() -> None:
    types = TypeRegistry()
    assert types.register(Priority) is Priority  # usable as a decorator
    with pytest.raises(ConfigurationError):
        types.register(Level, name="tests.codec.strategies.Priority")  # name taken
    with pytest.raises(ConfigurationError):
        types.register(Level, name="datetime")  # built-in tag
    with pytest.raises(ConfigurationError):
        types.register(Opaque)  # needs encode/decode
    with pytest.raises(ConfigurationError):
        types.register(Opaque, encode=str)  # both or neither
    with pytest.raises(ConfigurationError):
        types.register(datetime)  # handled already
    types.register(Priority, name="prio")  # renaming keeps one entry
    assert types.names == ["prio"]
    assert Priority in types and len(types) == 1
    assert "prio" in repr(types)


def test_codec_serializes_with_its_registry() -> None:
    codec = Codec(types=[Priority])
    assert codec.deserialize(codec.serialize({"p": Priority.HIGH})) == {"p": Priority.HIGH}
    assert codec.copy_loads(codec.copy_dumps({"s": {1}})) == {"s": {1}}
