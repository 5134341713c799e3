"""The agent state machine: the seed's ``AgentStateMachine``, sync and async, typed and fast.

>>> from statekeeper.machine import AgentStateMachine, AgentState, StateTransition
>>> m = AgentStateMachine()
>>> m.fire(StateTransition.START_PROCESSING)
True
>>> m.current_state is AgentState.PROCESSING
True

See ``docs/machine.md`` for the guide.
"""

from statekeeper.machine.defaults import (
    DEFAULT_INITIAL,
    DEFAULT_RULES,
    DEFAULT_STATES,
    default_rules,
)
from statekeeper.machine.diagram import to_dot, to_mermaid
from statekeeper.machine.loading import load_machine
from statekeeper.machine.machine import GUARD_REJECTED, NO_RULE, AgentStateMachine, value_label
from statekeeper.machine.types import (
    EMPTY_METADATA,
    AgentState,
    CallbackFailure,
    StateHistory,
    StateTransition,
    TransitionContext,
    TransitionResult,
    TransitionRule,
)
from statekeeper.machine.validate import ValidationReport, validate_machine

__all__ = [
    "DEFAULT_INITIAL",
    "DEFAULT_RULES",
    "DEFAULT_STATES",
    "EMPTY_METADATA",
    "GUARD_REJECTED",
    "NO_RULE",
    "AgentState",
    "AgentStateMachine",
    "CallbackFailure",
    "StateHistory",
    "StateTransition",
    "TransitionContext",
    "TransitionResult",
    "TransitionRule",
    "ValidationReport",
    "default_rules",
    "load_machine",
    "to_dot",
    "to_mermaid",
    "validate_machine",
    "value_label",
]
