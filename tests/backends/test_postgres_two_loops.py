"""A PostgreSQL store left open when its event loop ended, used from the next loop: the
``StoreClosed`` says it was closed at that loop's end and what to do, not "is closed"
(which its user never did: ``postgres/loop_end.py`` closed the pool with the loop)."""

from __future__ import annotations

import asyncio
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
