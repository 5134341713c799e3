"""What every saver loop offers (:class:`Faces`): :class:`.shared_loop.SharedLoop`, the
LangGraph saver's ``BoundLoop``: a blocking call, sync iteration, async calls awaited in
place on the loop or handed to it, and whether the calling code runs on the loop (a
blocking close there is refused: :meth:`Faces.refuse_on_loop`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from ..errors import ConfigurationError, StatekeeperError, StoreClosed
from .iterating import iterate_with, next_item

__all__ = ["Faces"]

T = TypeVar("T")

_CLOSED = "the saver has been closed"


class Faces(ABC):
    """What both kinds of saver loop offer besides a blocking :meth:`call`: sync
    iteration, and async calls awaited in place on the loop or handed to it."""

    _loop: asyncio.AbstractEventLoop
    _closed: bool
    #: why calls are refused once ``_closed`` (a fork's copy: :mod:`statekeeper.store.forks`)
    _closed_why: str = _CLOSED
    #: what a call made after :meth:`stop` is told (not a fork's copy)
    _closed_message: str = _CLOSED

    @property
    @abstractmethod
    def running(self) -> bool:
        """Whether the loop runs (calls can be handed to it)."""

    @abstractmethod
    def on_loop(self) -> bool:
        """Whether the calling code runs on the loop (a blocking wait for it would
        wait for ever)."""

    def refuse_on_loop(self, what: str) -> None:
        """Raise :class:`ConfigurationError` when ``what`` (a blocking close) is asked
        for from code running on the loop; nothing is changed then. (Not once stopped,
        nor in a fork's copy: the close is a no-op there.)"""
        if self.running and self.on_loop():
            raise ConfigurationError(
                f"{what} from code running on the saver's own event loop would wait for "
                "that loop for ever: await saver.aclose() there, or close it from outside "
                "the loop"
            )

    @abstractmethod
    def call(self, coro: Coroutine[Any, Any, T], *, bare: bool = False) -> T:
        """Run ``coro`` on the loop and wait for its result (blocking); ``bare``: see
        :meth:`SharedLoop.call`."""

    @abstractmethod
    def _handed(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Hand ``coro`` to the loop from another thread."""

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator from sync code, one item per :meth:`call`."""
        return iterate_with(self.call, agen)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and await its result: in place when called there."""
        if not self.running:
            coro.close()
            if self._closed_why is not _CLOSED:  # (a fork's copy)
                raise StoreClosed(self._closed_why)
            raise StatekeeperError(self._closed_message)
        if asyncio.get_running_loop() is self._loop:
            return await coro
        return await asyncio.wrap_future(self._handed(coro))

    def new_future(self) -> asyncio.Future[Any]:
        """A future of the loop (made on any thread; settled on the loop)."""
        return self._loop.create_future()

    def later(self, delay: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
        """(On the loop.) Call ``callback`` on the loop in ``delay`` seconds."""
        return self._loop.call_later(delay, callback)

    async def aiterate(self, agen: AsyncIterator[T]) -> AsyncIterator[T]:
        """Drive an async iterator living on the loop from any loop."""
        while True:
            more, item = await self.run(next_item(agen))
            if not more:
                return
            yield item  # type: ignore[misc]
