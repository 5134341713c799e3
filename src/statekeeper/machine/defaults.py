"""The seed's default agent lifecycle: 6 states, 11 rules, starting in ``IDLE``.

======================  ==================  ===============
from                    event               to
======================  ==================  ===============
IDLE                    START_PROCESSING    PROCESSING
PROCESSING              AWAIT_INPUT         WAITING
PROCESSING              CALL_TOOL           TOOL_CALL
PROCESSING              COMPLETE            COMPLETED
PROCESSING              FAIL                ERROR
WAITING                 RECEIVE_RESULT      PROCESSING
TOOL_CALL               RECEIVE_RESULT      PROCESSING
TOOL_CALL               FAIL                ERROR
ERROR                   RECOVER             IDLE
ERROR                   RESET               IDLE
COMPLETED               RESET               IDLE
======================  ==================  ===============
"""

from __future__ import annotations

from statekeeper.machine.types import AgentState, StateTransition, TransitionRule

__all__ = ["DEFAULT_INITIAL", "DEFAULT_RULES", "DEFAULT_STATES", "default_rules"]

_S = AgentState
_T = StateTransition

#: Initial state of the default lifecycle.
DEFAULT_INITIAL: AgentState = AgentState.IDLE

#: The six default states, in declaration order.
DEFAULT_STATES: tuple[AgentState, ...] = tuple(AgentState)

#: The seed's eleven rules, exactly as in the article, in its order.
DEFAULT_RULES: tuple[TransitionRule[AgentState, StateTransition], ...] = (
    TransitionRule(_S.IDLE, _T.START_PROCESSING, _S.PROCESSING),
    TransitionRule(_S.PROCESSING, _T.AWAIT_INPUT, _S.WAITING),
    TransitionRule(_S.PROCESSING, _T.CALL_TOOL, _S.TOOL_CALL),
    TransitionRule(_S.PROCESSING, _T.COMPLETE, _S.COMPLETED),
    TransitionRule(_S.PROCESSING, _T.FAIL, _S.ERROR),
    TransitionRule(_S.WAITING, _T.RECEIVE_RESULT, _S.PROCESSING),
    TransitionRule(_S.TOOL_CALL, _T.RECEIVE_RESULT, _S.PROCESSING),
    TransitionRule(_S.TOOL_CALL, _T.FAIL, _S.ERROR),
    TransitionRule(_S.ERROR, _T.RECOVER, _S.IDLE),
    TransitionRule(_S.ERROR, _T.RESET, _S.IDLE),
    TransitionRule(_S.COMPLETED, _T.RESET, _S.IDLE),
)


def default_rules() -> list[TransitionRule[AgentState, StateTransition]]:
    """A fresh list of the default lifecycle's rules (rules are immutable; the list is yours)."""
    return list(DEFAULT_RULES)
