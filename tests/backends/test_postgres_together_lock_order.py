"""PostgreSQL: an ``append_together`` with changes locks the lease rows, then the head
rows, of every agent it names in agent order first, as a group-commit batch (migrations
16 and 17) and a page of rewrites (``rw_many_lock``) do, so it never deadlocks with them.

Its changes took their heads' locks in the caller's order (a delete, a prune, a rewrite:
its agent's head), then its appends' in the batch's: a governed delete of ``b`` (the
change) with its audit entry (an append to the audit log, ``\\x01sk-audit/log``: first
in agent order) held ``b`` and then waited for the log's head, while a governed save to
``b`` (a set-based batch ``[log, b]``) held the log's head and waited for ``b``: a
deadlock, PostgreSQL aborting one after ``deadlock_timeout`` (a second lost, the
victim's work done again). So did a schema migration's page (``rewrite_with``: its
rewrites as changes, in page order, then the entry). The interleaving is made
deterministic here: a third session holds a row of ``b``'s events in KEY SHARE, which
the delete waits on holding ``b``'s head; the batch ``[a, b]`` then locks ``a`` and
waits on ``b``. Released, the delete went on to its append to ``a``: a deadlock. Now the
delete's transaction locks ``a`` and ``b`` first; the batch waits on ``a`` holding
nothing, and runs once the delete committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import psycopg
import pytest

import statekeeper.backends.postgres.appends as appends
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConflictError, LeaseLost
from statekeeper.records import AppendResult, LeaseChange, StreamChange
from statekeeper.testing import request

from ._services import POSTGRES_DSN
from .test_postgres_batch_lock_order import _blocked_by, batch_call


async def _waiting_on(watch: psycopg.AsyncConnection, holder: int) -> int:
    """The session that waits on a lock session ``holder`` holds (polled: the condition,
    not a duration; bounded)."""
    for _ in range(6000):
        cur = await watch.execute(
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder,)
        )
        row = await cur.fetchone()
        if row is not None:
            return int(row[0])
        await asyncio.sleep(0.01)
    raise AssertionError(f"no session waited on session {holder}")


async def test_a_change_and_an_append_of_other_agents_lock_in_agent_order(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one try: a deadlock the library would run again (rolled_back.run_again) is seen
    monkeypatch.setattr(appends, "run_again", lambda attempt: attempt(False))
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    s = '"' + schema.replace('"', '""') + '"'
    none = [None, None]
    params = (
        ["a", "b"], [1, 1], [1, 1], none, none, none, none, none,
        [2, 2], ["e", "e"], [1.0, 1.0], [b"x", b"y"], [b"c", b"c"], none, [False, False],
        none, none, none,
    )  # fmt: skip
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as batch,
        ):
            await other.execute(f"SELECT 1 FROM {s}.sk_events WHERE agent_id = 'b' FOR KEY SHARE")
            # a delete of b (its head locked, then its events: waits on `other`) and an
            # append to a, in one transaction
            together = asyncio.ensure_future(
                backend.append_together([request("a", 1)], [StreamChange("b", delete_at=1)])
            )
            deleting = await _waiting_on(watch, other.info.backend_pid)
            batching = asyncio.ensure_future(batch.execute(batch_call(schema), params))
            await _blocked_by(watch, batch.info.backend_pid, deleting)
            await other.rollback()  # the delete goes on to its append to a
            failed: list[BaseException] = []
            rows: list[tuple[Any, ...]] = []
            try:
                await asyncio.wait_for(together, timeout=60)
            except Exception as exc:  # (the library's BackendError, of a deadlock)
                failed.append(exc)
            try:
                cur = await asyncio.wait_for(batching, timeout=60)
                rows = await cur.fetchall()
                await batch.commit()
            except psycopg.errors.DeadlockDetected as exc:
                failed.append(exc)
            assert failed == []
            # the batch ran after the delete: a's head had moved, b was gone
            assert [(idx, status) for idx, status, *_ in rows] == [(1, 2), (2, 2)]
        assert [e.seq for e in await backend.read("a")] == [1, 2]
        assert await backend.head("b") == 0
    finally:
        await backend.close()


async def test_a_lease_change_and_a_fenced_append_lock_leases_before_heads(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete of ``a`` with an append to ``b`` under ``b``'s lease held ``a``'s head,
    then waited for ``b``'s lease (its fence); a release of ``b``'s lease with an append to
    ``a`` held that lease, then waited for ``a``'s head: a deadlock. Now each locks ``b``'s
    lease first: the release waits there holding nothing."""
    monkeypatch.setattr(appends, "run_again", lambda attempt: attempt(False))
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
        token = (await backend.acquire_lease("b", "h", 600)).token
        fenced = dataclasses.replace(request("b", 1), fence=("h", token))
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        ):
            await other.execute(f"SELECT 1 FROM {s}.sk_events WHERE agent_id = 'a' FOR KEY SHARE")
            deleting = asyncio.ensure_future(
                backend.append_together([fenced], [StreamChange("a", delete_at=1)])
            )
            deleter = await _waiting_on(watch, other.info.backend_pid)
            release = StreamChange("b", lease=LeaseChange("h", token))
            releasing = asyncio.ensure_future(backend.append_together([request("a", 1)], [release]))
            await _waiting_on(watch, deleter)
            await other.rollback()  # the delete goes on to its fenced append to b
            outcomes = await asyncio.wait_for(
                asyncio.gather(deleting, releasing, return_exceptions=True), timeout=60
            )
        # the delete and b's append landed; the release came after: a had moved (gone)
        assert outcomes[0] == [AppendResult("b", 2, 2)]
        assert isinstance(outcomes[1], ConflictError), outcomes[1]
        assert await backend.head("a") == 0
        assert [e.seq for e in await backend.read("b")] == [1, 2]
    finally:
        await backend.close()


