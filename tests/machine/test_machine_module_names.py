"""``AgentStateMachine`` is put together from parts of one job each (definition,
queries, running, drivers, persistence): the names stay importable from
``statekeeper.machine.machine``, and an instance is still slotted (no ``__dict__``)."""

from __future__ import annotations

import weakref

import pytest

from statekeeper.machine import AgentStateMachine, machine


@pytest.mark.parametrize("name", ["GUARD_REJECTED", "NO_RULE", "AgentStateMachine", "value_label"])
def test_a_name_of_the_machine_module_still_imports(name: str) -> None:
    assert getattr(machine, name) is not None
    assert name in machine.__all__


def test_a_machine_has_no_instance_dict_and_can_be_weakly_referenced() -> None:
    m = AgentStateMachine()
    assert not hasattr(m, "__dict__")
    with pytest.raises(AttributeError):
        m.unknown_attribute = 1  # type: ignore[attr-defined]
    assert weakref.ref(m)() is m
