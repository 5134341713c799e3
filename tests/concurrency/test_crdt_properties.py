"""Property tests: every CRDT's merge is commutative, associative and idempotent; replicas
that exchange states in any order converge; JSON round-trips; and vector clocks order
versions as a partial order whose merge is the least upper bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.concurrency import (
    CRDT,
    AppendOnlyList,
    GCounter,
    LWWMap,
    LWWRegister,
    Ordering,
    ORSet,
    PNCounter,
    Timestamp,
    VectorClock,
    crdt_from_json,
)
from statekeeper.errors import ConfigurationError

NODES = st.sampled_from(["a", "b", "c"])
SMALL = st.integers(min_value=0, max_value=5)
JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["x", "y", "z"]),
    st.lists(st.integers(0, 2), max_size=2),
)
STAMPS = st.builds(Timestamp, st.integers(0, 4), st.integers(0, 2), NODES)


@st.composite
def g_counters(draw: st.DrawFn) -> GCounter:
    c = GCounter()
    for node, by in draw(st.lists(st.tuples(NODES, SMALL), max_size=6)):
        c = c.increment(node, by)
    return c


@st.composite
def pn_counters(draw: st.DrawFn) -> PNCounter:
    c = PNCounter()
    for node, by in draw(st.lists(st.tuples(NODES, st.integers(-5, 5)), max_size=6)):
        c = c.increment(node, by)
    return c


@st.composite
def registers(draw: st.DrawFn) -> LWWRegister:
    r = LWWRegister()
    for value, stamp in draw(st.lists(st.tuples(JSON_VALUES, STAMPS), max_size=4)):
        r = r.set(value, stamp)
    return r


@st.composite
def lww_maps(draw: st.DrawFn) -> LWWMap:
    m = LWWMap()
    ops = st.tuples(st.booleans(), st.sampled_from(["k1", "k2", "k3"]), JSON_VALUES, STAMPS)
    for delete, key, value, stamp in draw(st.lists(ops, max_size=6)):
        m = m.delete(key, stamp) if delete else m.set(key, value, stamp)
    return m


@st.composite
def or_sets(draw: st.DrawFn) -> ORSet:
    s = ORSet()
    # tags are unique per replica history in real use: draw them from a counter
    ops = draw(st.lists(st.tuples(st.booleans(), st.sampled_from(["e1", "e2", 3])), max_size=8))
    node = draw(NODES)
    for i, (remove, element) in enumerate(ops):
        s = s.remove(element) if remove else s.add(element, tag=f"{node}-{i}-{draw(SMALL)}")
    return s


@st.composite
def lists(draw: st.DrawFn) -> AppendOnlyList:
    a = AppendOnlyList()
    for value, stamp in draw(st.lists(st.tuples(JSON_VALUES, STAMPS), max_size=5)):
        a = a.append(value, stamp)
    return a


TYPES: dict[str, Callable[[], st.SearchStrategy[Any]]] = {
    "g-counter": g_counters,
    "pn-counter": pn_counters,
    "lww-register": registers,
    "lww-map": lww_maps,
    "or-set": or_sets,
    "append-only-list": lists,
}


@pytest.mark.parametrize("kind", sorted(TYPES))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_merge_laws(kind: str, data: st.DataObject) -> None:
    make = TYPES[kind]
    a, b, c = data.draw(make()), data.draw(make()), data.draw(make())
    assert a.merge(b) == b.merge(a)  # commutative
    assert a.merge(b).merge(c) == a.merge(b.merge(c))  # associative
    assert a.merge(a) == a  # idempotent
    assert a.merge(b).merge(b) == a.merge(b)  # merging again changes nothing
    # the value is a function of the state: equal states, equal values
    assert a.merge(b).value == b.merge(a).value


@pytest.mark.parametrize("kind", sorted(TYPES))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_json_round_trip(kind: str, data: st.DataObject) -> None:
    value: CRDT = data.draw(TYPES[kind]())
    encoded = value.to_json()
    assert encoded["$crdt"] == kind
    again = crdt_from_json(encoded)
    assert again == value
    assert again.value == value.value
    assert type(value).from_json(encoded) == value


@pytest.mark.parametrize("kind", sorted(TYPES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_replicas_converge_in_any_exchange_order(kind: str, data: st.DataObject) -> None:
    replicas = [data.draw(TYPES[kind]()) for _ in range(4)]
    order = data.draw(st.permutations(range(4)))
    forward = replicas[0]
    for r in replicas[1:]:
        forward = forward.merge(r)
    shuffled = replicas[order[0]]
    for i in order[1:]:
        shuffled = shuffled.merge(replicas[i])
    assert forward == shuffled


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(NODES, st.integers(-5, 5)), max_size=20))
def test_counters_count(ops: list[tuple[str, int]]) -> None:
    g, pn = GCounter(), PNCounter()
    for node, by in ops:
        pn = pn.increment(node, by)
        if by >= 0:
            g = g.increment(node, by)
    assert pn.value == sum(by for _, by in ops)
    assert g.value == sum(by for _, by in ops if by >= 0)


def test_or_set_add_wins_over_a_concurrent_remove() -> None:
    base = ORSet().add("x", tag="t1")
    removed = base.remove("x")  # replica 1 removes the x it saw
    readded = base.add("x", tag="t2")  # replica 2 adds x again, concurrently
    assert "x" not in removed
    assert removed.merge(readded).value == ["x"]
    assert readded.merge(removed).value == ["x"]
    # a remove that observed both tags wins
    assert removed.merge(readded).remove("x").value == []


def test_lww_map_delete_and_set_are_ordered_by_stamp() -> None:
    t1, t2 = Timestamp(1, 0, "a"), Timestamp(2, 0, "b")
    set_late = LWWMap().set("k", "v", t2)
    deleted_early = LWWMap().delete("k", t1)
    assert set_late.merge(deleted_early).value == {"k": "v"}
    assert LWWMap().set("k", "v", t1).merge(LWWMap().delete("k", t2)).value == {}


def test_append_only_list_interleaves_by_stamp() -> None:
    a = AppendOnlyList().append("a1", Timestamp(1, 0, "a")).append("a2", Timestamp(3, 0, "a"))
    b = AppendOnlyList().append("b1", Timestamp(2, 0, "b"))
    assert a.merge(b).value == ["a1", "b1", "a2"] == b.merge(a).value


# -- vector clocks ---------------------------------------------------------------------------

CLOCKS = st.dictionaries(NODES, st.integers(0, 4), max_size=3).map(VectorClock)


@settings(max_examples=300, deadline=None)
@given(a=CLOCKS, b=CLOCKS, c=CLOCKS)
def test_vector_clock_partial_order(a: VectorClock, b: VectorClock, c: VectorClock) -> None:
    flip = {
        Ordering.BEFORE: Ordering.AFTER,
        Ordering.AFTER: Ordering.BEFORE,
        Ordering.EQUAL: Ordering.EQUAL,
        Ordering.CONCURRENT: Ordering.CONCURRENT,
    }
    assert a.compare(a) is Ordering.EQUAL  # reflexive
    assert b.compare(a) is flip[a.compare(b)]  # antisymmetric
    if a <= b and b <= c:
        assert a <= c  # transitive
    if a.compare(b) is Ordering.EQUAL:
        assert a == b
    # the order is pointwise <=
    pointwise = all(a.get(n) <= b.get(n) for n in set(a) | set(b))
    assert (a <= b) == pointwise


@settings(max_examples=300, deadline=None)
@given(a=CLOCKS, b=CLOCKS, c=CLOCKS, node=NODES)
def test_vector_clock_merge_is_the_least_upper_bound(
    a: VectorClock, b: VectorClock, c: VectorClock, node: str
) -> None:
    m = a.merge(b)
    assert a <= m and b <= m  # an upper bound
    if a <= c and b <= c:
        assert m <= c  # the least one
    assert m == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(a) == a
    # a local update happens after what it was based on
    assert a.compare(a.increment(node)) is Ordering.BEFORE
    # two updates on different replicas from one base are concurrent
    other = "b" if node != "b" else "c"
    assert a.increment(node).compare(a.increment(other)) is Ordering.CONCURRENT


@settings(max_examples=100, deadline=None)
@given(a=CLOCKS)
def test_vector_clock_json(a: VectorClock) -> None:
    assert VectorClock.from_json(a.to_json()) == a
    assert hash(VectorClock.from_json(a.to_json())) == hash(a)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_float_is_refused_not_turned_into_null(bad: float) -> None:
    """orjson writes NaN and infinities as null: a CRDT used to hold None in their place
    without a word (the store itself refuses them)."""
    stamp = Timestamp(1, 0, "a")
    makers: list[Callable[[], CRDT]] = [
        lambda: LWWRegister(bad, stamp),
        lambda: LWWMap().set("k", [bad], stamp),
        lambda: ORSet().add({"x": bad}),
        lambda: AppendOnlyList().append(bad, stamp),
    ]
    for make in makers:
        with pytest.raises(ConfigurationError, match="not the float"):
            make()


def test_append_only_list_keeps_two_messages_appended_at_one_stamp() -> None:
    """Two writers sharing a node id (two processes of one host named alike) can make
    equal stamps: the merge kept one of the two messages and dropped the other."""
    stamp = Timestamp(1_700_000_000_000, 0, "worker")
    one = AppendOnlyList().append("from process 1", stamp)
    two = AppendOnlyList().append("from process 2", stamp)
    merged = one.merge(two)
    assert merged == two.merge(one)
    assert sorted(merged.value) == ["from process 1", "from process 2"]
    assert len(merged) == 2 and merged.stamps == [stamp, stamp]
    assert merged.merge(one) == merged  # the same item again is no new item
    assert crdt_from_json(merged.to_json()) == merged
