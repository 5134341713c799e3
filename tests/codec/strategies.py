"""Hypothesis strategies for documents with every supported type, and strict equality."""

from __future__ import annotations

import dataclasses
import enum
import math
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import strategies as st

from statekeeper.codec import TypeRegistry


class Priority(enum.Enum):
    LOW = 1
    HIGH = "high"


class Level(enum.IntEnum):
    ONE = 1
    TWO = 2


class Mode(enum.StrEnum):
    FAST = "fast"
    SAFE = "safe"


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict[str, Any]
    when: datetime | None = None


@dataclasses.dataclass
class Counter:
    n: int
    tags: set[str] = dataclasses.field(default_factory=set)
    total: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        self.total = self.n * 2


def registry() -> TypeRegistry:
    types = TypeRegistry([Priority, Level, Mode, ToolCall])
    types.register(Counter, name="counter")
    return types


OFFSETS = st.integers(-23 * 60 + 1, 23 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
ZONES = st.sampled_from(["Europe/Paris", "America/New_York", "Asia/Kolkata", "UTC"]).map(ZoneInfo)
AWARE = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=OFFSETS | ZONES,
    allow_imaginary=False,
) | st.just(datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
HASHABLE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.uuids(),
    st.dates(),
    st.sampled_from(list(Priority)),
)
TYPED = st.one_of(
    AWARE,
    st.dates(),
    st.times(),
    st.uuids(),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.binary(max_size=64),
    st.sets(HASHABLE, max_size=5),
    st.frozensets(HASHABLE, max_size=5),
    st.sampled_from([*Priority, *Level, *Mode]),
    st.builds(
        ToolCall,
        st.text(max_size=5),
        st.dictionaries(st.text(max_size=3), SCALARS, max_size=3),
        st.none() | AWARE,
    ),
    st.builds(Counter, st.integers(-1000, 1000), st.sets(st.text(max_size=3), max_size=3)),
)
KEYS = st.text(max_size=6) | st.sampled_from(["$t", "v", "z", "$", "data"])


def documents(leaves: st.SearchStrategy[Any] = SCALARS | TYPED) -> st.SearchStrategy[Any]:
    """Nested dicts and lists of ``leaves`` (dicts may use the tag key "$t" themselves)."""
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
        max_leaves=20,
    )


def strict(value: Any) -> Any:
    """A representation equal for two values only if they are the same type and value
    (``1``, ``1.0`` and ``True`` differ; so do equal datetimes in different zones)."""
    t = type(value)
    if t is dict:
        return ("dict", tuple(sorted((k, strict(v)) for k, v in value.items())))
    if t is list:
        return ("list", tuple(strict(v) for v in value))
    if t in (set, frozenset):
        return (t.__name__, tuple(sorted(repr(strict(v)) for v in value)))
    if t is float:
        return ("float", value.hex() if math.isfinite(value) else repr(value))
    if t is datetime:
        return ("datetime", value.isoformat(), repr(value.tzinfo))
    if t in (date, time, Decimal, uuid.UUID):
        return (t.__name__, str(value))
    if dataclasses.is_dataclass(value):
        return (t.__name__, strict(dataclasses.asdict(value)))
    return (t.__name__, repr(value))
