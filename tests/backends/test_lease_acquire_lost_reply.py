"""A lease grant the server applied but whose reply was lost (the connection dropped
after the commit), on the shared PostgreSQL and Redis (each test under its own schema /
key prefix; the lost reply injected on the client side after the server ran the grant).

The engine sends the grant again, and the same holder's second try is granted, not
refused by the first: the caller gets a lease, the first grant's token is fenced off,
and nothing is left held for the TTL — a release lets another holder in at once. When
the engine gives up instead (the server unreachable for ``retry_timeout``), the
manager recognises the grant by its holder (tests/concurrency/test_lease_grant_reply_lost.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency.leases import LeaseManager

from ._services import fresh_url


def lose_first_grant_reply(engine: str, backend: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The backend's next grant reaches the server and runs there, then its reply is
    lost; later tries go through. Returns ``[grants run, replies lost]``."""
    seen = [0, 0]
    if engine == "postgresql":
        import psycopg

        real = backend._connection
        query = backend._sql["lease_acquire"]

        @contextlib.asynccontextmanager
        async def dying(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            granted = [False]
            async with real(*args, **kwargs) as conn:
                execute = conn.execute

                async def watched(q: Any, *a: Any, **k: Any) -> Any:
                    granted[0] |= q is query
                    return await execute(q, *a, **k)

                conn.execute = watched
                try:
                    yield conn
                finally:
                    conn.execute = execute
            if granted[0]:
                seen[0] += 1  # committed ...
                if not seen[1]:
                    seen[1] = 1  # ... and the reply is lost
                    raise psycopg.OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(backend, "_connection", dying)
    else:
        from redis.exceptions import ConnectionError as RedisConnectionError

        script = backend._acquire_script

        async def flaky(**kwargs: Any) -> Any:
            reply = await script(**kwargs)
            seen[0] += 1  # applied ...
            if not seen[1]:
                seen[1] = 1
                raise RedisConnectionError("Connection closed by server.")  # ... reply lost
            return reply

        monkeypatch.setattr(backend, "_acquire_script", flaky)
    return seen


@pytest.mark.parametrize("engine", ["postgresql", "redis"])
async def test_a_grant_whose_reply_is_lost_is_granted_to_its_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            seen = lose_first_grant_reply(engine, store.backend, monkeypatch)
            lease = await LeaseManager(store, holder="w1").acquire("a", ttl=600)
            assert seen == [2, 1]  # granted, reply lost, granted again to the same holder
            monkeypatch.undo()
            assert (lease.holder, lease.token) == ("w1", 2)
            await store.save("a", {"by": "w1"}, lease=lease)
            assert await lease.release()
            taken = await LeaseManager(other, holder="w2").acquire("a", ttl=600)
            assert taken.token == 3  # at once: nothing was left held for the TTL
