"""What a state machine is and has done: its current state, states, events, rules,
listeners, history, stored values of states and events, state data and running
statistics (:class:`~statekeeper.machine.AgentStateMachine`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from statekeeper.errors import UnknownState
from statekeeper.machine.definition import E, S, _MachineDefinition
from statekeeper.machine.types import (
    CallbackFailure,
    StateHistory,
    TransitionResult,
    TransitionRule,
)

__all__: list[str] = []


class _MachineQueries(_MachineDefinition[S, E]):
    """Introspection, state data and statistics of a machine."""

    __slots__ = ()

    # ------------------------------------------------------------- introspection

    @property
    def current_state(self) -> S:
        """The state the machine is in."""
        return self._current

    @property
    def state_value(self) -> str:
        """The current state as a string: Enum ``.value``, the string itself, else ``str()``."""
        return self._state_to_value[self._current]

    @property
    def state_entry_time(self) -> float:
        """Clock time at which the current state was entered (or restored)."""
        return self._entered

    @property
    def initial(self) -> S:
        """The initial state."""
        return self._initial

    @property
    def final_states(self) -> tuple[S, ...]:
        """States declared final (see :meth:`mark_final`)."""
        return tuple(self._final)

    @property
    def is_final(self) -> bool:
        """True when the current state is declared final."""
        return self._current in self._final

    @property
    def clock(self) -> Callable[[], float]:
        """The clock used for every timestamp and duration."""
        return self._clock

    @property
    def states(self) -> tuple[S, ...]:
        """All states, in declaration order."""
        return tuple(self._states)

    @property
    def events(self) -> tuple[E, ...]:
        """All events that appear in a rule, in first-use order."""
        return tuple(self._events)

    @property
    def rules(self) -> tuple[TransitionRule[S, E], ...]:
        """All rules, in registration order (the order guards are tried in)."""
        return tuple(self._rules)

    def rules_from(self, state: S) -> tuple[TransitionRule[S, E], ...]:
        """Rules whose ``from_state`` is ``state``, in registration order."""
        out = self._out.get(state)
        if out is None:
            raise UnknownState(f"unknown state {state!r}", state)
        return tuple(edge.rule for edges in out.values() for edge in edges)

    def available_events(self) -> tuple[E, ...]:
        """Events that have a rule from the current state (guards are not evaluated)."""
        return tuple(self._current_out)

    @property
    def listeners(self) -> tuple[Callable[[TransitionResult[S, E]], object], ...]:
        """Registered listeners, in call order."""
        return self._listeners

    @property
    def history(self) -> list[StateHistory[S, E]]:
        """A copy of the recorded history, oldest first (at most ``history_limit`` entries)."""
        return list(self._history)

    @property
    def state_history(self) -> list[StateHistory[S, E]]:
        """The seed's name for :attr:`history`."""
        return list(self._history)

    @property
    def history_limit(self) -> int | None:
        """Maximum number of history entries kept (``None``: unbounded, ``0``: disabled)."""
        return self._history.maxlen

    @property
    def callback_errors(self) -> deque[CallbackFailure]:
        """The most recent enter-hook and callback failures (bounded; oldest dropped first)."""
        return self._callback_errors

    @property
    def total_transitions(self) -> int:
        """Number of successful transitions since the machine was built."""
        return self._total

    def state_for(self, value: str | S) -> S:
        """Resolve a stored state value (``state_value`` format) or a state to the state object.

        Raises :class:`~statekeeper.errors.UnknownState` for values of no state.
        """
        return self._state_names.resolve(value, self.name)

    def event_for(self, value: str | E) -> E:
        """Resolve a stored event value (Enum ``.value`` or the string) to the event object.

        Raises :class:`~statekeeper.errors.UnknownEvent` for values of no event.
        """
        return self._event_names.resolve(value, self.name)

    def event_hint(self, event: object) -> str | None:
        """Why ``event`` may match no rule though it looks right: it is the stored
        string of a registered event object (an Enum's ``.value``); else None."""
        return self._event_names.stands_for(event)

    def event_value(self, event: E) -> str:
        """The stored string of an event (Enum ``.value`` or the string itself)."""
        return self._event_to_value[self.event_for(event)]

    # ------------------------------------------------------------ data and stats

    def set_state_data(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key`` in :attr:`state_data` (free-form agent data)."""
        self.state_data[key] = value

    def get_state_data(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default``."""
        return self.state_data.get(key, default)

    def get_state_duration(self) -> float:
        """Seconds (per the clock) spent in the current state so far."""
        return self._clock() - self._entered

    def get_stats(self) -> dict[str, Any]:
        """Exact running statistics (not limited by ``history_limit``).

        Seed keys: ``current_state`` (its value string), ``state_counts`` (times each
        state was left), ``total_transitions``, ``total_duration`` (seconds spent in left
        states), ``avg_state_duration``. Added: ``state_durations`` (seconds per state),
        ``current_state_duration``, ``rejected_transitions``, ``callback_errors`` (total
        count), ``history_length``.
        """
        labels = self._state_to_value
        states = self._states
        total = self._total
        return {
            "current_state": labels[self._current],
            "state_counts": {labels[s]: n for s, n in zip(states, self._counts, strict=True) if n},
            "total_transitions": total,
            "total_duration": self._total_duration,
            "avg_state_duration": self._total_duration / total if total else 0.0,
            "state_durations": {
                labels[s]: d
                for s, d, n in zip(states, self._durations, self._counts, strict=True)
                if n
            },
            "current_state_duration": self.get_state_duration(),
            "rejected_transitions": self._rejected,
            "callback_errors": self._failure_count,
            "history_length": len(self._history),
        }
