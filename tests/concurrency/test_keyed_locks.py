"""KeyedLock as the engines and the LangGraph saver use it: one lock per key, shared
while in use, and no entry left for a key nobody holds (the table does not grow)."""

from __future__ import annotations

import asyncio

from statekeeper.backends.keyed_locks import KeyedLock


async def test_one_lock_per_key_while_in_use_then_forgotten() -> None:
    locks = KeyedLock()
    order: list[str] = []

    async def hold(name: str) -> None:
        async with locks.hold("a"):
            order.append(name)
            await asyncio.sleep(0)
            order.append(name)

    async with locks.hold("b"):  # another key does not block "a"
        await asyncio.gather(hold("x"), hold("y"))
    assert order == ["x", "x", "y", "y"]  # serialised on the one lock of "a"
    assert locks._held == {}  # nobody holds them: the table does not grow with keys
