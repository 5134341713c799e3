"""A record over the Redis server's ``proto-max-bulk-len`` (512 MB by default, as low
as 1 MB) is refused at once with :class:`~statekeeper.errors.StateTooLarge` naming the
limit, nothing sent, the agent as it was. Before, the server answered "Protocol
error: invalid bulk length" and closed the connection: the caller got
``BackendRejected`` with that, or — the connection closed while the request was still
being sent — the backend took it for a lost connection, tried again for
``retry_timeout`` (10 s) and raised ``BackendError`` "Connection reset by peer": a
state a PostgreSQL or SQLite store holds looked like a network failure when restored
or moved into Redis. On a private server whose limit the test lowers to 1 MB
(the least Redis allows), with ``retry_timeout=60``: a retry loop would show as a
minute-long test and a ``BackendError``, not as this error."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import open_backend
from statekeeper.errors import StateTooLarge
from statekeeper.testing import request

from ._services import private_redis

pytestmark = pytest.mark.slow  # (a private server: the test lowers its limit)

LIMIT = 1024 * 1024


async def _lower(url: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        await client.config_set("proto-max-bulk-len", str(LIMIT))
    finally:
        await client.aclose()


async def test_a_record_over_proto_max_bulk_len_is_refused_at_once() -> None:
    with private_redis() as server:
        await _lower(server.url)
        url = f"{server.url}?prefix=t:&retry_timeout=60"
        async with StateStore(url) as store:
            agent = await store.agent("big")
            agent.data["small"] = 1
            await agent.save()
            head = agent.seq
            agent.data["blob"] = "y" * (LIMIT + LIMIT // 2)
            with pytest.raises(StateTooLarge) as refused:
                await agent.save()
            assert refused.value.engine == "Redis proto-max-bulk-len"
            assert refused.value.limit == LIMIT
            assert refused.value.size > LIMIT
            assert "proto-max-bulk-len limit of 1,048,576 bytes" in str(refused.value)
            assert await store.backend.head("big") == head  # nothing written
            del agent.data["blob"]
            agent.data["after"] = 2
            await agent.save()  # the connection and the store go on
        async with StateStore(url) as store:
            loaded: Any = await store.load("big")
            assert (loaded.seq, loaded.data) == (head + 1, {"small": 1, "after": 2})


async def test_a_batch_refuses_only_the_record_over_the_limit() -> None:
    with private_redis() as server:
        await _lower(server.url)
        backend = open_backend(f"{server.url}?prefix=t:&retry_timeout=60")
        try:
            plain = request("big", 0)
            huge = replace(plain.events[0], payload=b"z" * (LIMIT + 1))
            big = replace(plain, events=[huge])
            out = await backend.append_batch([big, request("small", 0)])
            assert isinstance(out[0], StateTooLarge), out[0]
            assert not isinstance(out[1], BaseException), out[1]
            assert await backend.head("big") == 0
            assert await backend.head("small") == 1
        finally:
            await backend.close()
