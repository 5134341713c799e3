"""A save that changes a value into one Python calls equal but that is stored as
another value — ``-0.0`` for ``0.0``, ``Decimal("1.100")`` for ``Decimal("1.10")``, the
same instant at another UTC offset — is written: before, the diff called them the same,
nothing was written (or, write-behind, only the cache held the new value) and the old
value was loaded back, without an error."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore

_UTC = dt.UTC
_PARIS = dt.timezone(dt.timedelta(hours=1))

CHANGES: list[tuple[Any, Any]] = [
    (0.0, -0.0),
    (Decimal("1.10"), Decimal("1.100")),
    (dt.datetime(2025, 1, 1, 12, tzinfo=_UTC), dt.datetime(2025, 1, 1, 13, tzinfo=_PARIS)),
    ([dt.datetime(2025, 1, 1, 12, tzinfo=_UTC)], [dt.datetime(2025, 1, 1, 13, tzinfo=_PARIS)]),
    ({"due": Decimal("2.50"), "n": 1}, {"due": Decimal("2.5"), "n": 1}),
    ({1, 2}, {True, 2}),
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
