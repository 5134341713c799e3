"""Structural checks of a machine: unreachable states and dead ends."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from statekeeper.errors import InvalidMachineDefinition
from statekeeper.machine._compiled import value_label

if TYPE_CHECKING:
    from statekeeper.machine.machine import AgentStateMachine

__all__ = ["ValidationReport", "validate_machine"]

S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True, slots=True)
class ValidationReport(Generic[S]):
    """What :meth:`AgentStateMachine.validate` found.

    ``unreachable``: states no sequence of rules leads to from ``initial`` (guards
    ignored). ``dead_ends``: non-final states without any outgoing rule (the machine
    would be stuck there). ``final_states``: the final states that were taken into
    account. All tuples follow the machine's state declaration order.
    """

    initial: S
    unreachable: tuple[S, ...]
    dead_ends: tuple[S, ...]
    final_states: tuple[S, ...]

    @property
    def ok(self) -> bool:
        """True when there is no unreachable state and no dead end."""
        return not self.unreachable and not self.dead_ends

    def raise_for_problems(self) -> None:
        """Raise :class:`~statekeeper.errors.InvalidMachineDefinition` unless :attr:`ok`."""
        if not self.ok:
            raise InvalidMachineDefinition(str(self))

    def __str__(self) -> str:
        """A one-line human summary of the problems (or that there are none)."""
        if self.ok:
            return "machine is valid: every state is reachable and none is a dead end"
        parts = []
        if self.unreachable:
            parts.append(
                "unreachable from initial: " + ", ".join(map(value_label, self.unreachable))
            )
        if self.dead_ends:
            parts.append(
                "dead ends (no outgoing rule): " + ", ".join(map(value_label, self.dead_ends))
            )
        return "; ".join(parts)


def validate_machine(
    machine: AgentStateMachine[S, Any], final_states: Iterable[S] = ()
) -> ValidationReport[S]:
    """Build the :class:`ValidationReport` of ``machine`` (see its docstring)."""
    finals = set(machine.final_states)
    for state in final_states:
        finals.add(machine.state_for(state))
    successors: dict[S, list[S]] = {state: [] for state in machine.states}
    for rule in machine.rules:
        successors[rule.from_state].append(rule.to_state)
    seen = {machine.initial}
    stack = [machine.initial]
    while stack:
        for nxt in successors[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    states = machine.states
    return ValidationReport(
        initial=machine.initial,
        unreachable=tuple(s for s in states if s not in seen),
        dead_ends=tuple(s for s in states if not successors[s] and s not in finals),
        final_states=tuple(s for s in states if s in finals),
    )
