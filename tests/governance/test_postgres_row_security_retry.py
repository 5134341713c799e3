"""An append whose connection is lost, sent again by the backend's recovery, under
PostgreSQL row-level security: the retry is answered as the first try would have been.

The first try of an append to a stream the role may only read has its head row's UPDATE
filtered away by the policy, and the backend asks the policy (AccessDenied naming the
agent and the role). The recovery's retry (the connection killed by
``pg_terminate_backend`` from the test's own superuser connection, before the append's
statement, or after its commit with the reply lost) used to skip that question: the
filtered UPDATE was reported a conflict, which a caller answers by reloading and
writing again. Nothing is written either way; the role's own namespace still works."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import AccessDenied
from statekeeper.governance import parse_policy
from statekeeper.governance.policy_postgres import enforce_in_postgres
from statekeeper.records import AppendRequest, AppendResult, RawEvent

from ..backends._services import POSTGRES_DSN
from .conftest import POLICY_TEXT
from .test_postgres_row_security import _as, setup

__all__ = ["setup"]  # the fixture: two real roles, a unique schema

READ_ONLY, MINE = "acme/billing/b1", "acme/support/t1"  # alice: read / write
NEW_READ_ONLY = "acme/billing/new"  # a stream alice may not create


def _event(seq: int) -> RawEvent:
    return RawEvent(seq, "patch", float(seq), b"payload", b"sum")


def _killing(backend: PostgresBackend, when: str) -> list[int]:
    """Make the backend's next append lose its connection: ``before`` its statement
    (terminated by the superuser first), or ``after`` its commit (terminated once the
    statement is answered: the reply never reaches the caller). The killed pids."""
    killed: list[int] = []
    # (the class's own methods: not an earlier call's wrappers, left on the instance)
    b: Any = backend
    real: Callable[[AppendRequest], Awaitable[Any]] = type(b)._append_once.__get__(b)
    real_connection = type(b)._connection.__get__(b)

    def terminate(pid: int) -> None:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as su:
            su.execute("SELECT pg_terminate_backend(%s)", (pid,))
        killed.append(pid)

    @contextlib.asynccontextmanager
    async def connection() -> Any:
        async with real_connection() as conn:
            if not killed and when == "before":
                terminate(conn.info.backend_pid)
            yield conn
            if not killed and when == "after":
                terminate(conn.info.backend_pid)
                raise psycopg.OperationalError("server closed the connection unexpectedly")

    async def once(request: AppendRequest) -> Any:
        if killed:
            return await real(request)
        b._connection = connection
        try:
            return await real(request)
        finally:
            b._connection = real_connection

    b._append_once = once
    return killed


async def _populate(schema: str) -> None:
    owner = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
    try:
        for agent_id in (READ_ONLY, MINE):
            await owner.append(AppendRequest(agent_id, 0, (_event(1), _event(2))))
    finally:
        await owner.close()


async def _read(schema: str, agent_id: str) -> list[int]:
    owner = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=1)
    try:
        return [e.seq for e in await owner.read(agent_id, 0)]
    finally:
        await owner.close()


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_retried_append_is_refused_as_its_first_try_would_be(
    setup: tuple[str, str, str], when: str
) -> None:
    schema, alice_role, _ = setup
    await _populate(schema)
    await enforce_in_postgres(
        POSTGRES_DSN, schema, parse_policy(POLICY_TEXT), roles={"alice": alice_role}
    )
    alice = PostgresBackend(_as(alice_role), schema=schema, max_size=2, retry_timeout=30)
    try:
        for agent_id, head in ((READ_ONLY, 2), (NEW_READ_ONLY, 0)):
            killed = _killing(alice, when)
            with pytest.raises(AccessDenied) as caught:
                await alice.append(AppendRequest(agent_id, head, (_event(head + 1),)))
            # (a new stream's INSERT is refused by the server at once: no reply to lose)
            assert killed or (when, head) == ("after", 0), "the connection was not killed"
            assert caught.value.agent_id == agent_id and alice_role in str(caught.value)
            assert await _read(schema, agent_id) == [1, 2][:head]  # nothing written
        # her own namespace: the retry writes, once
        killed = _killing(alice, when)
        result = await alice.append(AppendRequest(MINE, 2, (_event(3),)))
        assert killed and isinstance(result, AppendResult) and result.last_seq == 3
        assert await _read(schema, MINE) == [1, 2, 3]
    finally:
        await alice.close()
