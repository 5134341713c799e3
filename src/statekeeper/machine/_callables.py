"""Classify user callables once, at registration, so the hot path never calls ``inspect``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["Hook", "callable_name", "discard_awaitable", "is_async_callable", "takes_argument"]

_POSITIONAL = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.VAR_POSITIONAL,
)


def is_async_callable(fn: Callable[..., object]) -> bool:
    """True for coroutine functions, partials of them and objects with ``async __call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn):
        return False
    call = type(fn).__dict__.get("__call__") or getattr(type(fn), "__call__", None)  # noqa: B004
    return call is not None and inspect.iscoroutinefunction(call)


def takes_argument(fn: Callable[..., object]) -> bool:
    """True when ``fn`` needs a positional argument (it then receives the context).

    A parameter with a default does not count, so the loop idiom ``lambda x=x: ...``
    is a zero-argument callable; ``*args`` counts. Callables whose signature cannot be
    read are assumed to take the context.
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in _POSITIONAL
        and (p.kind is inspect.Parameter.VAR_POSITIONAL or p.default is inspect.Parameter.empty)
        for p in sig.parameters.values()
    )


def callable_name(fn: Callable[..., object]) -> str:
    """A readable name for logs, errors and diagrams (``<lambda>`` for lambdas)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        func = getattr(fn, "func", None)  # functools.partial
        if func is not None:
            return callable_name(func)
        name = type(fn).__qualname__
    return str(name)


def discard_awaitable(value: Any) -> None:
    """Close an un-awaited coroutine so Python does not warn that it was never awaited."""
    close = getattr(value, "close", None)
    if inspect.iscoroutine(value) and close is not None:
        close()


class Hook:
    """A registered callable with its cached classification."""

    __slots__ = ("fn", "is_async", "name", "takes_ctx")

    def __init__(self, fn: Callable[..., object], *, takes_ctx: bool | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"expected a callable, got {fn!r}")
        self.fn = fn
        self.is_async = is_async_callable(fn)
        self.takes_ctx = takes_argument(fn) if takes_ctx is None else takes_ctx
        self.name = callable_name(fn)

    def __repr__(self) -> str:
        kind = "async" if self.is_async else "sync"
        return f"<Hook {self.name} {kind}{' ctx' if self.takes_ctx else ''}>"
