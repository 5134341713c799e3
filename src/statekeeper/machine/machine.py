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

Over 600 lines because :class:`AgentStateMachine` is one class whose parts (definition,
the transition algorithm, the sync and async drivers, introspection) share its private
rule tables and flags; the algorithm is written out in one method on purpose (the hot
path of every transition). Diagrams, validation, loading and the rule types live in
sibling modules.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Generator, Hashable, Iterable, Mapping
from inspect import isawaitable
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from statekeeper.errors import (
    AsyncRequired,
    CallbackError,
    InvalidMachineDefinition,
    InvalidTransition,
    MachineError,
    TransitionInProgress,
    UnknownEvent,
    UnknownState,
)
from statekeeper.machine._callables import Hook, discard_awaitable, is_async_callable
from statekeeper.machine._compiled import (
    CallbackList,
    Edge,
    ValueNames,
    value_label,
)
from statekeeper.machine.defaults import DEFAULT_INITIAL, DEFAULT_RULES, DEFAULT_STATES
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

if TYPE_CHECKING:
    from statekeeper.machine.validate import ValidationReport

__all__ = ["GUARD_REJECTED", "NO_RULE", "AgentStateMachine", "value_label"]

logger = logging.getLogger("statekeeper.machine")
_DEBUG = logging.DEBUG

S = TypeVar("S", bound=Hashable)
E = TypeVar("E", bound=Hashable)
F = TypeVar("F", bound=Callable[..., object])

#: ``InvalidTransition.reason`` when no rule matches (state, event).
NO_RULE = "no rule"
#: ``InvalidTransition.reason`` when rules exist but every guard refused.
GUARD_REJECTED = "guard rejected"

# Modes of the core generator.
_SYNC = 1  # never yield: raise AsyncRequired instead
_DRY = 2  # evaluate guards only (can_transition)
_WANT = 4  # always build a TransitionResult


