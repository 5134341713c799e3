"""A page of rewrites on PostgreSQL (``rewrite_many``, the ``rw_many`` statement) racing
a prune of one of its agents.

``rw_many`` checked each request's events against the stream's first stored event
(the pruned base) in the statement's snapshot, taken BEFORE it locked the head rows.
A prune holding the head row's lock (``prune_lock``) and committing while the page
waited for it was not seen by that check: the request was answered True (applied),
its stored events and head tag rewritten, the pruned events it named "rewritten" in
nothing (the UPDATE skipped the rows deleted meanwhile) and its snapshots below the
new base written back — success reported for a rewrite of events that were gone,
where the same request after the prune is refused with ConfigurationError
(conformance ``test_rewrite_of_a_pruned_event_is_refused``). Now the head rows are
locked first and the check and the writes run in a statement after the locks (its
snapshot sees every prune committed before): the prune came first, so the request
is refused the same way, nothing of it written.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.errors import ConfigurationError
from statekeeper.records import RawEvent, RawSnapshot, RewriteRequest
from statekeeper.testing import request, tagged

from ._services import POSTGRES_DSN


async def _waiting_on_a_lock(watch: psycopg.AsyncConnection, schema: str, not_pid: int) -> None:
    """Until a session other than ``not_pid`` waits on a lock in a statement of ``schema``."""
    while True:
        cur = await watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND pid <> %s AND position(%s in query) > 0",
            (not_pid, schema),
        )
        row = await cur.fetchone()
        if row is not None and row[0]:
            return
        await asyncio.sleep(0.01)  # (polled: the condition, not a duration)


async def _racing_a_prune(
    backend: PostgresBackend, schema: str, page: list[RewriteRequest]
) -> list[bool]:
    """``rewrite_many(page)`` started while a prune of ``a`` to seq 3 holds its head row,
    the prune committed once the page waits for that lock."""
    async with (
        backend._connection() as pruning,
        await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as watch,
    ):
        async with pruning.transaction():
            await backend._prune_in(pruning, "a", 3, ())
            rewriting = asyncio.create_task(backend.rewrite_many(page))
            await _waiting_on_a_lock(watch, schema, pruning.info.backend_pid)
        # the prune committed: the page, waiting on its lock, comes after it
        return await rewriting


@pytest.mark.parametrize("with_other", [False, True])
async def test_a_page_naming_events_pruned_while_it_waited_is_refused(
    schema: str, with_other: bool
) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=3)
    try:
        await backend.open()
        await backend.append(request("a", 0, 2, snap_at=2))
        await backend.append(request("a", 2, snap_at=3))
        await backend.append(tagged(request("a", 3, 3), b"t6"))
        await backend.append(request("c", 0))
        kept = RawEvent(4, "patch", 4.0, b"changed-4", b"sum-4'")
        pruned = RawEvent(3, "patch", 3.0, b"changed-3", b"sum-3'")
        below = RawSnapshot(2, 2.0, b"state@2 new", b"ck2'")  # dropped by the prune
        bad = RewriteRequest("a", 6, b"t6", (kept, pruned), (below,), head_tag=b"t6'")
        other = RewriteRequest("c", 1, None, (RawEvent(1, "patch", 1.0, b"c1 v2", b"s"),))
        page = [other, bad] if with_other else [bad]
        with pytest.raises(ConfigurationError, match=r"'a'.* seq 3\b.* up to seq 3\b"):
            await _racing_a_prune(backend, schema, page)
        # nothing of the request written: the prune's result as it committed it
        events = await backend.read("a")
        assert [e.seq for e in events] == [4, 5, 6]
        assert events[0].payload != kept.payload
        assert await backend.head_tag("a") == (6, b"t6")
        assert await backend.latest_snapshot("a", 2) is None  # not written back
        assert (await backend.latest_snapshot("a", 3)) is not None  # the new base's
        # the stored events still rewrite, under the new base
        assert await backend.rewrite_many([RewriteRequest("a", 6, b"t6", (kept,))]) == [True]
        assert (await backend.read("a"))[0] == kept
    finally:
        await backend.close()
