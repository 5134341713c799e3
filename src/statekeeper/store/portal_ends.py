"""How a :class:`~.portal.Portal`'s loop ends: its tasks cancelled and run to their end
(:func:`end_tasks`), and a portal collected without ``stop`` — its store dropped
unclosed — closing what it served on its loop (:func:`abandon`). Nothing here holds
the portal: its background thread holds it weakly (:func:`weak_background`), so a
portal nobody holds any more is collected and its finalizer ends the loop."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .portal import Portal

__all__ = ["Remains", "abandon", "end_tasks", "weak_background"]

logger = logging.getLogger("statekeeper.store.portal")


class Remains:
    """What closes a portal's store once the portal is gone (no reference to it)."""

    __slots__ = ("closers", "loop", "pid")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pid = os.getpid()
        self.closers: list[Callable[[], Coroutine[Any, Any, object]]] = []


def end_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """(Holding ``loop``, not running.) Cancel every task left on it and run them to
    their end, then its async generators' (as the portal's own thread did when its
    loop stopped)."""
    rest = asyncio.all_tasks(loop)
    for task in rest:
        task.cancel()
    if rest:
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


def weak_background(ref: weakref.ref[Portal], kick: threading.Event, remains: Remains) -> None:
    """A portal's background thread (:meth:`.shared_loop.SharedLoop._background`),
    holding the portal only while it runs a pass: once it is collected, this thread
    closes what it served and ends."""
    while True:
        portal = ref()
        if portal is None:
            break
        wait = portal._plan()
        del portal
        kick.wait(wait)
        portal = ref()
        if portal is None:
            break
        if not portal._background_pass():
            return
        del portal
    close_abandoned(remains)


def abandon(remains: Remains, thread: threading.Thread, kick: threading.Event) -> None:
    """A portal was collected without :meth:`~.portal.Portal.stop`: close what it
    served (a store, flushed) on its loop, then close the loop — on its background
    thread, or on one of its own if that never started. Never blocks (a collection may
    run on any thread)."""
    if os.getpid() != remains.pid:  # a copy in a forked child: the loop is the parent's
        return
    if thread.ident is None:
        threading.Thread(
            target=close_abandoned, args=(remains,), name=thread.name, daemon=True
        ).start()
    else:
        kick.set()


def close_abandoned(remains: Remains) -> None:
    loop = remains.loop
    if loop is None or loop.is_closed():
        return
    try:
        loop.run_until_complete(_close(remains.closers))
        end_tasks(loop)
    finally:
        loop.close()


async def _close(closers: list[Callable[[], Coroutine[Any, Any, object]]]) -> None:
    for closer in closers:
        try:
            await closer()
        except Exception as exc:  # nobody to tell but the log
            logger.warning("closing an abandoned sync store failed: %s", exc)
