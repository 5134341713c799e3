"""A save that changes a value into one Python calls equal but that is stored as
another value — ``-0.0`` for ``0.0``, ``Decimal("1.100")`` for ``Decimal("1.10")``, the
same instant at another UTC offset, or at the same offset in another named time zone
(``Europe/Paris`` for a fixed ``+01:00``, ``Africa/Lagos`` for ``Europe/Paris``) — is
written: before, the diff called them the same, nothing was written (or, write-behind,
only the cache held the new value) and the old value was loaded back, without an error."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pydantic
import pytest

from statekeeper import StateStore

_UTC = dt.UTC
_PARIS = dt.timezone(dt.timedelta(hours=1))
_NOON = dt.datetime(2025, 1, 15, 12)
_IN_PARIS = _NOON.replace(tzinfo=ZoneInfo("Europe/Paris"))
_IN_LAGOS = _NOON.replace(tzinfo=ZoneInfo("Africa/Lagos"))  # +01:00 too, without DST

CHANGES: list[tuple[Any, Any]] = [
    (0.0, -0.0),
    (Decimal("1.10"), Decimal("1.100")),
    (dt.datetime(2025, 1, 1, 12, tzinfo=_UTC), dt.datetime(2025, 1, 1, 13, tzinfo=_PARIS)),
    ([dt.datetime(2025, 1, 1, 12, tzinfo=_UTC)], [dt.datetime(2025, 1, 1, 13, tzinfo=_PARIS)]),
    ({"due": Decimal("2.50"), "n": 1}, {"due": Decimal("2.5"), "n": 1}),
    ({1, 2}, {True, 2}),
    (_NOON.replace(tzinfo=_PARIS), _IN_PARIS),
    (_IN_PARIS, _IN_LAGOS),
    (_IN_PARIS, _NOON.replace(tzinfo=_PARIS)),
    ([_IN_PARIS], [_IN_LAGOS]),
]


@pytest.mark.parametrize("durability", ["sync", "group", "async"])
@pytest.mark.parametrize("fmt", ["json", "msgpack"])
async def test_a_value_equal_by_python_but_not_as_data_is_saved(
    tmp_path: Path, durability: str, fmt: str
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    async with StateStore(url, durability=durability, format=fmt) as store:
        for i, (old, new) in enumerate(CHANGES):
            await store.save(f"a{i}", {"x": old, "other": 1})
            await store.save(f"a{i}", {"x": new, "other": 1})
            assert repr((await store.load(f"a{i}")).data["x"]) == repr(new)
    async with StateStore(url, format=fmt) as store:  # as stored, not as cached
        for i, (_, new) in enumerate(CHANGES):
            loaded = await store.load(f"a{i}")
            assert repr(loaded.data["x"]) == repr(new), i


@dataclasses.dataclass
class Reading:
    value: Any


class Measure(pydantic.BaseModel):
    value: Any


FIELD_CHANGES: list[tuple[Any, Any]] = [
    (1, 1.0),
    (True, 1),
    (0.0, -0.0),
    (Decimal("1.10"), Decimal("1.1")),
]


@pytest.mark.parametrize("cls", [Reading, Measure])
@pytest.mark.parametrize("fmt", ["json", "msgpack"])
async def test_a_registered_value_whose_field_changes_so_is_saved(
    tmp_path: Path, fmt: str, cls: Any
) -> None:
    """A registered dataclass or pydantic model is stored by its fields: its ``__eq__``
    compares them with ``==``, so ``Reading(1)`` and ``Reading(1.0)`` were one value to
    the diff, nothing was written, and ``Reading(1)`` was loaded back."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    async with StateStore(url, format=fmt, types=[cls]) as store:
        for i, (old, new) in enumerate(FIELD_CHANGES):
            await store.save(f"r{i}", {"r": cls(value=old)})
            await store.save(f"r{i}", {"r": cls(value=new)})
            assert repr((await store.load(f"r{i}")).data["r"].value) == repr(new)
    async with StateStore(url, format=fmt, types=[cls]) as store:
        for i, (_, new) in enumerate(FIELD_CHANGES):
            assert repr((await store.load(f"r{i}")).data["r"].value) == repr(new), i


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
async def test_a_signaling_nan_decimal_is_saved_over_and_replaced(tmp_path: Path, fmt: str) -> None:
    """``Decimal("sNaN")`` is stored (a tagged string), but comparing it raises
    ``decimal.InvalidOperation``: every later save of the agent that kept it or
    replaced it stopped with that untyped error in the diff (trialdata)."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    kept = {"top": Decimal("sNaN"), "inside": {"x": Decimal("sNaN")}, "nan": [Decimal("NaN")]}
    async with StateStore(url, format=fmt) as store:
        await store.save("a", kept)
        await store.save("a", {**kept, "n": 1})
        await store.save("a", {"top": Decimal("1"), "inside": {"x": Decimal("-sNaN")}, "nan": []})
    async with StateStore(url, format=fmt) as store:
        assert repr((await store.load("a")).data) == repr(
            {"top": Decimal("1"), "inside": {"x": Decimal("-sNaN")}, "nan": []}
        )
        assert repr((await store.load("a", at_seq=2)).data) == repr({**kept, "n": 1})
