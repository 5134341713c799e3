"""Work in a thread that a cancellation does not leave running.

``await asyncio.to_thread(fn)`` cancelled (an asyncio cancel, a caller's timeout,
Ctrl-C under ``asyncio.run``) raises at once while the thread goes on: the caller's
``finally`` then closes what the thread still uses (a file it writes, a descriptor it
reads, a connection). :func:`run_joined` asks the thread to stop and waits for it
before the cancellation goes on (a backup's threads: ``governance/backup/joined.py``;
PostgreSQL's ``COPY`` out, ``backends/postgres/export.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["run_joined", "run_owned"]

T = TypeVar("T")


async def run_joined(stop: Callable[[], None], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread, as ``asyncio.to_thread``; cancelled, ``stop()`` is
    called (it makes ``fn`` return or raise soon: a page backup's after the chunk in
    hand) and the thread is waited for, then the cancellation raised. A further
    cancellation meanwhile does not cut that wait short (it is raised with the first);
    what the stopped thread raised is dropped."""
    running = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        stop()
        await _ended(running)
        if not running.cancelled():
            running.exception()  # (retrieved: never logged as unhandled)
        raise


async def run_owned(fn: Callable[..., T], release: Callable[[T], None], *args: Any) -> T:
    """``fn(*args)`` in a thread that opens what the caller then owns (a page snapshot:
    read transactions of the store); cancelled, the thread is waited for (as
    :func:`run_joined`) and what it returned meanwhile given to ``release`` (was: left
    open, never closed), then the cancellation raised."""
    running = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await _ended(running)
        if not running.cancelled() and running.exception() is None:
            release(running.result())
        raise


async def _ended(running: asyncio.Future[Any]) -> None:
    """Wait for ``running``; a further cancellation meanwhile does not cut it short."""
    while not running.done():
        try:
            await asyncio.wait((running,))
        except asyncio.CancelledError:
            continue  # (the thread still runs: closing under it is the bug)
