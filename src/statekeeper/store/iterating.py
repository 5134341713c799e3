"""Driving an async iterator from sync code, one item per blocking call (the sync faces:
:class:`~.portal.Portal`, :class:`~.shared_loop.SharedLoop`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["iterate_with", "next_item"]

T = TypeVar("T")


async def next_item(agen: AsyncIterator[T]) -> tuple[bool, T | None]:
    """One step of ``agen``, to run on its own loop: ``(True, item)``, or
    ``(False, None)`` once it is exhausted."""
    try:
        return True, await agen.__anext__()
    except StopAsyncIteration:
        return False, None


def iterate_with(
    call: Callable[[Coroutine[Any, Any, tuple[bool, Any]]], tuple[bool, Any]],
    agen: AsyncIterator[T],
) -> Iterator[T]:
    """Drive ``agen`` from sync code through ``call`` (a portal's or a shared loop's
    ``call``), one item per call; the async iterator never leaves its loop."""
    while True:
        more, item = call(next_item(agen))
        if not more:
            return
        yield item
