"""A PostgreSQL server that stops answering (SIGSTOP: its sockets stay open, the kernel
still acknowledges every packet, nothing ever replies) is a lost server within
``socket_timeout``: an operation raises a typed error within its budget instead of
waiting for ever, an append says it may have been stored, and after the server
continues the store is whole and usable.

Before, a save, a load or a group commit on a frozen server never returned
(``retry_timeout`` bounds only retries after a connection *fails*, and a frozen server
never fails one); Redis (``socket_timeout``) and S3 (``read_timeout``) already bounded it.

The ``asyncio.wait_for`` bounds below are only there so that the old code fails
instead of hanging the suite: they are minutes, far beyond the budget asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from statekeeper import StateStore
from statekeeper.backends import PostgresBackend
from statekeeper.errors import BackendError, ConfigurationError
from statekeeper.testing import request

from ._services import PrivatePostgres, private_postgres

pytestmark = pytest.mark.slow  # (a private server each, frozen and continued)

HANG = 240  # seconds: "never returned" on the old code

# every budget small: a frozen server is given up after about
# socket_timeout + psycopg's own cancel attempt (at most 10 s) + the retries
FAST = "socket_timeout=0.5&retry_timeout=1&pool_timeout=1&connect_timeout=1"


async def statements_ended(server: PrivatePostgres) -> None:
    """Wait until no other session runs a statement: one sent before the freeze may
    still commit after it (the client gave up on it; that is what ``maybe_applied``
    says), and the checks below must see its outcome."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(server.dsn, autocommit=True) as conn:
        for _ in range(HANG * 10):
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state <> 'idle'"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                return
            await asyncio.sleep(0.1)
    raise AssertionError("a statement sent before the freeze never ended")


@pytest.fixture
def server() -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        yield server


async def test_an_append_to_a_frozen_server_raises_that_it_may_be_stored(
    server: PrivatePostgres,
) -> None:
    backend = PostgresBackend.from_url(f"{server.dsn}?{FAST}")
    try:
        await backend.append(request("a", 0))
        frozen = server.freeze()
        try:
            with pytest.raises(BackendError) as raised:
                await asyncio.wait_for(backend.append(request("a", 1)), HANG)
            assert raised.value.maybe_applied is True
        finally:
            server.thaw(frozen)
        await statements_ended(server)
        # the server continues: the append either landed whole or not at all, and the
        # same backend object goes on working
        head = await backend.head("a")
        assert head in (1, 2)
        assert [e.seq for e in await backend.read("a")] == list(range(1, head + 1))
        await backend.append(request("a", head))
        assert await backend.head("a") == head + 1
    finally:
        await backend.close()


async def test_a_read_of_a_frozen_server_raises_and_names_the_timeout(
    server: PrivatePostgres,
) -> None:
    backend = PostgresBackend.from_url(f"{server.dsn}?{FAST}")
    try:
        await backend.append(request("a", 0))
        frozen = server.freeze()
        try:
            with pytest.raises(BackendError, match=r"socket_timeout|couldn.t get a connection"):
                await asyncio.wait_for(backend.read("a"), HANG)
        finally:
            server.thaw(frozen)
        assert [e.seq for e in await backend.read("a")] == [1]
    finally:
        await backend.close()


async def test_a_group_commit_on_a_frozen_server_tells_every_waiter(
    server: PrivatePostgres,
) -> None:
    async with StateStore(f"{server.dsn}?{FAST}", durability="group") as store:
        for name in ("a", "b", "c"):
            await store.save(name, {"n": 0})
        frozen = server.freeze()
        try:
            saves = [store.save(name, {"n": 1}) for name in ("a", "b", "c")]
            results = await asyncio.wait_for(asyncio.gather(*saves, return_exceptions=True), HANG)
        finally:
            server.thaw(frozen)
        await statements_ended(server)
        for result in results:  # none acknowledged: each may or may not be stored
            assert isinstance(result, BackendError), result
            assert result.maybe_applied is True
        for name in ("a", "b", "c"):  # each is whole: at 1 (not stored) or 2 (stored)
            state = await store.load(name)
            assert (state.seq, state.data) in ((1, {"n": 0}), (2, {"n": 1}))
            await store.save(name, {"n": 2})
            assert (await store.load(name)).data == {"n": 2}


def test_socket_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="socket_timeout"):
        PostgresBackend.from_url("postgresql://u@h/db?socket_timeout=0")
