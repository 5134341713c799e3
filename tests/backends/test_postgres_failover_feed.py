"""The change feed after a failover that lost the newest commits.

A primary acknowledges appends its standby has not received (asynchronous streaming
replication), dies, and the standby is promoted: the feed keeps its id, but the lost
positions are handed out again, to the events written next. Before, a subscriber whose
cursor had passed the lost positions resumed after them on the new primary and never
saw the events stored there, without a word. Its cursor now names the last event it
passed, and the resume is refused with ``FeedRewound``.

The test starts its own primary and standby (``test_postgres_replica.ReplicaPair``),
stops the standby so the primary's next commits never reach it, and promotes it once
the primary is stopped: conditions, never durations.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from statekeeper import StateStore
from statekeeper.errors import FeedChanged, FeedRewound

from .test_postgres_replica import ReplicaPair

pytestmark = pytest.mark.slow


@pytest.fixture
def pair() -> Iterator[ReplicaPair]:
    servers = ReplicaPair()
    try:
        yield servers
    finally:
        servers.close()


def _fail_over(pair: ReplicaPair) -> str:
    """Stop the primary at once and promote the standby; the new primary's DSN."""
    pair.primary._ctl("-m", "immediate", "stop")
    pair._ctl(
        "-o",
        f"-p {pair.port} -k {pair.primary.dir} -c listen_addresses=127.0.0.1",
        "-l",
        os.path.join(pair.primary.dir, "replica.log"),
        "start",
    )
    pair._ctl("promote")
    return pair.replica_dsn + "?schema=agents"


async def test_a_cursor_past_positions_a_failover_lost_is_refused(pair: ReplicaPair) -> None:
    async with StateStore(pair.primary.dsn + "?schema=agents", witness=False) as store:
        for i in range(3):
            await store.save(f"kept-{i}", {"i": i})
        assert len([c async for c in store.subscribe(stop_at_head=True)]) == 3  # (the feed id)
    pair.caught_up()
    pair.stop_replica()  # what the primary commits now never reaches the standby
    async with StateStore(pair.primary.dsn + "?schema=agents", witness=False) as store:
        for i in range(60):  # past the sequence's logged range (32 values)
            await store.save(f"lost-{i}", {"i": i})
        sub = store.subscribe(stop_at_head=True)
        assert len([c async for c in sub]) == 63
        cursor = str(sub.cursor)

    async with StateStore(_fail_over(pair), witness=False) as store:
        for i in range(40):
            await store.save(f"new-{i}", {"i": i})
        every = [c.agent_id async for c in store.subscribe(stop_at_head=True)]
        assert every[:3] == ["kept-0", "kept-1", "kept-2"] and len(every) == 43
        with pytest.raises(FeedRewound) as raised:
            # before: 10 of the 40 new events, the 30 at the reused positions skipped
            [c async for c in store.subscribe(from_position=cursor, stop_at_head=True)]
        assert isinstance(raised.value, FeedChanged) and raised.value.position == 63


async def test_a_live_subscription_across_the_failover_is_told(pair: ReplicaPair) -> None:
    """The subscriber stays subscribed (its URL names both servers; the promoted one
    takes over): its next page starts at the event its cursor passed, checked."""
    both = (
        "postgresql://postgres@/postgres?host=127.0.0.1,127.0.0.1"
        f"&port={pair.primary.port},{pair.port}&target_session_attrs=read-write"
        "&schema=agents&connect_timeout=2&retry_timeout=30"
    )
    async with StateStore(both, witness=False) as follower:
        for i in range(3):
            await follower.save(f"kept-{i}", {"i": i})
        sub = follower.subscribe()
        assert len(await sub.next_batch(10)) == 3
        await asyncio.to_thread(pair.caught_up)
        pair.stop_replica()
        for i in range(60):
            await follower.save(f"lost-{i}", {"i": i})
        taken = 0
        while taken < 60:
            taken += len(await sub.next_batch(100))

        async with StateStore(_fail_over(pair), witness=False) as store:
            for i in range(40):
                await store.save(f"new-{i}", {"i": i})
        with pytest.raises(FeedRewound):
            # before: the 10 new events past position 63; the 30 below it never seen
            await asyncio.wait_for(sub.next_batch(100), 120)
