"""Registration-time compilation: rules become :class:`Edge` objects for the hot path.

Everything the transition algorithm needs per rule (callables classified sync/async
and by arity, hooks resolved, async-ness of the whole path) is computed here once,
when a rule, hook or callback is registered, never per transition.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from enum import Enum
from typing import Any, Generic, SupportsIndex, TypeVar

from statekeeper.errors import InvalidMachineDefinition, MachineError
from statekeeper.machine._callables import Hook
from statekeeper.machine.types import TransitionRule

__all__ = ["CallbackList", "Edge", "ValueNames", "value_label"]

T = TypeVar("T", bound=Hashable)


def value_label(value: Hashable) -> str:
    """The stored/display string of a state or event.

    Enum members give their ``.value`` (``str()`` of it if not a string), strings are
    themselves, anything else gives ``str(value)``.
    """
    if isinstance(value, str):
        return value
    raw = getattr(value, "value", value)
    return raw if isinstance(raw, str) else str(raw)


class ValueNames(Generic[T]):
    """The stored strings of a machine's states (or events), both ways.

    ``by_label`` maps a stored string to the state or event, ``to_label`` the other
    way; ``kind`` ("state", "event") and ``error`` name them in what is raised."""

    __slots__ = ("a_kind", "by_label", "error", "kind", "to_label")

    def __init__(self, kind: str, error: type[MachineError]) -> None:
        self.kind = kind
        self.a_kind = f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
        self.error = error
        self.by_label: dict[str, T] = {}
        self.to_label: dict[T, str] = {}

    def add(self, value: T) -> None:
        """Record a new one under its stored string. Raises
        :class:`~statekeeper.errors.InvalidMachineDefinition` when another one already
        stores as that string."""
        label = value_label(value)
        other = self.by_label.get(label)
        if other is not None:
            raise InvalidMachineDefinition(
                f"{self.kind}s {other!r} and {value!r} share the stored value {label!r}"
            )
        self.by_label[label] = value
        self.to_label[value] = label

    def resolve(self, value: object, machine: str) -> T:
        """The registered one a stored string (or an equal object) stands for; else
        ``error`` naming the known values."""
        if isinstance(value, str):
            found = self.by_label.get(value)
            if found is not None:
                return found
        try:
            label = self.to_label.get(value)  # type: ignore[arg-type]
        except TypeError:
            label = None
        if label is not None:
            return self.by_label[label]
        known = ", ".join(repr(v) for v in self.by_label)
        raise self.error(f"{value!r} is not {self.a_kind} of {machine} (known: {known})", value)

    def stands_for(self, value: object) -> str | None:
        """A hint when ``value`` is not registered itself but is the stored string of
        one that is (``"start_processing"`` for ``StateTransition.START_PROCESSING``):
        the rules name the object, so the string matches none of them."""
        if not isinstance(value, str):
            return None
        found = self.by_label.get(value)
        if found is None or found == value:
            return None
        name = f"{type(found).__name__}.{found.name}" if isinstance(found, Enum) else repr(found)
        return f"{value!r} is the stored value of the {self.kind} {name}: fire {name} itself"


def _step(
    fn: Callable[..., object] | None, hook_for: Callable[[Callable[..., object]], Hook]
) -> tuple[Callable[..., object] | None, bool, bool, str]:
    """A rule's guard or action as the hot path reads it: the callable, whether it is
    async, whether it takes the context, its name ("" and False without one)."""
    if fn is None:
        return None, False, False, ""
    hook = hook_for(fn)
    return fn, hook.is_async, hook.takes_ctx, hook.name


class Edge:
    """A rule compiled for the hot path (callables classified, hooks resolved).

    ``target_out`` is the target state's (stable) outgoing table, so a commit switches
    tables without hashing the state; ``source_idx`` indexes the running statistics.
    """

    __slots__ = (
        "action",
        "action_async",
        "action_ctx",
        "action_name",
        "async_name",
        "enter_hooks",
        "exit_hooks",
        "guard",
        "guard_async",
        "guard_ctx",
        "guard_name",
        "has_async",
        "needs_ctx",
        "rule",
        "source_idx",
        "target",
        "target_out",
    )

    def __init__(
        self,
        rule: TransitionRule[Any, Any],
        *,
        target_out: dict[Any, tuple[Edge, ...]],
        source_idx: int,
        exit_hooks: Sequence[Hook],
        enter_hooks: Sequence[Hook],
        callbacks: Sequence[Hook],
        hook_for: Callable[[Callable[..., object]], Hook],
    ) -> None:
        self.rule = rule
        self.target = rule.to_state
        self.target_out = target_out
        self.source_idx = source_idx
        self.guard, self.guard_async, self.guard_ctx, self.guard_name = _step(rule.guard, hook_for)
        self.action, self.action_async, self.action_ctx, self.action_name = _step(
            rule.action, hook_for
        )
        self.exit_hooks: tuple[Hook, ...] = tuple(exit_hooks)
        self.enter_hooks: tuple[Hook, ...] = tuple(enter_hooks)
        self.needs_ctx = self.action_ctx or any(
            h.takes_ctx for h in (*self.exit_hooks, *self.enter_hooks)
        )
        async_names = [f"on_exit hook {h.name}" for h in self.exit_hooks if h.is_async]
        if self.action_async:
            async_names.append(f"action {self.action_name}")
        async_names += [f"on_enter hook {h.name}" for h in self.enter_hooks if h.is_async]
        async_names += [f"callback {h.name}" for h in callbacks if h.is_async]
        self.has_async = bool(async_names)
        self.async_name = async_names[0] if async_names else ""


class CallbackList(list[Callable[..., object]]):
    """``machine.transition_callbacks``: a list that recompiles the machine when mutated."""

    __slots__ = ("_on_change",)

    def __init__(self, on_change: Callable[[], None]) -> None:
        super().__init__()
        self._on_change = on_change

    def _changed(self) -> None:
        self._on_change()

    def append(self, fn: Callable[..., object]) -> None:
        """Register a callback (same as ``machine.add_callback``)."""
        super().append(fn)
        self._changed()

    def extend(self, fns: Iterable[Callable[..., object]]) -> None:
        """Register several callbacks."""
        super().extend(fns)
        self._changed()

    def insert(self, index: SupportsIndex, fn: Callable[..., object]) -> None:
        """Register a callback at ``index`` (callbacks run in list order)."""
        super().insert(index, fn)
        self._changed()

    def remove(self, fn: Callable[..., object]) -> None:
        """Unregister a callback."""
        super().remove(fn)
        self._changed()

    def pop(self, index: SupportsIndex = -1) -> Callable[..., object]:
        """Unregister and return the callback at ``index``."""
        fn = super().pop(index)
        self._changed()
        return fn

    def clear(self) -> None:
        """Unregister every callback."""
        super().clear()
        self._changed()

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._changed()

    def __delitem__(self, index: Any) -> None:
        super().__delitem__(index)
        self._changed()

    def __iadd__(self, fns: Iterable[Callable[..., object]]) -> CallbackList:  # type: ignore[override,misc]
        super().__iadd__(fns)
        self._changed()
        return self

    def __imul__(self, n: SupportsIndex) -> CallbackList:
        super().__imul__(n)
        self._changed()
        return self

    def sort(self, *args: Any, **kwargs: Any) -> None:
        """Reorder callbacks."""
        super().sort(*args, **kwargs)
        self._changed()

    def reverse(self) -> None:
        """Reverse the callback order."""
        super().reverse()
        self._changed()
