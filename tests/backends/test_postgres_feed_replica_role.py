"""A writer whose session runs with ``session_replication_role = replica`` (set on its
role, or in its URL's ``options``: what bulk loads and replication tools use, and
ordinary triggers do not fire then) still marks its appends in flight for the change
feed: the feed's trigger is ``ENABLE ALWAYS`` (migration 13).

Before, the trigger did not fire in such a session: its append held no lock the
frontier could see, so while it waited to commit a later append by another process
was delivered, and the subscriber's cursor passed the first one's position for good
— an event stored and never delivered, without a word.

The append is held between taking its position and committing by a synchronous
standby that does not exist (``synchronous_standby_names``) on a private server; the
other writer commits locally (``synchronous_commit = local``). No timing: each step
waits for a condition.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from urllib.parse import quote

import psycopg
import pytest

from statekeeper import StateStore

from ._services import private_postgres

pytestmark = pytest.mark.slow


def _standby_names(dsn: str, names: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
        conn.execute("SELECT pg_reload_conf()")


def _waiting_or_done(task: asyncio.Task[object], waiting: Callable[[], bool]) -> bool:
    return task.done() or waiting()


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(2400):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"never: {what}")


async def test_an_append_of_a_replica_role_session_is_never_passed_over() -> None:
    with private_postgres() as server:
        base = f"{server.dsn}?schema=feed"
        replica_role = base + "&options=" + quote("-c session_replication_role=replica", safe="")
        local = base + "&options=" + quote("-c synchronous_commit=local", safe="")

        def waiting_for_standby() -> bool:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
                ).fetchone()
            return bool(row and row[0])

        async with (
            StateStore(base) as reader,
            StateStore(replica_role) as loader,
            StateStore(local) as other,
        ):
            await loader.save("a", {"v": 0})
            await other.save("b", {"v": 0})
            got: list[tuple[str, int]] = []

            async def follow() -> None:
                async for change in reader.subscribe():
                    got.append((change.agent_id, change.seq))

            following = asyncio.create_task(follow())
            try:
                await _until(lambda: len(got) == 2, "the first two events delivered")
                _standby_names(server.dsn, "nobody")
                early = 0  # the loader's appends committed before its session reloaded
                try:
                    while True:
                        held = asyncio.create_task(loader.save("a", {"v": early + 1}))
                        await _until(
                            functools.partial(_waiting_or_done, held, waiting_for_standby),
                            "the append waiting to commit, or committed",
                        )
                        if not held.done():
                            break
                        # its backend had not yet read the reloaded setting (a server
                        # signals its sessions and each reads the file at its next
                        # command): committed locally; the next append waits
                        await held
                        early += 1
                    await other.save("b", {"v": 1})  # a later position, committed
                    # the feed's head may not pass the position still to commit
                    # (3 + early): a subscriber would pass it for good (was: 4 + early)
                    _, head = await reader.feed_bounds()
                    assert head <= 2 + early
                finally:
                    _standby_names(server.dsn, "")
                await held
                await _until(lambda: len(got) == 4 + early, "every event delivered")
                assert sorted(got) == sorted(
                    [("a", s) for s in range(1, early + 3)] + [("b", 1), ("b", 2)]
                )
            finally:
                following.cancel()
                await asyncio.gather(following, return_exceptions=True)
