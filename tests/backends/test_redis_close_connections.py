"""Closing a Redis store closes its connections on the server.

The backend made its client over a pool of its own (``Redis(connection_pool=pool)``),
and redis-py's ``aclose()`` leaves a pool it was handed open: ``close()`` returned, and
every connection the store had opened stayed connected to the server for as long as
the store object lived (a closed ``SyncStateStore`` kept as an attribute, a test's
fixture; 20 stores opened and closed held 20 server connections), closed only by the
garbage collector with a ``ResourceWarning`` ("unclosed Connection"). On the real
server, under the test's own key prefix: the connection's id, asked of the server
through the store's client, is gone from ``CLIENT LIST`` once ``close`` returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("redis")

import redis

from statekeeper import StateStore, SyncStateStore
from statekeeper.backends.redis import RedisBackend

from ._services import REDIS_URL, delete_prefix, namespace, require_redis


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    require_redis()
    prefix = namespace(tmp_path, "sk_close_") + ":"
    try:
        yield f"{REDIS_URL}?prefix={prefix}"
    finally:
        delete_prefix(prefix)


def _gone(client_id: int) -> bool:
    """Whether the server has no connection ``client_id`` left, waited for up to 10 s
    (the server sees a closed socket on its next read of it)."""
    server = redis.Redis.from_url(REDIS_URL)
    try:
        deadline = time.monotonic() + 10
        while server.client_list(client_id=[client_id]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True
    finally:
        server.close()


def _backend(store: StateStore) -> RedisBackend:
    assert isinstance(store.backend, RedisBackend)
    return store.backend


def test_close_closes_the_stores_connections(url: str) -> None:
    store = StateStore(url)

    async def run() -> int:
        await store.save("a-1", {"n": 1})
        client_id = int(await _backend(store)._client.client_id())
        await store.close()
        return client_id

    # (the store object still referenced, as an application's would be)
    assert _gone(asyncio.run(run()))


def test_a_sync_stores_close_closes_its_connections(url: str) -> None:
    store = SyncStateStore(url)
    store.save("a-1", {"n": 1})
    client_id = int(store._portal.call(_backend(store.store)._client.client_id()))
    store.close()
    assert store.store.backend is not None  # (still referenced)
    assert _gone(client_id)
