"""Many concurrent calls on one Redis store wait for the pool's connections.

redis-py's plain connection pool fails a call at once ("Too many connections", a
``ConnectionError``) when all ``max_connections`` are in use: the backend took that
for a lost server — it logged a retry, and with ``retry_timeout=0`` (a hot tier)
failed the save. Callers now wait for a free connection, as PostgreSQL's pool makes
them; a wait that outlasts ``pool_timeout`` is a ``BackendError`` naming the limit
and both options, with nothing sent. On the real server, under the test's own key
prefix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

from statekeeper import StateStore
from statekeeper.errors import AgentNotFound, BackendError

from ._services import REDIS_URL, delete_prefix, namespace, require_redis

N = 1000


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    name = namespace(tmp_path, "sk_pool_") + ":"
    try:
        yield name
    finally:
        delete_prefix(name)


@pytest.mark.parametrize("retry", ["default", "no retries"])
async def test_a_thousand_concurrent_saves_all_succeed_and_load_back(
    prefix: str, retry: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{REDIS_URL}?prefix={prefix}" + ("&retry_timeout=0" if retry == "no retries" else "")
    caplog.set_level(logging.WARNING, logger="statekeeper")
    async with StateStore(url) as store:  # max_connections: 32 (the default)
        await asyncio.gather(*(store.save(f"agent-{i}", {"i": i}) for i in range(N)))
        loaded = await asyncio.gather(*(store.load(f"agent-{i}") for i in range(N)))
    assert [s.data for s in loaded] == [{"i": i} for i in range(N)]
    # no call was taken for a lost server (no retry logged)
    assert [r.getMessage() for r in caplog.records] == []


async def test_a_wait_past_pool_timeout_names_the_limit_and_sends_nothing(prefix: str) -> None:
    url = f"{REDIS_URL}?prefix={prefix}&max_connections=2&pool_timeout=0.2"
    async with StateStore(url) as store:
        await store.save("first", {"n": 1})
        pool = store.backend._client.connection_pool  # type: ignore[attr-defined]
        held = [await pool.get_connection() for _ in range(2)]  # every connection busy
        try:
            with pytest.raises(BackendError) as caught:
                await store.save("second", {"n": 1})
        finally:
            for conn in held:
                await pool.release(conn)
        message = str(caught.value)
        assert "2 connections" in message and "max_connections" in message
        assert "pool_timeout" in message and not caught.value.maybe_applied
        with pytest.raises(AgentNotFound):  # nothing was stored
            await store.load("second")
        await store.save("second", {"n": 2})  # connections free again: it goes through
        assert (await store.load("second")).data == {"n": 2}
