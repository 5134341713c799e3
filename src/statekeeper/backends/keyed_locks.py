"""One :class:`asyncio.Lock` per key (an agent, a thread), created on first use and
forgotten once nobody holds or waits on it."""

from __future__ import annotations

import asyncio
import weakref

__all__ = ["KeyedLocks"]


class KeyedLocks:
    """``locks[key]`` (or ``locks(key)``): the lock of ``key``, the same object for as
    long as anyone holds a reference to it — a task holding or waiting on it does — so
    the table never grows with keys no longer in use."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    __getitem__ = __call__

    def __len__(self) -> int:
        return len(self._locks)
