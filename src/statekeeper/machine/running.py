"""The transition algorithm of a state machine, written once as a generator that
*yields* every awaitable it meets (see :mod:`statekeeper.machine.machine` for the order
of one transition and what a failure at each step does), with its refusals, failure
notes and the hand-over of the machine to the next waiting task."""

from __future__ import annotations

import logging
from collections.abc import Generator, Hashable, Mapping
from inspect import isawaitable
from typing import Any, cast

from statekeeper.errors import (
    AsyncRequired,
    CallbackError,
    InvalidTransition,
    MachineError,
    TransitionInProgress,
)
from statekeeper.machine._callables import Hook, discard_awaitable
from statekeeper.machine._compiled import Edge, value_label
from statekeeper.machine.definition import E, S
from statekeeper.machine.queries import _MachineQueries
from statekeeper.machine.types import (
    EMPTY_METADATA,
    CallbackFailure,
    StateHistory,
    TransitionContext,
    TransitionResult,
)

__all__ = ["GUARD_REJECTED", "NO_RULE"]

logger = logging.getLogger("statekeeper.machine")
_DEBUG = logging.DEBUG

#: ``InvalidTransition.reason`` when no rule matches (state, event).
NO_RULE = "no rule"
#: ``InvalidTransition.reason`` when rules exist but every guard refused.
GUARD_REJECTED = "guard rejected"

# Modes of the core generator.
_SYNC = 1  # never yield: raise AsyncRequired instead
_DRY = 2  # evaluate guards only (can_transition)
_WANT = 4  # always build a TransitionResult


class _MachineRunning(_MachineQueries[S, E]):
    """The transition algorithm (:meth:`_run`), shared by every driver."""

    __slots__ = ()

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
                    # (self is the AgentStateMachine this part is a base of)
                    ctx = TransitionContext(self, event, source, edge.target, md)  # type: ignore[arg-type]
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
                ctx = TransitionContext(self, event, source, target, md)  # type: ignore[arg-type]
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

    def _wake_next(self) -> None:
        waiters = self._waiters
        while waiters:
            future = waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
