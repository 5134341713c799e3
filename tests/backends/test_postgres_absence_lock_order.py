"""PostgreSQL: an ``append_together``'s claims (its absence checks, and the head rows of
the new agents it creates) are taken in agent order before any other lock, so two
transactions never deadlock over them.

An absence check claims its agent's head row (inserted and removed again in the
transaction: a creation of the agent by another transaction waits on it until it
ends). The checks claimed in the order given, so two checks of ``p`` and ``q`` given in
opposite orders each held one and waited for the other: a deadlock (PostgreSQL aborting
one after ``deadlock_timeout``; the library runs the victim again: a second lost). And
they claimed before the transaction's other locks while a transaction creating an agent
took its head row only at its append, after the locks of its changes: a check of ``x``
with an append to ``y`` held ``x`` and waited for ``y``'s head, while a delete of ``y``
with the creation of ``x`` in one commit held ``y`` and waited to create ``x``: a
deadlock. Now every claim, in agent order, comes first — before the lease and head
locks (``together_locks.py``), as a batch creating agents claims them first (migration
20, ``test_postgres_new_agents_order.py``).

The interleavings are made deterministic with a third session holding a row the first
transaction waits on (never a sleep); the library's runs again are turned off, so a
deadlock is seen.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import statekeeper.backends.postgres.appends as appends
import statekeeper.backends.postgres.together_locks as together_locks
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConflictError
from statekeeper.records import AppendResult, StreamChange
from statekeeper.testing import request

from ._services import POSTGRES_DSN
from .test_postgres_batch_lock_order import _blocked_by
from .test_postgres_together_lock_order import _waiting_on


def _absent(*agents: str) -> list[StreamChange]:
    return [StreamChange(a, absent=True) for a in agents]


async def test_absence_checks_given_in_opposite_orders_claim_in_agent_order(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check of ``[p, r, q]`` held ``p`` and waited on ``r`` (a third session creating
    it, not committed); a check of ``[q, p]`` then held ``q`` and waited on ``p``; ``r``
    released, the first went on to ``q``: a deadlock. Now the first claims ``p, q, r``
    and the second waits on ``p`` holding nothing."""
    monkeypatch.setattr(appends, "run_again", lambda attempt: attempt(False))
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        ):
            await other.execute(
                f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
                " VALUES ('r', 1, 0, 0)"
            )
            first = asyncio.ensure_future(
                backend.append_together([request("t", 0)], _absent("p", "r", "q"))
            )
            checker = await _waiting_on(watch, other.info.backend_pid)
            second = asyncio.ensure_future(
                backend.append_together([request("u", 0)], _absent("q", "p"))
            )
            await _waiting_on(watch, checker)
            await other.rollback()  # r stays absent: the first check goes on
            outcomes = await asyncio.wait_for(
                asyncio.gather(first, second, return_exceptions=True), timeout=60
            )
        assert list(outcomes) == [[AppendResult("t", 1, 1)], [AppendResult("u", 1, 1)]]
        assert [await backend.head(a) for a in ("p", "q", "r")] == [0, 0, 0]
    finally:
        await backend.close()


async def test_a_check_and_a_creation_after_a_change_lock_in_one_order(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete of ``y`` with the creation of ``x`` (one commit) held ``y``'s head (its
    delete waiting on a third session's KEY SHARE of ``y``'s events); a check of ``x``
    with an append to ``y`` then claimed ``x`` and waited on ``y``; released, the delete
    went on to create ``x``: a deadlock. Now the delete claims ``x`` first: the check
    waits on that claim holding nothing, then finds ``x`` created (its ConflictError)."""
    monkeypatch.setattr(appends, "run_again", lambda attempt: attempt(False))
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        await backend.append(request("y", 0))
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        ):
            await other.execute(f"SELECT 1 FROM {s}.sk_events WHERE agent_id = 'y' FOR KEY SHARE")
            deleting = asyncio.ensure_future(
                backend.append_together([request("x", 0)], [StreamChange("y", delete_at=1)])
            )
            deleter = await _waiting_on(watch, other.info.backend_pid)
            checking = asyncio.ensure_future(
                backend.append_together([request("y", 1)], _absent("x"))
            )
            checker = await _waiting_on(watch, deleter)
            await _blocked_by(watch, checker, deleter)
            await other.rollback()  # the delete goes on to create x
            outcomes = await asyncio.wait_for(
                asyncio.gather(deleting, checking, return_exceptions=True), timeout=60
            )
        assert outcomes[0] == [AppendResult("x", 1, 1)], outcomes[0]
        assert isinstance(outcomes[1], ConflictError), outcomes[1]
        assert (outcomes[1].agent_id, outcomes[1].current_seq) == ("x", 1)
        assert await backend.head("y") == 0
    finally:
        await backend.close()


async def test_a_check_and_a_new_agent_are_claimed_together(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check of ``x`` creating ``c`` claimed ``x``, then (its batch) ``c``: out of agent
    order. Held between the two (a hook), a check of ``c`` creating ``x`` claimed ``c``
    and waited on ``x``; let go, the first waited on ``c``: a deadlock. Now the first
    claims ``c`` and ``x`` together, in agent order, before anything else: the second
    waits on it holding nothing, then finds ``c`` created (its ConflictError)."""
    monkeypatch.setattr(appends, "run_again", lambda attempt: attempt(False))
    tried = together_locks.lock_together
    held: list[int] = []
    go = asyncio.Event()

    async def lock_together(sql: Any, conn: Any, requests: Any, *args: Any) -> None:
        await tried(sql, conn, requests, *args)
        if requests[0].agent_id == "c":  # (the first transaction: held here)
            held.append(conn.info.backend_pid)
            await go.wait()

    monkeypatch.setattr(appends, "lock_together", lock_together)
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    try:
        await backend.open()
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch:
            first = asyncio.ensure_future(backend.append_together([request("c", 0)], _absent("x")))
            for _ in range(6000):  # (polled: the condition, not a duration; bounded)
                if held or first.done():
                    break
                await asyncio.sleep(0.01)
            assert held, first
            second = asyncio.ensure_future(backend.append_together([request("x", 0)], _absent("c")))
            await _waiting_on(watch, held[0])
            go.set()
            outcomes = await asyncio.wait_for(
                asyncio.gather(first, second, return_exceptions=True), timeout=60
            )
        assert outcomes[0] == [AppendResult("c", 1, 1)], outcomes[0]
        assert isinstance(outcomes[1], ConflictError), outcomes[1]
        assert (outcomes[1].agent_id, outcomes[1].current_seq) == ("c", 1)
        assert await backend.head("x") == 0
    finally:
        await backend.close()
