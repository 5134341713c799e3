"""Errors of a state machine: its definition, its events and its transitions.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from typing import Any

from statekeeper.errors.base import StatekeeperError, _label

# --- state machine -------------------------------------------------------------------


class MachineError(StatekeeperError):
    """Base class for state-machine errors."""


class InvalidTransition(MachineError):
    """An event cannot fire from the current state (strict mode), or a guard refused it."""

    def __init__(self, state: Any, event: Any, reason: str = "no rule") -> None:
        self.state = state
        self.event = event
        self.reason = reason
        super().__init__(f"cannot fire {_label(event)!r} from state {_label(state)!r}: {reason}")


class UnknownState(MachineError, ValueError):
    """A state value does not belong to the machine (e.g. when restoring a stored state).

    ``state`` is the value; ``agent_id`` the agent stored in it (None: no agent's, a
    bare machine's)."""

    def __init__(self, message: str, state: Any = None, agent_id: str | None = None) -> None:
        self.state = state
        self.agent_id = agent_id
        super().__init__(message)

    def for_agent(self, agent_id: str, how: str) -> UnknownState:
        """This error, met for agent ``agent_id`` (``how`` it met the state), naming it."""
        return UnknownState(f"agent {agent_id!r} {how}: {self}", self.state, agent_id)


class InvalidMachineDefinition(MachineError, ValueError):
    """A rule or machine definition is malformed (duplicate rule, unknown state...)."""


class CallbackError(MachineError):
    """An action or hook failed while a transition was being applied.

    ``errors`` lists every exception collected, in order; the first one is the cause.
    """

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        self.errors = errors
        super().__init__(message)


class UnknownEvent(MachineError, ValueError):
    """An event value does not belong to the machine (e.g. when resolving a stored event);
    ``event`` is the value."""

    def __init__(self, message: str, event: Any = None) -> None:
        self.event = event
        super().__init__(message)


class AsyncRequired(MachineError, TypeError):
    """A synchronous call (``fire``, ``can_transition``) met an async guard, action or hook.

    Nothing was changed when this is raised before the state changed; use the async API
    (``await machine.transition(...)``) for machines with async callables.
    """

    def __init__(self, state: Any, event: Any, callable_name: str) -> None:
        self.state = state
        self.event = event
        self.callable_name = callable_name
        super().__init__(
            f"cannot fire {_label(event)!r} from state {_label(state)!r} synchronously: "
            f"{callable_name} is async; use 'await machine.transition(...)'"
        )


class TransitionInProgress(MachineError):
    """A transition was started on a machine that is already in the middle of one.

    Raised for re-entrant calls from a guard, exit hook or action of the same machine
    (``on_enter`` hooks and callbacks run after the state changed and may fire new
    events freely), for a synchronous ``fire``/``restore`` while an async transition of
    the same machine is suspended in one of those steps. Concurrent asyncio tasks do not
    get this error: ``await machine.transition(...)`` waits for its turn.
    """

    def __init__(self, state: Any, event: Any = None) -> None:
        self.state = state
        self.event = event
        what = "restore" if event is None else f"fire {_label(event)!r}"
        super().__init__(
            f"cannot {what}: a transition from state {_label(state)!r} "
            "is still running its guards, exit hooks or action"
        )
