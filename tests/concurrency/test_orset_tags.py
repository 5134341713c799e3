"""An ORSet remove removes only the element it names, whatever tags the adds used."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statekeeper.concurrency import ORSet
from statekeeper.errors import ConfigurationError


def test_one_tag_used_for_two_elements_on_two_replicas() -> None:
    """Two replicas that happened to pick one tag for different elements: removing one
    element used to remove the other (its tag was tombstoned)."""
    left = ORSet().add("x", tag="t1")
    right = ORSet().add("y", tag="t1")
    merged = left.merge(right)
    assert sorted(merged.value) == ["x", "y"]
    assert merged.remove("x").value == ["y"]
    assert merged.remove("y").value == ["x"]
    # the remove made on one replica, merged into the other later
    assert left.remove("x").merge(right).value == ["y"]
    assert right.merge(left.remove("x")).value == ["y"]
    assert ORSet.from_json(merged.remove("x").to_json()).value == ["y"]


def test_one_tag_used_for_two_elements_on_one_replica() -> None:
    s = ORSet().add("x", tag="t").add("y", tag="t")
    assert s.remove("x").value == ["y"]
    assert s.remove("y").value == ["x"]


def test_a_removed_tag_is_still_refused_for_its_element() -> None:
    s = ORSet().add("x", tag="t").remove("x")
    with pytest.raises(ConfigurationError, match="'t'"):
        s.add("x", tag="t")
    assert s.add("y", tag="t").value == ["y"]  # (another element's tag: its own)


@given(
    st.lists(
        st.tuples(st.sampled_from(["e1", "e2", 3, None]), st.sampled_from(["t1", "t2"])),
        max_size=6,
    ),
    st.lists(
        st.tuples(st.sampled_from(["e1", "e2", 3, None]), st.sampled_from(["t1", "t2"])),
        max_size=6,
    ),
    st.sampled_from(["e1", "e2", 3, None]),
)
def test_a_remove_leaves_every_other_element(
    left_adds: list[tuple[object, str]], right_adds: list[tuple[object, str]], target: object
) -> None:
    """Tags drawn from two names on two replicas (so they collide across elements)."""
    left, right = ORSet(), ORSet()
    for element, tag in left_adds:
        left = left.add(element, tag=tag)
    for element, tag in right_adds:
        right = right.add(element, tag=tag)
    merged = left.merge(right)
    after = merged.remove(target)
    assert target not in after
    assert [e for e in merged.value if e != target] == after.value
    later = left.remove(target).merge(right)  # the remove merged into the other later
    assert [e for e in later.value if e != target] == after.value
