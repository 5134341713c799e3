"""Per-key locks (an agent, a thread) that cost nothing while nobody waits: the one
implementation of "a lock per agent", used by the store's writes, the tiered backend
and the LangGraph saver.

Every write of an agent in a store runs under that agent's lock. The common case — a
write no other write of the same agent is waiting on — must not build anything: an
``asyncio.Lock`` per agent kept in a ``WeakValueDictionary`` built a lock, a weak
reference and its callback on every save of a loop that saves agents one at a time
(the lock is dropped between saves). Here an uncontended acquire is one dict insert,
and its release one dict delete; a waiter gets a future, handed the lock in FIFO order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["KeyedLock"]


class KeyedLock:
    """A FIFO lock per key; a key with no holder has no entry."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        # key -> the futures of the writers waiting for it (None: held, nobody waits)
        self._held: dict[str, list[asyncio.Future[None]] | None] = {}

    def locked(self, key: str) -> bool:
        """``key`` is held."""
        return key in self._held

    def try_acquire(self, key: str) -> bool:
        """Hold ``key`` now if it is free (True); False, holding nothing, if it is not.
        (The uncontended write takes it so, without making a coroutine.)"""
        held = self._held
        if key in held:
            return False
        held[key] = None
        return True

    async def acquire(self, key: str) -> None:
        """Wait for ``key`` (FIFO), then hold it."""
        held = self._held
        if key not in held:
            held[key] = None
            return
        waiters = held[key]
        if waiters is None:
            waiters = held[key] = []
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(key)  # handed the lock as it was cancelled: pass it on
            elif future in waiters:
                waiters.remove(future)
            raise

    def release(self, key: str) -> None:
        """Hand ``key`` to the next waiter, or free it."""
        held = self._held
        waiters = held[key]
        while waiters:
            future = waiters.pop(0)
            if not future.done():
                future.set_result(None)  # the waiter holds it now
                return
        del held[key]

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """``async with locks.hold(key):`` — for the paths that are not hot."""
        await self.acquire(key)
        try:
            yield
        finally:
            self.release(key)
