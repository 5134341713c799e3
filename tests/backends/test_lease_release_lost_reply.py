"""A lease release the server applied but whose reply was lost (the connection
dropped): the backend sends it again, and that retry used to meet the lease it had
just released itself — "not the current lease" — so ``release`` reported False
("taken over") for a lease it did release. The retry now says it is one (Redis: the
script's ``again`` flag; PostgreSQL: ``lease_release_again``) and reports the release
done when the lease is released with its token; a lease whose token moved on (another
holder took it) is still reported not released.

The servers are the shared ones (each test under its own schema / key prefix); the
lost reply is injected on the client side after the server ran the release."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency.leases import LeaseManager
from statekeeper.errors import LeaseHeld
from statekeeper.records import LeaseInfo

from ._services import fresh_url

ENGINES = ["postgresql", "redis"]

Between = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


def lose_first_reply(
    engine: str, backend: Any, monkeypatch: pytest.MonkeyPatch, between: Between = _nothing
) -> list[int]:
    """Make the backend's next lease release reach the server and run there, then run
    ``between`` (another holder's doing) and lose the reply; later tries go through.
    Returns ``[tries, lost]``: how many tries reached the server, and 1 once the reply
    was lost."""
    seen = [0, 0]
    if engine == "postgresql":
        import psycopg

        real = backend._connection

        @contextlib.asynccontextmanager
        async def dying() -> AsyncIterator[Any]:
            async with real() as conn:
                yield conn
            seen[0] += 1  # committed ...
            if not seen[1]:
                seen[1] = 1
                await between()
                # ... and the reply is lost
                raise psycopg.OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(backend, "_connection", dying)
    else:
        from redis.exceptions import ConnectionError as RedisConnectionError

        script = backend._release_script

        async def flaky(**kwargs: Any) -> Any:
            reply = await script(**kwargs)
            seen[0] += 1  # applied ...
            if not seen[1]:
                seen[1] = 1
                await between()
                raise RedisConnectionError("Connection closed by server.")  # ... reply lost
            return reply

        monkeypatch.setattr(backend, "_release_script", flaky)
    return seen


async def take_over(other: StateStore, agent_id: str, holder: str) -> LeaseInfo:
    """``holder`` takes the agent's lease, waiting (a condition, not a duration) until
    the one it finds there has expired."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await other.backend.acquire_lease(agent_id, holder, 60)
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_release_whose_reply_is_lost_reports_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            lease = await LeaseManager(store, holder="w1").acquire("a", ttl=60)
            seen = lose_first_reply(engine, store.backend, monkeypatch)
            assert await lease.release() is True  # it did release it
            assert seen == [2, 1]  # the reply of the first try was lost, then sent again
            monkeypatch.undo()
            stored = await other.backend.get_lease("a")
            assert stored is not None and stored.holder is None and stored.token == lease.token
            # released for real: another worker takes it at once, long before its TTL
            taken = await other.backend.acquire_lease("a", "w2", 60)
            assert taken.token == lease.token + 1
            # and a release sent afresh (not a retry) still says "not yours"
            assert await store.backend.release_lease("a", "w1", lease.token) is False


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_lost_reply_then_a_takeover_reports_not_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """Released, then taken by another holder before the retry: the retry finds a
    newer token, and cannot tell this release from an expiry that let the other holder
    in, so it says not released (never True for a lease another holder has) and
    leaves the other holder's lease alone."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            lease = await store.backend.acquire_lease("a", "w1", 60)
            taken: list[LeaseInfo] = []

            async def w2_takes_it() -> None:
                taken.append(await other.backend.acquire_lease("a", "w2", 60))

            seen = lose_first_reply(engine, store.backend, monkeypatch, w2_takes_it)
            assert await store.backend.release_lease("a", "w1", lease.token) is False
            assert seen == [2, 1]
            monkeypatch.undo()
            assert taken[0].token == lease.token + 1
            stored = await other.backend.get_lease("a")
            assert stored is not None
            assert (stored.holder, stored.token) == ("w2", lease.token + 1)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_refused_release_whose_reply_is_lost_stays_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """w1's lease expired, w2 took it over and released it (nobody holds it now): w1's
    late release is refused, and its retry after a lost reply must not take the lease
    released by w2's token for its own release."""
    with fresh_url(engine, tmp_path) as url:
        async with StateStore(url) as store, StateStore(url) as other:
            old = await store.backend.acquire_lease("a", "w1", 0.05)
            new = await take_over(other, "a", "w2")
            assert await other.backend.release_lease("a", "w2", new.token) is True
            seen = lose_first_reply(engine, store.backend, monkeypatch)
            assert await store.backend.release_lease("a", "w1", old.token) is False
            assert seen == [2, 1]
            monkeypatch.undo()
            stored = await other.backend.get_lease("a")
            assert stored is not None and (stored.holder, stored.token) == (None, new.token)
