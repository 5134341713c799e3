"""Value types of the state machine: the seed's enums and records, made typed and lean.

Every record is a ``__slots__`` dataclass. States and events may be any hashable
value (an :class:`~enum.Enum` member or a plain string are the usual choices);
:class:`AgentState` and :class:`StateTransition` are the seed's default vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from statekeeper.machine.machine import AgentStateMachine

__all__ = [
    "EMPTY_METADATA",
    "AgentState",
    "CallbackFailure",
    "StateHistory",
    "StateTransition",
    "TransitionContext",
    "TransitionResult",
    "TransitionRule",
]

S = TypeVar("S", bound=Hashable)
E = TypeVar("E", bound=Hashable)

#: Shared read-only mapping used as ``metadata`` when a transition is fired without any,
#: so that no empty dict is allocated per transition.
EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})


class AgentState(Enum):
    """The seed's default agent lifecycle states."""

    IDLE = "idle"
    PROCESSING = "processing"
    WAITING = "waiting"
    TOOL_CALL = "tool_call"
    ERROR = "error"
    COMPLETED = "completed"


class StateTransition(Enum):
    """The seed's default lifecycle events."""

    START_PROCESSING = "start_processing"
    AWAIT_INPUT = "await_input"
    CALL_TOOL = "call_tool"
    RECEIVE_RESULT = "receive_result"
    COMPLETE = "complete"
    FAIL = "fail"
    RECOVER = "recover"
    RESET = "reset"


@dataclass(frozen=True, slots=True)
class TransitionRule(Generic[S, E]):
    """``event`` moves the machine from ``from_state`` to ``to_state``.

    ``guard`` (optional) decides whether the rule applies; ``action`` (optional) runs
    after the exit hooks and before the state changes. Both may be sync or async and
    take either no argument or one :class:`TransitionContext`. Several rules may share
    a ``(from_state, event)`` pair: they are tried in registration order and the first
    whose guard passes (or that has no guard) wins.
    """

    from_state: S
    event: E
    to_state: S
    guard: Callable[..., object] | None = None
    action: Callable[..., object] | None = None


@dataclass(slots=True)
class TransitionContext(Generic[S, E]):
    """What a guard, action or enter/exit hook that takes one argument receives.

    ``metadata`` is the mapping passed to ``transition``/``fire`` (or an empty
    read-only mapping). ``target`` is the state the rule being evaluated leads to.
    """

    machine: AgentStateMachine[S, E]
    event: E
    source: S
    target: S
    metadata: Mapping[str, Any]


@dataclass(slots=True)
class StateHistory(Generic[S, E]):
    """One completed stay in a state (the seed's record, plus ``event`` and ``target``).

    ``state`` was entered at ``timestamp`` and left ``duration`` seconds later when
    ``event`` moved the machine to ``target``. ``metadata`` is the mapping given to the
    transition that left the state (stored by reference, not copied).
    """

    state: S
    timestamp: float
    duration: float
    metadata: Mapping[str, Any] = field(default_factory=lambda: EMPTY_METADATA)
    event: E | None = None
    target: S | None = None


@dataclass(slots=True)
class CallbackFailure:
    """A post-transition hook or callback that raised; the transition itself stands.

    ``phase`` is ``"enter"`` (an ``on_enter`` hook) or ``"callback"`` (a transition
    callback); ``callback`` is the callable's qualified name.
    """

    phase: str
    callback: str
    source: Any
    target: Any
    event: Any
    error: BaseException


@dataclass(slots=True)
class TransitionResult(Generic[S, E]):
    """A successful transition, as seen by listeners and returned by ``send``.

    ``timestamp`` is when the machine entered ``target``; ``duration`` is how long it
    stayed in ``source``. ``callback_errors`` lists failures of enter hooks and
    callbacks (empty when all succeeded; listeners see it before callbacks ran).
    """

    source: S
    target: S
    event: E
    metadata: Mapping[str, Any]
    timestamp: float
    duration: float
    callback_errors: tuple[CallbackFailure, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no enter hook or callback failed."""
        return not self.callback_errors
