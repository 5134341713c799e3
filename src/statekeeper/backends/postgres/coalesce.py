"""Calls of one read made while it is in flight, sent together in the next statement.

Group commit for a read: the first caller runs its own statement at once; callers
arriving while a statement is in flight queue up, and when it returns they are answered
by one statement for all of them (up to ``limit`` a statement), repeated until no caller
waits. A queued caller is never answered by a statement sent before it called: its
answer is as fresh as a statement of its own would have been. With 16 LangGraph threads
on one loop, the threads' head checks at the start of a turn arrive together (they were
woken by the same commit): one round trip for several of them instead of one each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalesced"]

A = TypeVar("A")
R = TypeVar("R")


class Coalesced(Generic[A, R]):
    """``await coalesced(arg)``: ``one(arg)``, or ``many([...])`` with the other callers
    that arrived while a statement was in flight (``many`` answers in order)."""

    def __init__(
        self,
        one: Callable[[A], Awaitable[R]],
        many: Callable[[Sequence[A]], Awaitable[Sequence[R]]],
        limit: int = 512,
    ) -> None:
        self._one = one
        self._many = many
        self._limit = limit
        self._busy = False
        self._queue: list[tuple[A, asyncio.Future[R]]] = []
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, arg: A) -> R:
        if self._busy:
            future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
            self._queue.append((arg, future))
            return await future
        self._busy = True
        try:
            return await self._one(arg)
        finally:
            if self._queue:
                self._runner = asyncio.get_running_loop().create_task(self._drain())
            else:
                self._busy = False

    async def _drain(self) -> None:
        """Answer the queued callers, ``limit`` a statement, until none is left."""
        try:
            while self._queue:
                batch, self._queue = self._queue[: self._limit], self._queue[self._limit :]
                try:
                    results = await self._many([arg for arg, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                except BaseException:  # cancelled (the loop closing): so are its callers
                    self._queue = batch + self._queue
                    raise
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            for _, future in self._queue:
                future.cancel()
            self._queue = []
            self._busy = False
            self._runner = None
