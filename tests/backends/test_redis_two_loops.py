"""One Redis store used from a second event loop: a typed error naming why, and the
first loop's connections left working.

redis-py's asyncio connections and its pool's waits belong to the loop that made them.
A store whose first ``asyncio.run`` had ended failed in the next one with an untyped
``RuntimeError`` ("got Future attached to a different loop", then "Event loop is
closed"); used from a second loop while the first still ran, it broke the first loop's
connection (its next read timed out and was retried). PostgreSQL refuses the same with
``StoreClosed`` (its pool closes with the loop); Redis now does too, and a second live
loop gets ``ConfigurationError``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import ConfigurationError, StoreClosed

from ._services import fresh_url


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with fresh_url("redis", tmp_path) as url:
        yield url


def test_a_store_whose_loop_ended_says_so_in_the_next(redis_url: str) -> None:
    store = StateStore(redis_url)
    asyncio.run(store.save("a-1", {"n": 1}))
    with pytest.raises(StoreClosed, match="event loop it ran on has ended"):
        asyncio.run(store.load("a-1"))

    async def fresh() -> dict[str, object]:
        async with StateStore(redis_url) as other:
            return (await other.load("a-1")).data

    assert asyncio.run(fresh()) == {"n": 1}


def test_a_second_live_loop_is_refused_and_the_first_keeps_working(redis_url: str) -> None:
    first = asyncio.new_event_loop()
    store = StateStore(redis_url)
    try:
        first.run_until_complete(store.save("a-1", {"n": 1}))
        with pytest.raises(ConfigurationError, match="another event loop"):
            asyncio.run(store.save("a-1", {"n": 2}))
        assert first.run_until_complete(store.load("a-1")).data == {"n": 1}
        first.run_until_complete(store.save("a-1", {"n": 3}))
        assert first.run_until_complete(store.load("a-1")).data == {"n": 3}
    finally:
        first.run_until_complete(store.close())
        first.close()
