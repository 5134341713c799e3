"""Servers that cannot be reached, refuse a statement, or go away after they worked.

* "cannot connect at all" fails at first use, fast, with the server's own reason
  (:class:`BackendUnavailable`), no retries and no pool warnings;
* a permanent PostgreSQL error (``statement_timeout``...) is not retried as a lost
  connection: :class:`BackendRejected` at once, nothing written, and in a group batch
  only the faulty request fails;
* "lost a connection that worked" is retried within the budget and succeeds once the
  server is back (a private server, stopped and started by the test);
* credentials never appear in an error, a log line or a ``repr``.

No elapsed time is asserted (tests never depend on timing): a retry shows up as the
recovery loop's "retrying" warning, and a silent server counts the connections it gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from statekeeper import StateStore
from statekeeper.backends import PostgresBackend, RedisBackend, open_backend, tiered_url
from statekeeper.errors import (
    BackendRejected,
    BackendUnavailable,
    ConfigurationError,
    StoreLost,
)
from statekeeper.records import AppendResult
from statekeeper.testing import request

from ._services import (
    POSTGRES_DSN,
    REDIS_URL,
    SilentServer,
    free_port,
    host_port,
    namespace,
    private_postgres,
    private_redis,
    require_postgres,
    require_redis,
)

SECRET = "Pw-d0-not-print"
# The old behaviour retried permanent errors and unreachable servers for 12-32 s. Without
# measuring time: a silent server counts the connections it gets (at most one, plus
# psycopg's sslmode=prefer fallback), and a retry shows up as the recovery loop's warning.
MAX_ATTEMPTS = 2


def assert_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing was retried: the recovery loop warns "retrying for up to" on every retry."""
    retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retried == [], retried


def _with_password(url: str) -> str:
    """``url`` with a password in it (the shared servers trust every login)."""
    scheme, rest = url.split("://", 1)
    user = rest.split("@", 1)[0] if "@" in rest else "postgres"
    host = rest.split("@", 1)[1] if "@" in rest else rest
    return f"{scheme}://{user}:{SECRET}@{host}"


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    """A port that accepts TCP connections, never answers, and counts them."""
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def _pg_cases() -> list[tuple[str, str, str]]:
    """(id, URL builder key, expected words of the reason)."""
    return [
        ("closed-port", "closed", "Connection refused"),
        ("missing-database", "nodb", 'database "sk_no_such_database" does not exist'),
        ("unknown-uri-option", "option", "sk_bogus_option"),
        ("unresolvable-host", "host", "no-such-host.invalid"),
        ("unknown-role", "role", 'role "sk_no_such_role" does not exist'),
    ]


def _pg_url(kind: str) -> str:
    hostport = host_port(POSTGRES_DSN)
    base = f"postgresql://postgres:{SECRET}@"
    return {
        "closed": f"{base}127.0.0.1:{free_port()}/test",
        "nodb": f"{base}{hostport}/sk_no_such_database",
        "option": f"{base}{hostport}/test?sk_bogus_option=1",
        "host": f"{base}no-such-host.invalid:5432/test",
        "role": f"postgresql://sk_no_such_role:{SECRET}@{hostport}/test",
    }[kind]


