"""A private event loop on a background thread, for calling async code from sync code.

The sync facades (:class:`~statekeeper.store.sync.SyncStateStore`) run the one async
implementation through a portal instead of keeping a second, blocking copy of it.

Where the async core calls the user's code (a durable step's function, an update's
change function), the sync face runs that code in the *user's* thread, not on the
portal's loop: :meth:`Portal.serve` runs a coroutine that hands such calls back through
a :class:`Handoff`, and executes them in the thread that waits for it. The loop stays
free meanwhile (a lease's heartbeat keeps beating while the user's code blocks), and
the user's code sees its own thread (its thread-locals, a web framework's request).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, ParamSpec, TypeVar

from ..errors import StoreClosed

__all__ = ["Handoff", "Portal", "iterate_with", "next_item"]

T = TypeVar("T")
P = ParamSpec("P")


class Handoff:
    """The thread blocked in one :meth:`Portal.serve` call, seen from its coroutine:
    ``await handoff.run(fn, *args)`` runs ``fn`` in that thread and returns its result
    (or raises its exception) on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: (fn, args, kwargs, future) to run, or None: the coroutine is done
        self.inbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, called in the serving thread."""
        future: asyncio.Future[T] = self._loop.create_future()
        self.inbox.put((fn, args, kwargs, future))
        return await future


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # (its coroutine was cancelled meanwhile)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


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
        self._check(coro)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _check(self, coro: Coroutine[Any, Any, Any]) -> None:
        if not self.running:
            coro.close()
            raise StoreClosed("the sync facade has been closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("Portal.call() from inside the portal's own loop would deadlock")

    def serve(self, make: Callable[[Handoff], Coroutine[Any, Any, T]]) -> T:
        """Run ``make(handoff)`` on the portal's loop, like :meth:`call`, and meanwhile
        run here, in the calling thread, every function it hands over with
        ``await handoff.run(fn, ...)``. An exception of such a function is raised in
        the coroutine (where the async core handles it as its own); an interrupt
        (``KeyboardInterrupt``) cancels the coroutine and is raised here."""
        handoff = Handoff(self._loop)
        coro = make(handoff)
        self._check(coro)
        done = asyncio.run_coroutine_threadsafe(coro, self._loop)
        done.add_done_callback(lambda _: handoff.inbox.put(None))
        try:
            while (item := handoff.inbox.get()) is not None:
                fn, args, kwargs, future = item
                if future.done():  # its call was cancelled meanwhile: not run
                    continue
                try:
                    result = fn(*args, **kwargs)
                except Exception as exc:
                    self._loop.call_soon_threadsafe(_settle, future, None, exc)
                else:
                    self._loop.call_soon_threadsafe(_settle, future, result, None)
        except BaseException:
            done.cancel()
            raise
        return done.result()

    @contextlib.contextmanager
    def enter(self, manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
        """Drive an async context manager from sync code: its ``__aenter__`` and
        ``__aexit__`` run on the portal's loop, the ``with`` block in this thread."""
        value = self.call(manager.__aenter__())
        try:
            yield value
        except BaseException as exc:
            if not self.call(manager.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self.call(manager.__aexit__(None, None, None))

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
