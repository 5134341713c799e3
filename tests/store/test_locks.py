"""The per-agent write lock (:class:`statekeeper.store.locks.KeyedLock`): FIFO, one
holder per key, and a waiter cancelled as it is handed the lock passes it on."""

from __future__ import annotations

import asyncio

from statekeeper.store.locks import KeyedLock


async def test_one_holder_per_key_and_waiters_go_in_order() -> None:
    locks = KeyedLock()
    order: list[str] = []
    await locks.acquire("a")
    await locks.acquire("b")  # another key is not blocked

    async def waiter(name: str) -> None:
        await locks.acquire("a")
        order.append(name)
        locks.release("a")

    tasks = [asyncio.create_task(waiter(n)) for n in ("w1", "w2", "w3")]
    await asyncio.sleep(0)
    assert order == [] and locks.locked("a")
    locks.release("a")
    await asyncio.gather(*tasks)
    assert order == ["w1", "w2", "w3"]
    assert not locks.locked("a") and locks.locked("b")
    locks.release("b")
    assert not locks.locked("b")


async def test_a_cancelled_waiter_never_keeps_the_lock() -> None:
    locks = KeyedLock()
    await locks.acquire("a")
    first = asyncio.create_task(locks.acquire("a"))
    second = asyncio.create_task(locks.acquire("a"))
    await asyncio.sleep(0)
    first.cancel()  # cancelled while waiting
    await asyncio.gather(first, return_exceptions=True)
    locks.release("a")  # goes to the second waiter
    await second
    third = asyncio.create_task(locks.acquire("a"))
    await asyncio.sleep(0)
    locks.release("a")  # handed to the third, which is cancelled before it runs
    third.cancel()
    await asyncio.gather(third, return_exceptions=True)
    assert not locks.locked("a")  # it passed the lock on (to nobody: freed)
    async with locks.hold("a"):
        assert locks.locked("a")
    assert not locks.locked("a")
