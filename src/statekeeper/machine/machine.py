"""``AgentStateMachine``: the seed's state machine, made correct, typed and fast.

The transition algorithm is written once, in :meth:`AgentStateMachine._run`, as a
generator that *yields* every awaitable it meets (an async guard, action, hook or
callback). The async driver (``transition``/``send``) awaits what it yields and sends
the result back; the sync driver (``fire``/``send_sync``) never lets it yield: the
core raises :class:`~statekeeper.errors.AsyncRequired` instead, before any side effect
whenever the async callable is known at registration time.

Order of one transition::

    guards (rules in registration order; first that passes wins)
      -> on_exit(source) hooks -> rule action
      -> COMMIT (current state, history entry, running stats)
      -> on_enter(target) hooks -> listeners -> transition callbacks

Failures before the commit (guard, exit hook, action) abort the transition: the
state is unchanged, no history entry is written and the original exception propagates
unwrapped (with a note naming the step). Failures after the commit (enter hooks,
callbacks) never undo it: they are logged, collected in ``callback_errors`` and in
the :class:`TransitionResult`, and raised as :class:`~statekeeper.errors.CallbackError`
after all callbacks ran when ``raise_callback_errors=True``. Listener exceptions
propagate immediately (the persistence layer relies on it).

:class:`AgentStateMachine` is one class put together from parts of one job each:
defining it (:mod:`.definition`), what it is and has done (:mod:`.queries`), the
transition algorithm (:mod:`.running`), its sync and async drivers (:mod:`.drivers`)
and moving it without a transition for the persistence layer (:mod:`.persistence`);
this module keeps its slots, ``__init__``, checks and diagrams. Diagrams, validation,
loading and the rule types live in sibling modules.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from statekeeper.errors import InvalidMachineDefinition, UnknownEvent, UnknownState
from statekeeper.machine._callables import Hook
from statekeeper.machine._compiled import CallbackList, Edge, ValueNames, value_label
from statekeeper.machine.defaults import DEFAULT_INITIAL, DEFAULT_RULES, DEFAULT_STATES
from statekeeper.machine.types import (
    AgentState,
    CallbackFailure,
    StateHistory,
    StateTransition,
    TransitionResult,
    TransitionRule,
)

if TYPE_CHECKING:
    from statekeeper.machine.validate import ValidationReport
from statekeeper.machine.definition import E, S
from statekeeper.machine.drivers import _MachineDrivers
from statekeeper.machine.persistence import _MachinePersistence
from statekeeper.machine.running import GUARD_REJECTED, NO_RULE

__all__ = ["GUARD_REJECTED", "NO_RULE", "AgentStateMachine", "value_label"]


class AgentStateMachine(_MachineDrivers[S, E], _MachinePersistence[S, E]):
    """A finite state machine for an agent's lifecycle, sync or async.

    ``AgentStateMachine()`` is the seed's default lifecycle (6 :class:`AgentState`
    states, 11 rules, starting in ``IDLE``). ``AgentStateMachine(states=..., rules=...,
    initial=...)`` builds a custom machine; states and events may be Enum members,
    strings or any hashable values. ``defaults`` (default: only when neither ``states``
    nor ``rules`` is given) adds the default lifecycle to the custom definition.

    Options: ``strict`` (impossible transitions raise
    :class:`~statekeeper.errors.InvalidTransition` instead of returning ``False``),
    ``clock`` (called for every timestamp and duration), ``history_limit`` (entries
    kept in :attr:`history`; ``0`` disables history, ``None`` keeps all),
    ``raise_callback_errors``, ``callback_error_limit`` (size of
    :attr:`callback_errors`), ``final_states`` (not reported as dead ends by
    :meth:`validate`) and ``name`` (used in diagrams and logs).

    A machine is not thread-safe; concurrent asyncio tasks are serialized (a task
    waits while another task's transition awaits a guard, exit hook or action).
    """

    __slots__ = ()

    @overload
    def __init__(
        self: AgentStateMachine[AgentState, StateTransition],
        states: None = None,
        rules: None = None,
        initial: None = None,
        *,
        defaults: Literal[True] | None = None,
        final_states: Iterable[AgentState] = (),
        strict: bool = False,
        clock: Callable[[], float] = time.time,
        history_limit: int | None = 1000,
        raise_callback_errors: bool = False,
        callback_error_limit: int = 100,
        name: str = "AgentStateMachine",
    ) -> None: ...

    @overload
    def __init__(
        self,
        states: Iterable[S] | None = None,
        rules: Iterable[TransitionRule[S, E]] | None = None,
        initial: S | None = None,
        *,
        defaults: bool | None = None,
        final_states: Iterable[S] = (),
        strict: bool = False,
        clock: Callable[[], float] = time.time,
        history_limit: int | None = 1000,
        raise_callback_errors: bool = False,
        callback_error_limit: int = 100,
        name: str = "AgentStateMachine",
    ) -> None: ...

    def __init__(
        self,
        states: Iterable[Any] | None = None,
        rules: Iterable[TransitionRule[Any, Any]] | None = None,
        initial: Any = None,
        *,
        defaults: bool | None = None,
        final_states: Iterable[Any] = (),
        strict: bool = False,
        clock: Callable[[], float] = time.time,
        history_limit: int | None = 1000,
        raise_callback_errors: bool = False,
        callback_error_limit: int = 100,
        name: str = "AgentStateMachine",
    ) -> None:
        """Build the machine; see the class docstring for the options."""
        if history_limit is not None and history_limit < 0:
            raise InvalidMachineDefinition("history_limit must be >= 0 or None")
        if callback_error_limit < 0:
            raise InvalidMachineDefinition("callback_error_limit must be >= 0")
        use_defaults = defaults if defaults is not None else (states is None and rules is None)
        self.name = name
        self.strict = strict
        self.raise_callback_errors = raise_callback_errors
        self.state_data: dict[str, Any] = {}
        self._clock = clock
        self._states: list[S] = []
        self._index: dict[S, int] = {}
        self._state_names: ValueNames[S] = ValueNames("state", UnknownState)
        self._value_to_state = self._state_names.by_label
        self._state_to_value = self._state_names.to_label
        self._events: dict[E, None] = {}
        self._event_names: ValueNames[E] = ValueNames("event", UnknownEvent)
        self._value_to_event = self._event_names.by_label
        self._event_to_value = self._event_names.to_label
        self._out: dict[S, dict[E, tuple[Edge, ...]]] = {}
        self._rules: list[TransitionRule[S, E]] = []
        self._unguarded: dict[tuple[S, E], TransitionRule[S, E]] = {}
        self._enter: dict[S, list[Hook]] = {}
        self._exit: dict[S, list[Hook]] = {}
        self._hooks: dict[int, Hook] = {}
        self._callback_list = CallbackList(self._callbacks_changed)
        self._callbacks: tuple[Hook, ...] = ()
        self._listeners: tuple[Callable[[TransitionResult[S, E]], object], ...] = ()
        self._restore_checks: tuple[Callable[[S], object], ...] = ()
        self._counts: list[int] = []
        self._durations: list[float] = []
        self._total = 0
        self._total_duration = 0.0
        self._rejected = 0
        self._failure_count = 0
        self._history_on = history_limit != 0
        self._history: deque[StateHistory[S, E]] = deque(maxlen=history_limit)
        self._callback_errors: deque[CallbackFailure] = deque(maxlen=callback_error_limit)
        self._busy = False
        self._owner: asyncio.Task[Any] | None = None
        self._waiters: deque[asyncio.Future[None]] | None = None

        rule_list: list[TransitionRule[Any, Any]] = list(DEFAULT_RULES) if use_defaults else []
        rule_list.extend(rules or ())
        for rule in rule_list:
            if not isinstance(rule, TransitionRule):
                raise InvalidMachineDefinition(f"expected a TransitionRule, got {rule!r}")
        if use_defaults:
            self._add_states(cast("Iterable[S]", DEFAULT_STATES))
        if states is not None:
            self._add_states(states)
        else:
            inferred: list[Any] = [] if initial is None else [initial]
            for rule in rule_list:
                inferred += (rule.from_state, rule.to_state)
            self._add_states(s for s in inferred if s not in self._index)
        for rule in rule_list:
            self._add_rule(rule)
        if initial is None:
            if use_defaults:
                initial = DEFAULT_INITIAL
            elif self._states:
                initial = self._states[0]
            else:
                raise InvalidMachineDefinition("a machine needs at least one state")
        if initial not in self._index:
            raise InvalidMachineDefinition(
                f"initial state {initial!r} is not a state of the machine"
            )
        self._initial: S = self._canonical(initial)
        self._final: dict[S, None] = {}
        self.mark_final(*final_states)
        self._rebuild()
        self._current: S = self._initial
        self._current_out = self._out[self._initial]
        self._entered: float = clock()

    # ---------------------------------------------------------- checks & diagrams

    def validate(self, final_states: Iterable[S] = ()) -> ValidationReport[S]:
        """Report unreachable states (from :attr:`initial`) and dead ends (no outgoing rule).

        Final states (declared, or passed here) are not dead ends. Guards are ignored:
        reachability is structural.
        """
        from statekeeper.machine.validate import validate_machine

        return validate_machine(self, final_states)

    def to_mermaid(self) -> str:
        """The machine as a Mermaid ``stateDiagram-v2`` (guards shown as ``event [guard]``)."""
        from statekeeper.machine.diagram import to_mermaid

        return to_mermaid(self)

    def to_dot(self) -> str:
        """The machine as Graphviz DOT text (guards shown as ``event [guard]``)."""
        from statekeeper.machine.diagram import to_dot

        return to_dot(self)

    def __repr__(self) -> str:
        """``<AgentStateMachine 'name' state='value' transitions=N>``."""
        return (
            f"<{type(self).__name__} {self.name!r} state={self.state_value!r} "
            f"transitions={self._total}>"
        )
