"""Moving a state machine without a transition, for the persistence layer: set the
state read back from the store (:meth:`restore`), take back a transition whose durable
append failed (:meth:`revert`), and the checks that may refuse either
(:class:`~statekeeper.machine.AgentStateMachine`)."""

from __future__ import annotations

from collections.abc import Callable

from statekeeper.errors import MachineError, TransitionInProgress
from statekeeper.machine._compiled import value_label
from statekeeper.machine.definition import E, S
from statekeeper.machine.queries import _MachineQueries
from statekeeper.machine.types import TransitionResult

__all__: list[str] = []


class _MachinePersistence(_MachineQueries[S, E]):
    """Restoring and reverting a machine's state."""

    __slots__ = ()

    def add_restore_check(self, fn: Callable[[S], object]) -> Callable[[S], object]:
        """Call ``fn(state)`` before :meth:`restore` or :meth:`revert` sets the current
        state to ``state`` without a transition; an exception from it refuses the call
        (raised to its caller, the machine unchanged). What a durable agent uses to
        refuse a move of its machine that the store would not know of. Returns ``fn``."""
        if not callable(fn):
            raise TypeError(f"expected a callable, got {fn!r}")
        self._restore_checks = (*self._restore_checks, fn)
        return fn

    def restore(self, state_value: str | S, entered_at: float | None = None) -> S:
        """Set the current state without running guards, hooks, actions or listeners.

        For the persistence layer: ``state_value`` is a stored :attr:`state_value` (or a
        state); ``entered_at`` (default: now, per the machine's clock) becomes
        :attr:`state_entry_time`. History and statistics are not touched. Raises
        :class:`~statekeeper.errors.UnknownState` for unknown values, and what a check
        added with :meth:`add_restore_check` raises (nothing changed). Returns the state.
        """
        state = self.state_for(state_value)
        if self._busy:
            raise TransitionInProgress(self._current)
        for check in self._restore_checks:
            check(state)
        self._current = state
        self._current_out = self._out[state]
        self._entered = self._clock() if entered_at is None else entered_at
        return state

    def revert(self, result: TransitionResult[S, E]) -> S:
        """Undo the latest transition, described by its ``result``.

        For the persistence layer: when the durable append of a transition fails, the
        machine goes back to ``result.source`` with its entry time, and the history
        entry and statistics the transition added are taken back, as if it had never
        fired. Hooks, actions and callbacks that already ran are not undone. Raises
        :class:`~statekeeper.errors.MachineError` when ``result`` is not the latest
        transition (the machine is no longer in ``result.target``), and what a check
        added with :meth:`add_restore_check` raises (nothing changed).
        """
        if self._busy:
            raise TransitionInProgress(self._current)
        if self._current != result.target:
            raise MachineError(
                f"cannot revert {value_label(result.event)!r}: the machine is in "
                f"{value_label(self._current)!r}, not {value_label(result.target)!r}"
            )
        for check in self._restore_checks:
            check(result.source)
        entered = result.timestamp - result.duration
        history = self._history
        if history:
            last = history[-1]
            if last.event == result.event and last.target == result.target:
                history.pop()
        self._total -= 1
        self._total_duration -= result.duration
        idx = self._index[result.source]
        self._counts[idx] -= 1
        self._durations[idx] -= result.duration
        self._current = result.source
        self._current_out = self._out[result.source]
        self._entered = entered
        return result.source