@pytest.mark.parametrize(
    ("kind", "reason"), [c[1:] for c in _pg_cases()], ids=[c[0] for c in _pg_cases()]
)
async def test_postgres_that_cannot_be_reached_fails_fast_with_its_reason(
    kind: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    if kind in ("nodb", "option", "role"):
        require_postgres()
    url = _pg_url(kind)
    caplog.set_level(logging.DEBUG)
    store = StateStore(url)
    try:
        with pytest.raises(BackendUnavailable) as info:
            await store.save("a", {"n": 1})
        with pytest.raises(BackendUnavailable):  # every later call says the same, fast
            await store.head("a")
    finally:
        await store.close()
    message = str(info.value)
    assert reason in message
    assert message.startswith("cannot connect to PostgreSQL at postgresql://")
    assert ":***@" in message and SECRET not in message
    assert "\n" not in message
    # no pool spinning in the background, no retry warnings; nothing logs the password
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert SECRET not in caplog.text


async def test_postgres_silent_server_is_bounded_by_connect_timeout(
    silent: SilentServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{silent.port}/test?connect_timeout=0.5"
    backend = open_backend(url)
    try:
        with pytest.raises(BackendUnavailable, match=r"no answer within 0\.5s") as info:
            await backend.head("a")
    finally:
        await backend.close()
    assert 1 <= silent.attempts_since(0) <= MAX_ATTEMPTS
    assert_not_retried(caplog)
    assert SECRET not in str(info.value)


def _redis_url(kind: str, silent_port: int) -> str:
    hostport = host_port(REDIS_URL)
    return {
        "closed": f"redis://:{SECRET}@127.0.0.1:{free_port()}/0",
        "db-out-of-range": f"redis://{hostport}/999999",
        "silent": f"redis://:{SECRET}@127.0.0.1:{silent_port}/0?connect_timeout=0.5",
        "cluster-closed": f"redis+cluster://:{SECRET}@127.0.0.1:{free_port()}/",
    }[kind]


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("closed", "Connect call failed"),
        ("db-out-of-range", "DB index is out of range"),
        ("silent", "no answer within 0.5s"),
        ("cluster-closed", "Connect call failed"),
    ],
)
async def test_redis_that_cannot_be_reached_fails_fast_with_its_reason(
    kind: str, reason: str, silent: SilentServer, caplog: pytest.LogCaptureFixture
) -> None:
    if kind == "db-out-of-range":
        require_redis()
    caplog.set_level(logging.DEBUG)
    store = StateStore(_redis_url(kind, silent.port))
    try:
        with pytest.raises(BackendUnavailable) as info:
            await store.save("a", {"n": 1})
    finally:
        await store.close()
    if kind == "silent":
        assert 1 <= silent.attempts_since(0) <= MAX_ATTEMPTS
    assert_not_retried(caplog)
    message = str(info.value)
    assert reason in message and message.startswith("cannot connect to Redis at redis")
    assert SECRET not in message and SECRET not in caplog.text
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_tiered_store_on_an_unreachable_durable_tier_fails_fast(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = tiered_url(
        hot="memory://", durable=f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/x"
    )
    store = StateStore(url)
    try:
        with pytest.raises(BackendUnavailable, match="Connection refused") as info:
            await store.save("a", {"n": 1})
    finally:
        await store.close()
    assert_not_retried(caplog)
    assert SECRET not in str(info.value) and SECRET not in repr(store)


# -- PostgreSQL: permanent errors are not lost connections --------------------------------


@contextlib.asynccontextmanager
async def _row_locked(schema: str, agent_id: str) -> AsyncIterator[None]:
    """Hold the agent's head row locked (another session's open transaction)."""
    async with await psycopg.AsyncConnection.connect(POSTGRES_DSN) as conn:
        await conn.execute(
            sql.SQL("SELECT 1 FROM {}.sk_agents WHERE agent_id = %s FOR UPDATE").format(
                sql.Identifier(schema)
            ),
            (agent_id,),
        )
        yield
        await conn.rollback()


def _timeout_url(schema: str, ms: int) -> str:
    return f"{POSTGRES_DSN}?schema={schema}&options=-c%20statement_timeout%3D{ms}"


async def test_a_statement_timeout_fails_fast_and_writes_nothing(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    setup = PostgresBackend(POSTGRES_DSN, schema=schema)
    await setup.append(request("a", 0))
    await setup.close()
    backend = PostgresBackend.from_url(_timeout_url(schema, 200))  # retry_timeout: 30 s
    try:
        async with _row_locked(schema, "a"):
            with pytest.raises(BackendRejected) as info:
                await backend.append(request("a", 1))
        assert_not_retried(caplog)
        assert info.value.maybe_applied is False
        assert info.value.sqlstate == "57014"
        assert "statement timeout" in str(info.value)
        assert await backend.head("a") == 1  # nothing was written
        # the same request goes through once the lock is gone
        assert await backend.append(request("a", 1)) == AppendResult("a", 2, 2)
    finally:
        await backend.close()


async def test_an_over_long_agent_id_fails_fast_and_writes_nothing(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL refuses an index entry over ~2.7 KB (SQLSTATE 54000): a permanent
    error, not a lost connection. (The store-wide agent-id validator refuses such ids
    even earlier, with a ConfigurationError; either way: at once, typed, not written.)"""
    backend = PostgresBackend(POSTGRES_DSN, schema=schema)  # retry_timeout: 30 s
    agent = secrets.token_urlsafe(6000)  # 8 KB that do not compress below the limit
    try:
        with pytest.raises((BackendRejected, ConfigurationError)) as info:
            await backend.append(request(agent, 0))
        assert_not_retried(caplog)
        assert getattr(info.value, "maybe_applied", False) is False
        assert await backend.count_agents() == 0
    finally:
        await backend.close()


async def test_a_failed_group_batch_commits_the_good_requests(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One request of a batch hits a permanent error: the others commit, it alone fails,
    at once (not after the 30 s lost-connection budget)."""
    setup = PostgresBackend(POSTGRES_DSN, schema=schema)
    for agent in ("bad", "g1", "g2", "g3"):
        await setup.append(request(agent, 0))
    await setup.close()
    backend = PostgresBackend.from_url(_timeout_url(schema, 300), max_size=4)
    try:
        await backend.open()
        async with _row_locked(schema, "bad"):
            results = await backend.append_batch(
                [request("bad", 1), request("g1", 1), request("g2", 1), request("g3", 1)]
            )
        assert_not_retried(caplog)
        assert isinstance(results[0], BackendRejected) and results[0].sqlstate == "57014"
        assert results[1:] == [AppendResult(a, 2, 2) for a in ("g1", "g2", "g3")]
        assert [await backend.head(a) for a in ("bad", "g1", "g2", "g3")] == [1, 2, 2, 2]
    finally:
        await backend.close()


async def test_a_failed_batch_does_not_serialise_the_others_behind_the_bad_one(
    schema: str,
) -> None:
    """The batch's first request waits on a row lock until its statement times out;
    when the batch is settled, the other requests commit while that one is still
    waiting (they are not queued behind it): the test sees them committed, only then
    releases the lock — and the waiting request then commits too."""
    setup = PostgresBackend(POSTGRES_DSN, schema=schema)
    for agent in ("slow", "g1", "g2"):
        await setup.append(request(agent, 0))
    backend = PostgresBackend.from_url(_timeout_url(schema, 3000), max_size=4)
    try:
        await backend.open()
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN) as locker:
            await locker.execute(
                sql.SQL("SELECT 1 FROM {}.sk_agents WHERE agent_id = 'slow' FOR UPDATE").format(
                    sql.Identifier(schema)
                )
            )
            batch = asyncio.create_task(
                backend.append_batch([request("slow", 1), request("g1", 1), request("g2", 1)])
            )
            # condition: the good requests are committed while "slow" is still locked
            while [await setup.head("g1"), await setup.head("g2")] != [2, 2]:
                assert not batch.done(), await batch
                await asyncio.sleep(0.02)
            await locker.rollback()  # release: the re-sent "slow" request goes through
        results = await asyncio.wait_for(batch, 60)
        assert results == [
            AppendResult("slow", 2, 2),
            AppendResult("g1", 2, 2),
            AppendResult("g2", 2, 2),
        ]
    finally:
        await setup.close()
        await backend.close()


async def test_group_mode_store_one_bad_write_does_not_stall_the_others(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = _timeout_url(schema, 300)
    async with StateStore(url, durability="group") as store:
        for agent in ("bad", "g1", "g2", "g3", "g4"):
            await store.save(agent, {"n": 0})
        async with _row_locked(schema, "bad"):
            outcomes = await asyncio.gather(
                *(store.save(a, {"n": 1}) for a in ("bad", "g1", "g2", "g3", "g4")),
                return_exceptions=True,
            )
        assert_not_retried(caplog)
        assert isinstance(outcomes[0], BackendRejected)
        assert all(isinstance(o, AppendResult) for o in outcomes[1:]), outcomes
        for agent in ("g1", "g2", "g3", "g4"):
            assert (await store.load(agent)).data == {"n": 1}
        assert await store.head("bad") == 1


# -- lost a connection that worked: retried, and it succeeds ------------------------------


class _Warned(logging.Handler):
    """Sets an asyncio event at the first warning with one of ``needles`` (a condition
    to wait for, not a sleep) and keeps every warning line."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *needles: str) -> None:
        super().__init__(logging.WARNING)
        self.loop = loop
        self.needles = needles
        self.event = asyncio.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        self.lines.append(line)
        if any(needle in line for needle in self.needles):
            self.loop.call_soon_threadsafe(self.event.set)


@pytest.mark.slow
async def test_postgres_lost_connection_is_retried_and_a_new_client_fails_fast() -> None:
    with private_postgres() as server:
        url = server.dsn.replace("postgres@", f"postgres:{SECRET}@")
        worked = PostgresBackend(url, retry_timeout=60)
        # the client is trying again: its retry warning, or the pool re-dialling
        handler = _Warned(asyncio.get_running_loop(), "retrying", "error connecting")
        loggers = [logging.getLogger(n) for n in ("statekeeper.backends.postgres", "psycopg.pool")]
        for logger in loggers:
            logger.addHandler(handler)
        try:
            await worked.append(request("a", 0))
            await asyncio.to_thread(server.stop)
            # a client that never reached the server: cannot connect at all, at once
            fresh = PostgresBackend(url, retry_timeout=60)
            with pytest.raises(BackendUnavailable, match="Connection refused"):
                await fresh.head("a")
            assert not [line for line in handler.lines if "retrying" in line]
            await fresh.close()
            # the client that worked keeps retrying until the server is back
            pending = asyncio.create_task(worked.append(request("a", 1)))
            await asyncio.wait_for(handler.event.wait(), 60)
            assert not pending.done()
            await asyncio.to_thread(server.start)
            assert await asyncio.wait_for(pending, 60) == AppendResult("a", 2, 2)
            assert [e.seq for e in await worked.read("a")] == [1, 2]
        finally:
            for logger in loggers:
                logger.removeHandler(handler)
            await worked.close()
        retry_lines = [line for line in handler.lines if "retrying for up to" in line]
        assert len(retry_lines) <= 1  # one warning per interrupted operation
        assert not any(SECRET in line for line in handler.lines)


@pytest.mark.slow
async def test_redis_lost_connection_is_retried_and_a_new_client_fails_fast() -> None:
    with private_redis() as server:
        url = server.url
        worked = RedisBackend(url, prefix="x:", retry_timeout=60)
        logger = logging.getLogger("statekeeper.backends.redis")
        handler = _Warned(asyncio.get_running_loop(), "retrying")
        logger.addHandler(handler)
        try:
            await worked.append(request("a", 0))
            server.kill()
            fresh = RedisBackend(url, prefix="x:", retry_timeout=60)
            with pytest.raises(BackendUnavailable, match="Connect call failed"):
                await fresh.head("a")
            assert not [line for line in handler.lines if "retrying" in line]
            await fresh.close()
            pending = asyncio.create_task(worked.head("a"))
            await asyncio.wait_for(handler.event.wait(), 60)
            assert not pending.done()
            server.start()  # empty again (no persistence): the retried read finds the
            # store's data gone and says so, instead of answering 0 (an agent that
            # never was)
            with pytest.raises(StoreLost, match="identity marker is gone"):
                await asyncio.wait_for(pending, 60)
        finally:
            logger.removeHandler(handler)
            await worked.close()
        assert len([line for line in handler.lines if "retrying" in line]) == 1


# -- credentials are never shown -----------------------------------------------------------


def test_reprs_mask_credentials(tmp_path: Path) -> None:
    pg = open_backend(f"postgresql+psycopg://app:{SECRET}@db.invalid:5432/agents?schema=s1")
    rd = open_backend(f"redis://:{SECRET}@cache.invalid:6379/2?prefix=p:")
    tiered = open_backend(
        tiered_url(
            hot=f"redis://:{SECRET}@cache.invalid:6379/0",
            durable=f"postgresql://app:{SECRET}@db.invalid/agents",
        )
    )
    store = StateStore(pg)
    for thing, shown in (
        (pg, "postgresql://app:***@db.invalid:5432/agents"),
        (rd, "redis://:***@cache.invalid:6379/2"),
        (tiered, "postgresql://app:***@db.invalid/agents"),
        (store, "postgresql://app:***@db.invalid:5432/agents"),
    ):
        assert SECRET not in repr(thing)
        assert shown in repr(thing)
    for backend in (pg, rd, tiered):
        asyncio.run(backend.close())


async def test_a_redis_error_reply_is_rejected_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key of the wrong type under the prefix (another application's data): Redis
    answers WRONGTYPE, which no retry can fix: BackendRejected, the other data left.
    (Refused at a command inside a script, which keeps what it wrote before: reported
    ``maybe_applied``, as a refusal part-way through it would be, test_redis_acl.py.)"""
    require_redis()
    import redis.asyncio as aioredis

    prefix = namespace(tmp_path) + ":"
    raw = aioredis.Redis.from_url(REDIS_URL)
    backend = RedisBackend(REDIS_URL, prefix=prefix)  # retry_timeout: 10 s
    try:
        await raw.set(f"{prefix}a:clash", b"not a hash")
        with pytest.raises(BackendRejected, match="WRONGTYPE") as info:
            await backend.append(request("clash", 0))
        assert_not_retried(caplog)
        assert info.value.maybe_applied is True
        assert await raw.get(f"{prefix}a:clash") == b"not a hash"
    finally:
        await backend.close()
        await raw.delete(f"{prefix}a:clash")
        await raw.aclose()
