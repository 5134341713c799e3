"""A PostgreSQL store left open when its event loop ended, used from the next loop: the
``StoreClosed`` says it was closed at that loop's end and what to do, not "is closed"
(which its user never did: ``postgres/loop_end.py`` closed the pool with the loop)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import StoreClosed

from ._services import fresh_url


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("postgresql", tmp_path) as url:
        yield url


def test_a_store_whose_loop_ended_says_why_it_is_closed(pg_url: str) -> None:
    store = StateStore(pg_url)
    asyncio.run(store.save("a-1", {"n": 1}))
    with pytest.raises(StoreClosed, match="closed when the event loop it ran on ended"):
        asyncio.run(store.load("a-1"))
    asyncio.run(store.close())  # (idempotent)

    async def fresh() -> dict[str, object]:
        async with StateStore(pg_url) as other:
            return (await other.load("a-1")).data

    assert asyncio.run(fresh()) == {"n": 1}


def _in_a_loop_closed_after(coro: object) -> object:
    """Run ``coro`` in a new loop closed without ``asyncio.run``'s end (no cancellation
    of its tasks): a worker's loop per job."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)  # type: ignore[arg-type]
    finally:
        loop.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_store_whose_loop_was_closed_unended_refuses_at_once(pg_url: str) -> None:
    """Was: the next loop's operation used the dead loop's idle connection (by luck),
    raised an untyped ``RuntimeError: Event loop is closed`` when the pool had to grow,
    then waited ``retry_timeout`` for a connection the dead loop's workers would never
    dial (a ``BackendError`` blaming the server)."""
    store = StateStore(f"{pg_url}&pool_timeout=1&retry_timeout=1")

    async def save(into: StateStore, n: int) -> None:
        await asyncio.gather(*(into.save(f"a-{k}", {"n": n}) for k in range(4)))

    _in_a_loop_closed_after(save(store, 1))
    for _ in range(2):
        with pytest.raises(StoreClosed, match="event loop it ran on was closed"):
            _in_a_loop_closed_after(save(store, 2))
    asyncio.run(store.close())  # (idempotent)
    del store
    gc.collect()  # (the dead loop's pool coroutines, closed here: under this filter)

    async def fresh() -> list[dict[str, object]]:
        async with StateStore(pg_url) as other:
            return [(await other.load(f"a-{k}")).data for k in range(4)]

    assert asyncio.run(fresh()) == [{"n": 1}] * 4  # nothing of the refused job stored