class AgentStateMachine(Generic[S, E]):
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

    def add_restore_check(self, fn: Callable[[S], object]) -> Callable[[S], object]:
        """Call ``fn(state)`` before :meth:`restore` or :meth:`revert` sets the current
        state to ``state`` without a transition; an exception from it refuses the call
        (raised to its caller, the machine unchanged). What a durable agent uses to
        refuse a move of its machine that the store would not know of. Returns ``fn``."""
        if not callable(fn):
            raise TypeError(f"expected a callable, got {fn!r}")
        self._restore_checks = (*self._restore_checks, fn)
        return fn

    # ---------------------------------------------------------------- the algorithm

    def _run(
        self, event: E, metadata: Mapping[str, Any] | None, mode: int
    ) -> Generator[Any, Any, Any]:
        """The transition algorithm, shared by every driver.

        Yields awaitables (never in ``_SYNC`` mode). Returns ``None`` when the event is
        refused (non-strict), otherwise the :class:`TransitionResult` when one was built
        or ``True``; in ``_DRY`` mode returns whether the event could fire.
        """
        source = self._current
        edges = self._current_out.get(event)
        if edges is None:
            if mode & _DRY:
                return False
            return self._reject(source, event, NO_RULE)
        sync = mode & _SYNC
        dry = mode & _DRY
        if not dry:
            if self._busy:
                raise TransitionInProgress(source, event)
            self._busy = True
        md = EMPTY_METADATA if metadata is None else metadata
        ctx: TransitionContext[S, E] | None = None
        step = ""
        try:
            chosen: Edge | None = None
            for edge in edges:
                guard = edge.guard
                if guard is None:
                    chosen = edge
                    break
                step = "guard"
                if sync and edge.guard_async:
                    raise AsyncRequired(source, event, f"guard {edge.guard_name}")
                if edge.guard_ctx:
                    ctx = TransitionContext(self, event, source, edge.target, md)
                    ok = guard(ctx)
                else:
                    ok = guard()
                if ok is not True and ok is not False and (edge.guard_async or isawaitable(ok)):
                    if sync:
                        discard_awaitable(ok)
                        raise AsyncRequired(source, event, f"guard {edge.guard_name}")
                    ok = yield ok
                if ok:
                    chosen = edge
                    break
            if chosen is None:
                if dry:
                    return False
                return self._reject(source, event, GUARD_REJECTED)
            if dry:
                return True
            if sync and chosen.has_async:
                raise AsyncRequired(source, event, chosen.async_name)
            target = chosen.target
            if chosen.needs_ctx and (ctx is None or ctx.target is not target):
                ctx = TransitionContext(self, event, source, target, md)
            step = "exit"
            for hook in chosen.exit_hooks:
                res = hook.fn(ctx) if hook.takes_ctx else hook.fn()
                if res is not None and (hook.is_async or isawaitable(res)):
                    if sync:
                        discard_awaitable(res)
                        raise AsyncRequired(source, event, f"on_exit hook {hook.name}")
                    yield res
            action = chosen.action
            if action is not None:
                step = "action"
                res = action(ctx) if chosen.action_ctx else action()
                if res is not None and (chosen.action_async or isawaitable(res)):
                    if sync:
                        discard_awaitable(res)
                        raise AsyncRequired(source, event, f"action {chosen.action_name}")
                    yield res
            # ---- commit
            now = self._clock()
            entered = self._entered
            duration = now - entered
            if self._history_on:
                self._history.append(StateHistory(source, entered, duration, md, event, target))
            self._current = target
            self._current_out = chosen.target_out
            self._entered = now
            self._total += 1
            self._total_duration += duration
            idx = chosen.source_idx
            self._counts[idx] += 1
            self._durations[idx] += duration
        except Exception as exc:
            if step and not isinstance(exc, MachineError):
                self._annotate(exc, step, edges, chosen, source, event)
            raise
        finally:
            if not dry:
                self._busy = False
                if self._owner is not None:
                    self._owner = None
                if self._waiters:
                    self._wake_next()

        if logger.isEnabledFor(_DEBUG):
            logger.debug(
                "%s: %s -[%s]-> %s",
                self.name,
                value_label(source),
                value_label(event),
                value_label(target),
            )
        result: TransitionResult[S, E] | None = None
        if mode & _WANT or self._listeners:
            result = TransitionResult(source, target, event, md, now, duration)
        failures: list[CallbackFailure] | None = None
        for hook in chosen.enter_hooks:
            try:
                res = hook.fn(ctx) if hook.takes_ctx else hook.fn()
                if res is not None and (hook.is_async or isawaitable(res)):
                    if sync:
                        discard_awaitable(res)
                        raise AsyncRequired(source, event, f"on_enter hook {hook.name}")
                    yield res
            except Exception as exc:
                failures = self._failed(failures, "enter", hook, source, target, event, exc)
        if self._listeners:
            if failures is not None and result is not None:
                result.callback_errors = tuple(failures)
            for listener in self._listeners:
                listener(cast("TransitionResult[S, E]", result))
        for cb in self._callbacks:
            try:
                res = cb.fn(source, target, event)
                if res is not None and (cb.is_async or isawaitable(res)):
                    if sync:
                        discard_awaitable(res)
                        raise AsyncRequired(source, event, f"callback {cb.name}")
                    yield res
            except Exception as exc:
                failures = self._failed(failures, "callback", cb, source, target, event, exc)
        if failures is not None:
            errors = tuple(failures)
            if result is None:
                result = TransitionResult(source, target, event, md, now, duration, errors)
            else:
                result.callback_errors = errors
            if self.raise_callback_errors:
                raise CallbackError(
                    f"{len(errors)} callback(s) failed after {value_label(source)} "
                    f"-[{value_label(event)}]-> {value_label(target)}: "
                    + ", ".join(f"{f.callback}: {f.error!r}" for f in errors),
                    [f.error for f in errors],
                ) from errors[0].error
        return True if result is None else result

    def _reject(self, source: S, event: E, reason: str) -> None:
        self._rejected += 1
        if self.strict:
            error = InvalidTransition(source, event, reason)
            hint = self.event_hint(event)
            if hint is not None:
                error.add_note(hint)
            raise error
        if logger.isEnabledFor(_DEBUG):
            logger.debug(
                "%s: %r refused in state %r: %s",
                self.name,
                value_label(event),
                value_label(source),
                reason,
            )
        return None

    @staticmethod
    def _annotate(
        exc: BaseException,
        step: str,
        edges: tuple[Edge, ...],
        chosen: Edge | None,
        source: Hashable,
        event: Hashable,
    ) -> None:
        where = f"{value_label(event)!r} from {value_label(source)!r}"
        if step == "guard":
            names = ", ".join(e.guard_name for e in edges if e.guard is not None)
            what = f"a guard ({names})"
        elif step == "exit":
            what = "an on_exit hook"
        else:
            what = f"the action {chosen.action_name if chosen else ''}"
        exc.add_note(f"statekeeper: {what} failed while firing {where}; state unchanged")

    def _failed(
        self,
        failures: list[CallbackFailure] | None,
        phase: str,
        hook: Hook,
        source: S,
        target: S,
        event: E,
        exc: Exception,
    ) -> list[CallbackFailure]:
        failure = CallbackFailure(phase, hook.name, source, target, event, exc)
        self._failure_count += 1
        self._callback_errors.append(failure)
        kind = "on_enter hook" if phase == "enter" else "transition callback"
        logger.error(
            "%s: %s %s failed after %s -[%s]-> %s: %r",
            self.name,
            kind,
            hook.name,
            value_label(source),
            value_label(event),
            value_label(target),
            exc,
            exc_info=exc,
            extra={
                "machine": self.name,
                "state": value_label(target),
                "source": value_label(source),
                "event": value_label(event),
                "callback": hook.name,
                "phase": phase,
            },
        )
        exc.add_note(
            f"statekeeper: {kind} {hook.name} failed after {value_label(source)} "
            f"-[{value_label(event)}]-> {value_label(target)} (the transition stands)"
        )
        if failures is None:
            failures = []
        failures.append(failure)
        return failures

    # ------------------------------------------------------------------- drivers

    def fire(self, event: E, metadata: Mapping[str, Any] | None = None) -> bool:
        """Fire ``event`` synchronously; True if the machine moved.

        Raises :class:`~statekeeper.errors.AsyncRequired` (state unchanged) when the
        transition would need an async guard, action, hook or callback.
        """
        gen = self._run(event, metadata, _SYNC)
        try:
            gen.send(None)
        except StopIteration as stop:
            return stop.value is not None
        gen.close()  # pragma: no cover - the core never yields in sync mode
        raise AssertionError("sync transition yielded")  # pragma: no cover

    def send_sync(
        self, event: E, metadata: Mapping[str, Any] | None = None
    ) -> TransitionResult[S, E] | None:
        """Like :meth:`fire`, but return the :class:`TransitionResult` (``None`` if refused)."""
        gen = self._run(event, metadata, _SYNC | _WANT)
        try:
            gen.send(None)
        except StopIteration as stop:
            return cast("TransitionResult[S, E] | None", stop.value)
        gen.close()  # pragma: no cover
        raise AssertionError("sync transition yielded")  # pragma: no cover

    async def transition(self, event: E, metadata: Mapping[str, Any] | None = None) -> bool:
        """Fire ``event``; True if the machine moved, False if refused (non-strict mode).

        Guards, actions, hooks and callbacks may be sync or async.
        """
        if self._busy:
            await self._wait_turn(event)
        gen = self._run(event, metadata, 0)
        try:
            awaitable = gen.send(None)
        except StopIteration as stop:
            return stop.value is not None
        return (await self._resume(gen, awaitable)) is not None

    async def send(
        self, event: E, metadata: Mapping[str, Any] | None = None
    ) -> TransitionResult[S, E] | None:
        """Like :meth:`transition`, but return the :class:`TransitionResult`.

        Returns ``None`` when the event is refused (non-strict mode).
        """
        if self._busy:
            await self._wait_turn(event)
        gen = self._run(event, metadata, _WANT)
        try:
            awaitable = gen.send(None)
        except StopIteration as stop:
            return cast("TransitionResult[S, E] | None", stop.value)
        return cast("TransitionResult[S, E] | None", await self._resume(gen, awaitable))

    def can_transition(self, event: E) -> bool:
        """True if ``event`` would fire now (sync guards evaluated; nothing runs or changes).

        Raises :class:`~statekeeper.errors.AsyncRequired` if a guard is async; use
        :meth:`can_transition_async` then.
        """
        gen = self._run(event, None, _SYNC | _DRY)
        try:
            gen.send(None)
        except StopIteration as stop:
            return bool(stop.value)
        gen.close()  # pragma: no cover
        raise AssertionError("sync check yielded")  # pragma: no cover

    async def can_transition_async(self, event: E) -> bool:
        """Like :meth:`can_transition`, awaiting async guards."""
        gen = self._run(event, None, _DRY)
        try:
            awaitable = gen.send(None)
        except StopIteration as stop:
            return bool(stop.value)
        return bool(await self._resume(gen, awaitable, owns=False))

    async def _resume(
        self, gen: Generator[Any, Any, Any], awaitable: Any, owns: bool = True
    ) -> Any:
        """Drive ``gen`` to completion, awaiting what it yields (the async driver's loop).

        ``owns``: the generator holds the machine's busy flag while it is before its
        commit; the current task is then recorded so a re-entrant call is detected.
        """
        while True:
            if owns and self._busy:
                self._owner = asyncio.current_task()
            try:
                value = await awaitable
            except BaseException as exc:  # includes cancellation: the core releases the machine
                try:
                    awaitable = gen.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    awaitable = gen.send(value)
                except StopIteration as stop:
                    return stop.value

    async def _wait_turn(self, event: E) -> None:
        task = asyncio.current_task()
        while self._busy:
            if task is not None and task is self._owner:
                raise TransitionInProgress(self._current, event)
            if self._waiters is None:
                self._waiters = deque()
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._wake_next()  # we were handed the turn: pass it on
                raise

    def _wake_next(self) -> None:
        waiters = self._waiters
        while waiters:
            future = waiters.popleft()
            if not future.done():
                future.set_result(None)
                return

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
