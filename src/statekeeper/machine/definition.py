"""Defining a state machine: its states, rules (checked as they are added), final
states, enter and exit hooks, callbacks and listeners, compiled into the edge tables
the transition algorithm reads (:class:`~statekeeper.machine.AgentStateMachine`)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar, overload

from statekeeper.errors import InvalidMachineDefinition
from statekeeper.machine._callables import Hook, is_async_callable
from statekeeper.machine._compiled import CallbackList, Edge, ValueNames, value_label
from statekeeper.machine.types import (
    CallbackFailure,
    StateHistory,
    TransitionResult,
    TransitionRule,
)

__all__: list[str] = []

S = TypeVar("S", bound=Hashable)
E = TypeVar("E", bound=Hashable)
F = TypeVar("F", bound=Callable[..., object])


class _MachineDefinition(Generic[S, E]):
    """Declaring an :class:`~statekeeper.machine.AgentStateMachine`'s states, rules,
    hooks, callbacks and listeners (the root of its parts: the instance attributes they
    share are declared here, with their slots; ``__init__`` is the machine's own)."""

    __slots__ = (
        "__weakref__",
        "_busy",
        "_callback_errors",
        "_callback_list",
        "_callbacks",
        "_clock",
        "_counts",
        "_current",
        "_current_out",
        "_durations",
        "_enter",
        "_entered",
        "_event_names",
        "_event_to_value",
        "_events",
        "_exit",
        "_failure_count",
        "_final",
        "_history",
        "_history_on",
        "_hooks",
        "_index",
        "_initial",
        "_listeners",
        "_out",
        "_owner",
        "_rejected",
        "_restore_checks",
        "_rules",
        "_state_names",
        "_state_to_value",
        "_states",
        "_total",
        "_total_duration",
        "_unguarded",
        "_value_to_event",
        "_value_to_state",
        "_waiters",
        "name",
        "raise_callback_errors",
        "state_data",
        "strict",
    )

    name: str
    strict: bool
    raise_callback_errors: bool
    state_data: dict[str, Any]
    _clock: Callable[[], float]
    _states: list[S]
    _index: dict[S, int]
    _state_names: ValueNames[S]
    _value_to_state: dict[str, S]
    _state_to_value: dict[S, str]
    _events: dict[E, None]
    _event_names: ValueNames[E]
    _value_to_event: dict[str, E]
    _event_to_value: dict[E, str]
    _out: dict[S, dict[E, tuple[Edge, ...]]]
    _rules: list[TransitionRule[S, E]]
    _unguarded: dict[tuple[S, E], TransitionRule[S, E]]
    _enter: dict[S, list[Hook]]
    _exit: dict[S, list[Hook]]
    _hooks: dict[int, Hook]
    _callback_list: CallbackList
    _callbacks: tuple[Hook, ...]
    _listeners: tuple[Callable[[TransitionResult[S, E]], object], ...]
    _restore_checks: tuple[Callable[[S], object], ...]
    _counts: list[int]
    _durations: list[float]
    _total: int
    _total_duration: float
    _rejected: int
    _failure_count: int
    _history_on: bool
    _history: deque[StateHistory[S, E]]
    _callback_errors: deque[CallbackFailure]
    _busy: bool
    _owner: asyncio.Task[Any] | None
    _waiters: deque[asyncio.Future[None]] | None
    _initial: S
    _final: dict[S, None]
    _current: S
    _current_out: dict[E, tuple[Edge, ...]]
    _entered: float

    # ------------------------------------------------------------------ definition

    def _canonical(self, state: Any) -> S:
        return self._states[self._index[state]]

    def _add_states(self, states: Iterable[Any]) -> None:
        for state in states:
            if state in self._index:
                continue
            try:
                hash(state)
            except TypeError:
                raise InvalidMachineDefinition(f"state {state!r} is not hashable") from None
            self._state_names.add(state)
            self._index[state] = len(self._states)
            self._states.append(state)
            self._out[state] = {}
            self._counts.append(0)
            self._durations.append(0.0)

    def add_state(self, *states: S) -> None:
        """Declare new states (already known states are ignored)."""
        self._add_states(states)

    def mark_final(self, *states: S) -> None:
        """Declare final states: :meth:`validate` does not report them as dead ends."""
        for state in states:
            if state not in self._index:
                raise InvalidMachineDefinition(
                    f"final state {state!r} is not a state of the machine"
                )
            self._final[self._canonical(state)] = None

    def _add_rule(self, rule: TransitionRule[Any, Any]) -> None:
        if not isinstance(rule, TransitionRule):
            raise InvalidMachineDefinition(f"expected a TransitionRule, got {rule!r}")
        for state in (rule.from_state, rule.to_state):
            if state not in self._index:
                raise InvalidMachineDefinition(
                    f"rule {self._describe(rule)} uses unknown state {state!r}; "
                    "declare it in states= or with add_state()"
                )
        for fn in (rule.guard, rule.action):
            if fn is not None and not callable(fn):
                raise InvalidMachineDefinition(
                    f"rule {self._describe(rule)}: {fn!r} is not callable"
                )
        event = rule.event
        try:
            hash(event)
        except TypeError:
            raise InvalidMachineDefinition(f"event {event!r} is not hashable") from None
        key = (rule.from_state, event)
        existing = self._unguarded.get(key)
        if existing is not None:
            raise InvalidMachineDefinition(
                f"rule {self._describe(rule)} can never fire: the earlier rule "
                f"{self._describe(existing)} has no guard and always wins"
            )
        if event not in self._events:
            self._event_names.add(event)
            self._events[event] = None
        if rule.guard is None:
            self._unguarded[key] = rule
        self._rules.append(rule)

    @staticmethod
    def _describe(rule: TransitionRule[Any, Any]) -> str:
        return (
            f"{value_label(rule.from_state)} -[{value_label(rule.event)}]-> "
            f"{value_label(rule.to_state)}"
        )

    def add_transition(self, rule: TransitionRule[S, E]) -> None:
        """Add a rule. Its states must be known; a rule after an unguarded one for the same
        ``(from_state, event)`` is rejected (it could never fire)."""
        self._add_rule(rule)
        out = self._out[rule.from_state]
        out[rule.event] = (*out.get(rule.event, ()), self._compile(rule))

    def _compile(self, rule: TransitionRule[S, E]) -> Edge:
        return Edge(
            rule,
            target_out=self._out[rule.to_state],
            source_idx=self._index[rule.from_state],
            exit_hooks=self._exit.get(rule.from_state, ()),
            enter_hooks=self._enter.get(rule.to_state, ()),
            callbacks=self._callbacks,
            hook_for=self._hook,
        )

    def _hook(self, fn: Callable[..., object]) -> Hook:
        hook = self._hooks.get(id(fn))
        if hook is None or hook.fn is not fn:
            hook = self._hooks[id(fn)] = Hook(fn)
        return hook

    def _rebuild(self) -> None:
        grouped: dict[S, dict[E, list[Edge]]] = {}
        for rule in self._rules:
            edge = self._compile(rule)
            grouped.setdefault(rule.from_state, {}).setdefault(rule.event, []).append(edge)
        for state, out in self._out.items():
            out.clear()  # per-state dicts are kept: compiled edges point at them
            for event, edges in grouped.get(state, {}).items():
                out[event] = tuple(edges)

    def _callbacks_changed(self) -> None:
        self._callbacks = tuple(Hook(fn) for fn in self._callback_list)
        self._rebuild()

    @overload
    def on_enter(self, state: S, fn: None = None) -> Callable[[F], F]: ...
    @overload
    def on_enter(self, state: S, fn: F) -> F: ...
    def on_enter(self, state: S, fn: F | None = None) -> F | Callable[[F], F]:
        """Run ``fn`` each time the machine enters ``state`` (also usable as a decorator).

        ``fn`` may be sync or async and takes no argument or a :class:`TransitionContext`.
        It runs after the state changed; its errors are collected like callback errors.
        """
        return self._register_hook(self._enter, state, fn)

    @overload
    def on_exit(self, state: S, fn: None = None) -> Callable[[F], F]: ...
    @overload
    def on_exit(self, state: S, fn: F) -> F: ...
    def on_exit(self, state: S, fn: F | None = None) -> F | Callable[[F], F]:
        """Run ``fn`` each time the machine leaves ``state`` (also usable as a decorator).

        ``fn`` may be sync or async and takes no argument or a :class:`TransitionContext`.
        It runs before the rule's action; an error aborts the transition.
        """
        return self._register_hook(self._exit, state, fn)

    def _register_hook(
        self, table: dict[S, list[Hook]], state: S, fn: F | None
    ) -> F | Callable[[F], F]:
        if state not in self._index:
            raise InvalidMachineDefinition(f"unknown state {state!r}")

        def register(func: F) -> F:
            table.setdefault(self._canonical(state), []).append(Hook(func))
            self._rebuild()
            return func

        return register if fn is None else register(fn)

    def add_callback(self, fn: F) -> F:
        """Call ``fn(old_state, new_state, event)`` after every transition (sync or async).

        Returns ``fn`` so it can be used as a decorator. Errors are logged and collected,
        never swallowed silently.
        """
        self._callback_list.append(fn)
        return fn

    def remove_callback(self, fn: Callable[..., object]) -> None:
        """Unregister a callback added with :meth:`add_callback`."""
        self._callback_list.remove(fn)

    @property
    def transition_callbacks(self) -> list[Callable[..., object]]:
        """The registered callbacks, in call order. Mutating this list updates the machine."""
        return self._callback_list

    @transition_callbacks.setter
    def transition_callbacks(self, fns: Iterable[Callable[..., object]]) -> None:
        if fns is self._callback_list:
            return
        items = list(fns)
        list.clear(self._callback_list)
        list.extend(self._callback_list, items)
        self._callbacks_changed()

    def add_listener(
        self, fn: Callable[[TransitionResult[S, E]], object]
    ) -> Callable[[TransitionResult[S, E]], object]:
        """Call ``fn(result)`` synchronously after every successful transition.

        Listeners run after the enter hooks and before the callbacks; their exceptions
        propagate to the caller of ``transition``/``fire`` (the state has already changed)
        and the remaining listeners and callbacks are skipped. Returns ``fn``.
        """
        if is_async_callable(fn):
            raise TypeError("listeners must be synchronous; use add_callback for async code")
        if not callable(fn):
            raise TypeError(f"expected a callable, got {fn!r}")
        self._listeners = (*self._listeners, fn)
        return fn

    def remove_listener(self, fn: Callable[[TransitionResult[S, E]], object]) -> None:
        """Unregister a listener added with :meth:`add_listener`."""
        listeners = list(self._listeners)
        listeners.remove(fn)
        self._listeners = tuple(listeners)
