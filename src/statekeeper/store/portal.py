"""A private event loop on a background thread, for calling async code from sync code.

The sync facades (:class:`~statekeeper.store.sync.SyncStateStore`) run the one async
implementation through a portal instead of keeping a second, blocking copy of it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from ..errors import StoreClosed

__all__ = ["Portal", "iterate_with", "next_item"]

T = TypeVar("T")


class Portal:
    """Owns an event loop running on a daemon thread until :meth:`stop`."""

    def __init__(self, name: str = "statekeeper-portal") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def running(self) -> bool:
        """True until :meth:`stop` has been called."""
        return self._thread.is_alive() and not self._loop.is_closed()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and block until it returns (or raises)."""
        if not self.running:
            coro.close()
            raise StoreClosed("the sync facade has been closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("Portal.call() from inside the portal's own loop would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator from sync code, one item per round trip."""
        return iterate_with(self.call, agen)

    def stop(self) -> None:
        """Stop the loop and join its thread. Idempotent."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


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