async def test_changes_alone_lock_leases_then_heads_in_agent_order(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes alone (no append: ``.alone``) take the same locks first. A delete of ``b``
    with a grant of ``a``'s lease held ``b``'s head, then waited for ``a``'s lease; a
    release of ``a``'s lease with a delete of ``b`` held that lease, then waited for
    ``b``'s head: a deadlock (second read of h/pgrunlock: the path was not covered). Now
    the release waits on ``a``'s lease holding nothing."""
    import statekeeper.backends.postgres.alone as alone

    monkeypatch.setattr(alone, "run_again", lambda attempt: attempt(False))
    seen: list[BaseException] = []
    tried = appends.Appends._together

    async def together(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await tried(self, *args, **kwargs)
        except psycopg.errors.DeadlockDetected as exc:  # (else retried: .alone)
            seen.append(exc)
            raise

    monkeypatch.setattr(appends.Appends, "_together", together)
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    s = '"' + schema.replace('"', '""') + '"'
    try:
        await backend.open()
        await backend.append_batch([request("a", 0), request("b", 0)])
        token = (await backend.acquire_lease("a", "h", 600)).token
        async with (
            await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
            await psycopg.AsyncConnection.connect(POSTGRES_DSN) as other,
        ):
            await other.execute(f"SELECT 1 FROM {s}.sk_events WHERE agent_id = 'b' FOR KEY SHARE")
            grant = StreamChange("a", lease=LeaseChange("h", token + 1, 600))
            deleting = asyncio.ensure_future(
                backend.append_together([], [StreamChange("b", delete_at=1), grant])
            )
            deleter = await _waiting_on(watch, other.info.backend_pid)
            release = StreamChange("a", lease=LeaseChange("h", token))
            releasing = asyncio.ensure_future(
                backend.append_together([], [release, StreamChange("b", delete_at=1)])
            )
            await _waiting_on(watch, deleter)
            await other.rollback()  # the delete goes on to its grant of a's lease
            outcomes = await asyncio.wait_for(
                asyncio.gather(deleting, releasing, return_exceptions=True), timeout=60
            )
        assert seen == []
        # the delete and the grant landed; the release came after: its token was stale
        assert outcomes[0] == [], outcomes[0]
        assert isinstance(outcomes[1], (LeaseLost, ConflictError)), outcomes[1]
        assert await backend.head("b") == 0
        lease = await backend.get_lease("a")
        assert lease is not None and (lease.holder, lease.token) == ("h", token + 1)
    finally:
        await backend.close()
