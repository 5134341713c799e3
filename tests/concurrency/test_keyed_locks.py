"""KeyedLocks: one lock per key, shared while in use, forgotten after."""

from __future__ import annotations

import asyncio
import gc

from statekeeper.backends.keyed_locks import KeyedLocks


async def test_one_lock_per_key_while_in_use_then_forgotten() -> None:
    locks = KeyedLocks()
    a = locks("a")
    assert locks("a") is a and locks["a"] is a
    assert locks("b") is not a
    order: list[str] = []

    async def hold(name: str) -> None:
        async with locks("a"):
            order.append(name)
            await asyncio.sleep(0)
            order.append(name)

    await asyncio.gather(hold("x"), hold("y"))
    assert order == ["x", "x", "y", "y"]  # serialised on the one lock of "a"
    del a
    gc.collect()
    assert len(locks) == 0  # nobody holds them: the table does not grow with keys
