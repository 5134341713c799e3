"""A step whose result holds a non-finite float (``nan``, ``inf``) was recorded as
``null``: the result returned, and replayed after a crash, was not the one the step
produced, without an error (``store.save`` refuses the same value). It is refused with
a typed error naming the step and where in the result, and nothing is recorded."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import math
import uuid
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency.steps import Steps
from statekeeper.errors import InvalidArgument


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
async def test_a_step_result_that_json_would_alter_is_refused(bad: float) -> None:
    async with StateStore("memory://") as store:
        steps = Steps(store, "order-7")
        with pytest.raises(InvalidArgument) as caught:
            await steps.run("quote", lambda: {"price": {"eur": bad}, "ok": True})
        assert caught.value.argument == "result"
        assert "'quote'" in str(caught.value) and "price" in str(caught.value)
        assert await steps.recorded("quote") is None  # nothing recorded: runs again
        assert await steps.run("quote", lambda: {"price": {"eur": 1.5}}) == {"price": {"eur": 1.5}}


class _Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class _Point:
    x: int


@pytest.mark.parametrize(
    "bad",
    [
        datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC),  # was returned as an ISO string
        datetime.datetime(2025, 1, 1),
        uuid.UUID(int=1),  # as a string
        _Colour.RED,  # as "red"
        _Point(1),  # as {"x": 1}
    ],
    ids=repr,
)
async def test_a_step_result_orjson_would_write_as_another_value_is_refused(bad: Any) -> None:
    """orjson writes a datetime, a UUID, an enum member or a dataclass as the string or
    dict it resembles: the step's result came back (on its first run too) as another
    value than the one the step returned, without an error (trialdata)."""
    async with StateStore("memory://") as store:
        steps = Steps(store, "order-7")
        with pytest.raises(InvalidArgument) as caught:
            await steps.run("quote", lambda: {"at": [bad]})
        assert caught.value.argument == "result" and "at" in str(caught.value)
        assert await steps.recorded("quote") is None
