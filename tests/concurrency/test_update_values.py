"""``update()`` keeps every value as the store holds it (trialdata).

Its private copy of the data was an ``orjson`` round trip: a datetime or a UUID the
change function never touched came back as a string and was saved as one; a Decimal,
bytes or a set stopped the update with an untyped ``TypeError``. And its "nothing
changed" check was ``==``: a change from 1 to 1.0, True to 1, 0.0 to -0.0 or to the
same instant in another time zone was reported written — ``Updated.data`` holding the
new value — and never saved."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import update
from statekeeper.errors import SerializationError

TYPED = {
    "at": datetime(2025, 1, 1, tzinfo=UTC),
    "id": uuid.UUID(int=7),
    "price": Decimal("1.10"),
    "blob": b"\x00\xff",
    "tags": {"a", "b"},
}
_NOON = datetime(2025, 1, 15, 12)


def typed(value: Any) -> Any:
    """A value as type and repr, so 1 and 1.0 or two Decimals' digits differ, while
    a set's order (which follows string hashing, random per process) does not."""
    if isinstance(value, dict):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        return (type(value), frozenset(typed(item) for item in value))
    return (type(value), repr(value))


CHANGES: list[tuple[Any, Any]] = [
    (1, 1.0),
    (True, 1),
    (0.0, -0.0),
    (Decimal("1.10"), Decimal("1.1")),
    (
        _NOON.replace(tzinfo=timezone(timedelta(hours=1))),
        _NOON.replace(tzinfo=ZoneInfo("Europe/Paris")),
    ),
]


async def test_an_update_keeps_the_typed_values_it_does_not_touch(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    async with StateStore(url) as store:
        await store.save("u", {**TYPED, "n": 1})

        def bump(data: dict[str, Any]) -> None:
            assert typed({k: data[k] for k in TYPED}) == typed(TYPED)  # what fn is given
            data["n"] += 1

        result = await update(store, "u", bump)
        assert result.data["n"] == 2
    async with StateStore(url) as store:
        assert typed((await store.load("u")).data) == typed({**TYPED, "n": 2})


@pytest.mark.parametrize(("old", "new"), CHANGES, ids=repr)
async def test_a_change_equal_by_python_is_saved(tmp_path: Path, old: Any, new: Any) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    async with StateStore(url) as store:
        await store.save("u", {"v": old})

        def change(data: dict[str, Any]) -> None:
            data["v"] = new

        result = await update(store, "u", change)
        assert repr(result.data["v"]) == repr(new)
        assert result.seq == 2
    async with StateStore(url) as store:
        assert repr((await store.load("u")).data["v"]) == repr(new)


async def test_a_value_the_store_refuses_fails_that_update_only(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'u.db'}") as store:
        await store.save("u", {"n": 1})

        def naive(data: dict[str, Any]) -> None:
            data["at"] = datetime(2025, 1, 1)  # no time zone: refused by the codec

        with pytest.raises(SerializationError, match="naive datetime"):
            await update(store, "u", naive)
        assert (await store.load("u")).data == {"n": 1}
