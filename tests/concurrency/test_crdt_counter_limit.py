"""Counter slots hold what agent data can store: 64-bit unsigned integers (orjson and
MessagePack refuse larger ones). An increment past 2**64 - 1 used to succeed, leaving a
counter that could not be compared (an untyped codec message) nor saved: it is refused
at the increment with a typed error, the counter unchanged; the largest count is saved,
loaded and merged exactly."""

from __future__ import annotations

import pickle

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import GCounter, PNCounter, crdt_from_json
from statekeeper.errors import ConfigurationError, CounterOverflow, InvalidArgument

MAX = 2**64 - 1


def test_an_increment_past_the_limit_is_refused_and_the_counter_is_unchanged() -> None:
    full = GCounter().increment("a", MAX)
    with pytest.raises(CounterOverflow) as caught:
        full.increment("a", 1)
    err = caught.value
    assert isinstance(err, InvalidArgument)
    assert (err.node, err.count, err.limit) == ("a", MAX + 1, MAX)
    assert "'a'" in str(err) and str(MAX + 1) in str(err)
    assert full.value == MAX
    back = pickle.loads(pickle.dumps(err))
    assert (back.node, back.count, str(back)) == ("a", MAX + 1, str(err))
    with pytest.raises(CounterOverflow):
        GCounter().increment("b", MAX + 1)
    # other nodes still count: the value is their sum, beyond 64 bits in Python
    assert full.increment("b", 5).value == MAX + 5


def test_a_pn_counter_refuses_either_half_past_the_limit() -> None:
    low = PNCounter().decrement("a", MAX)
    with pytest.raises(CounterOverflow):
        low.decrement("a")
    with pytest.raises(CounterOverflow):
        PNCounter().increment("a", MAX).increment("a", 2)
    assert low.increment("a", 1).value == -MAX + 1


def test_a_state_with_a_slot_past_the_limit_is_a_typed_error() -> None:
    with pytest.raises(ConfigurationError):
        crdt_from_json({"$crdt": "g-counter", "state": {"a": MAX + 1}})
    with pytest.raises(ConfigurationError):
        GCounter({"a": MAX + 1})


async def test_the_largest_counts_are_saved_loaded_and_merged_exactly() -> None:
    g = GCounter().increment("a", MAX).increment("b", MAX)
    pn = PNCounter().increment("a", MAX).decrement("b", MAX)
    async with StateStore("memory://") as store:
        await store.save("c", {"g": g.to_json(), "pn": pn.to_json()})
        data = (await store.load("c")).data
    g2, pn2 = GCounter.from_json(data["g"]), PNCounter.from_json(data["pn"])
    assert g2 == g and g2.value == 2 * MAX
    assert pn2 == pn and pn2.value == 0
    assert g2.merge(GCounter({"a": 3})).value == 2 * MAX
