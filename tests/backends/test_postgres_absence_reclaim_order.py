"""PostgreSQL: an absence check that must claim an agent again (its head row was there
at the claim, deleted before its read) does so holding nothing — the try rolled back
and run again — so it keeps the one order of every write: claims, then heads.

The check claimed again in place, holding what it had taken: the claims of agents
after the one claimed again, or the lock of a head row at 0 (one a failed write left:
``absent_heads`` locks it, a creation takes it over after its own claims, as a head). A
check of ``a`` and ``b`` held one and found the other deleted meanwhile; a transaction
creating that one with a check of the first claimed it and waited on the first; the
check then claimed it again and waited on it: a deadlock, PostgreSQL aborting one after
``deadlock_timeout``.

Deterministic: a third session holds ``b``'s row while the first check waits on it,
then deletes it; a hook holds the first check where it claims ``b`` again (never a
sleep). A deadlock is let through to the caller here (the library would run its victim
again: a second lost).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest

import statekeeper.backends.postgres.absence as absence
import statekeeper.backends.postgres.appends as appends
import statekeeper.backends.postgres.together_locks as together_locks
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres.rolled_back import RolledBack
from statekeeper.errors import ConflictError
from statekeeper.records import AppendResult, StreamChange
from statekeeper.testing import request

from ._services import POSTGRES_DSN
from .test_postgres_together_lock_order import _waiting_on

T = TypeVar("T")


async def _deadlocks_seen(attempt: Callable[[bool], Awaitable[T]]) -> T:
    """run_again, but a deadlock reaches the caller (any other roll-back runs again)."""
    for _ in range(4):
        try:
            return await attempt(True)
        except RolledBack as exc:
            if isinstance(exc.__cause__, psycopg.errors.DeadlockDetected):
                raise exc.__cause__ from None
    return await attempt(False)


class _Held:
    """``conn``, its claim of ``agent`` alone (a claim again, in place) held until ``go``."""

    def __init__(self, conn: Any, sql: Any, agent: str, go: asyncio.Event, held: list[int]):
        self._conn, self._sql, self._agent, self._go, self._held = conn, sql, agent, go, held

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def execute(self, query: Any, params: Any = None) -> Any:
        if query is self._sql["absent_claim"] and list(params[0]) == [self._agent]:
            self._held.append(self._conn.info.backend_pid)
            await self._go.wait()
        return await self._conn.execute(query, params)


async def _interleave(
    schema: str, monkeypatch: pytest.MonkeyPatch, deleted: str, left_at_0: bool
) -> None:
    """A check of ``a`` and ``b`` creating ``t``: ``deleted`` (stored) deleted meanwhile,
    the other agent absent (a head row at 0 left, when ``left_at_0``); then a transaction
    creating ``deleted`` with a check of the other. The second commits, the first (run
    again) finds ``deleted`` created: its ConflictError. Was: a deadlock."""
    monkeypatch.setattr(appends, "run_again", _deadlocks_seen)
    kept = "b" if deleted == "a" else "a"
    real = absence.absent_in
    held: list[int] = []
    go = asyncio.Event()
    tries: list[int] = []

    async def absent_in(sql: Any, conn: Any, agent_ids: Any, *args: Any, **kw: Any) -> None:
        if sorted(agent_ids) == ["a", "b"]:  # (the first check: held where it claims again)
            tries.append(conn.info.backend_pid)
            if len(tries) > 1:  # (its try run again: it claims the deleted agent there)
                held.append(conn.info.backend_pid)
                await go.wait()
            conn = _Held(conn, sql, deleted, go, held)
        await real(sql, conn, agent_ids, *args, **kw)

    monkeypatch.setattr(together_locks, "absent_in", absent_in)
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        await backend.append(request(deleted, 0))
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        ):
            if left_at_0:  # a head row at 0, committed: a claim a failed write left
                await watch.execute(
                    f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
                    " VALUES (%s, 0, 0, 0)",
                    (kept,),
                )
            await other.execute(
                f"SELECT 1 FROM {s}.sk_agents WHERE agent_id = %s FOR KEY SHARE", (deleted,)
            )
            first = asyncio.ensure_future(
                backend.append_together(
                    [request("t", 0)],
                    [StreamChange("a", absent=True), StreamChange("b", absent=True)],
                )
            )
            await _waiting_on(watch, other.info.backend_pid)  # (reading the deleted's head)
            await other.execute(f"DELETE FROM {s}.sk_events WHERE agent_id = %s", (deleted,))
            await other.execute(f"DELETE FROM {s}.sk_agents WHERE agent_id = %s", (deleted,))
            await other.commit()  # deleted meanwhile: the first claims it again
            for _ in range(6000):  # (polled: the condition, not a duration; bounded)
                if held or first.done():
                    break
                await asyncio.sleep(0.01)
            assert held, first
            second = asyncio.ensure_future(
                backend.append_together([request(deleted, 0)], [StreamChange(kept, absent=True)])
            )
            for _ in range(6000):  # (polled) the second waits on the first, or is done
                cur = await watch.execute(
                    "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    (held[0],),
                )
                if await cur.fetchone() is not None or second.done():
                    break
                await asyncio.sleep(0.01)
            go.set()
            outcomes = await asyncio.wait_for(
                asyncio.gather(first, second, return_exceptions=True), timeout=60
            )
        assert outcomes[1] == [AppendResult(deleted, 1, 1)], outcomes
        assert isinstance(outcomes[0], ConflictError), outcomes
        assert (outcomes[0].agent_id, outcomes[0].current_seq) == (deleted, 1)
        assert [await backend.head(x) for x in (kept, deleted, "t")] == [0, 1, 0]
    finally:
        await backend.close()


async def test_a_check_claiming_again_holds_no_head_row_at_0(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a``'s head row at 0 (left) locked, ``b`` deleted meanwhile, claimed again."""
    await _interleave(schema, monkeypatch, deleted="b", left_at_0=True)


async def test_a_check_claiming_again_holds_no_later_claim(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``b`` claimed (absent), ``a`` deleted meanwhile, claimed again: out of order."""
    await _interleave(schema, monkeypatch, deleted="a", left_at_0=False)
