"""The saver's loops: :class:`~statekeeper.store.shared_loop.SharedLoop` (its own loop,
run by whichever thread calls the saver; shared with the sync store's face) and
:class:`BoundLoop` (the application's loop, ``afrom_url``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

from ...errors import ConfigurationError, StoreClosed
from ...store import forks
from ...store.shared_loop import Faces, SharedLoop

__all__ = ["BoundLoop", "SharedLoop"]

T = TypeVar("T")


class BoundLoop(Faces):
    """The saver's work run on the application's own event loop (``afrom_url``).

    With :class:`SharedLoop`, every async call (``aput``, ``aget_tuple`` …) crossed from
    the caller's loop to the saver's loop on a background thread and back: two
    wake-ups of another thread per call, and two threads busy in Python, each giving
    the GIL to the other at every call into C that releases it (a socket send, a
    poll). Bound to the caller's loop, an async call is a plain ``await``: measured
    with 16 ``ainvoke`` tasks on PostgreSQL, 16 % less CPU per write, 1.26x the
    writes/s at load 2 and no gain at load 8 (docs/benchmarks.md, "lgcc12"). The loop
    must be running for the saver to work:

    * an async call made on the bound loop runs there, in the caller's task; one made
      on another loop is handed to the bound loop and awaited from there;
    * a sync call made from another thread is handed to the bound loop and waited
      for (as LangGraph's async savers do); made from the bound loop's own thread it
      would deadlock the loop it waits for, and raises :class:`ConfigurationError`
      at once instead.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._closed = False
        forks.watch(self, "saver")  # (the loop runs in the parent only)

    @property
    def running(self) -> bool:
        """True until :meth:`stop` has been called (and while its loop is open)."""
        return not self._closed and not self._loop.is_closed()

    def on_loop(self) -> bool:
        """Whether the calling code runs on the bound loop."""
        return asyncio._get_running_loop() is self._loop

    def call(self, coro: Coroutine[Any, Any, T], *, bare: bool = False) -> T:
        """Run ``coro`` on the bound loop and block until it returns (or raises); as a
        task of that loop (``bare`` changes nothing here)."""
        if not self.running:
            coro.close()
            raise StoreClosed(self._closed_why)
        if self.on_loop():
            coro.close()
            raise ConfigurationError(
                "a blocking saver call from the event loop the saver is bound to would "
                "deadlock it: use the async methods (ainvoke, aget_tuple ...) there, or "
                "call from another thread"
            )
        if not self._loop.is_running():
            coro.close()
            raise ConfigurationError(
                "the event loop the saver is bound to (afrom_url) is not running: a "
                "blocking call has no loop to run on"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _handed(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def stop(self) -> None:
        """Stop using the loop (it is the application's: never closed here). Idempotent."""
        self._closed = True
