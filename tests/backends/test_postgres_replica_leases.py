"""A lease holder reads the agent as the previous holder left it, through a lagging
read replica: the grant is a write of this process, so its reads see what was
committed before it (was: the new holder loaded the state from before the previous
holder's work, its recorded step said "recorded, but that event cannot be read")."""

from __future__ import annotations

from urllib.parse import quote

import pytest

pytest.importorskip("psycopg")

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager, Steps

from .test_postgres_replica import ReplicaPair, pair  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow


async def test_the_next_lease_holder_reads_the_previous_holders_work(
    pair: ReplicaPair,  # noqa: F811 (the fixture)
) -> None:
    url = f"{pair.primary.dsn}?schema=agents&replica_url={quote(pair.replica_dsn, safe='')}"
    async with StateStore(url) as first, StateStore(url) as second:
        await first.save("job", {"units": 2})
        pair.caught_up()
        assert (await second.load("job")).data == {"units": 2}  # second reads the replica
        pair.pause()  # the replica lags from here on
        try:
            async with LeaseManager(first, holder="first").hold("job") as lease:
                agent = await first.agent("job", lease=lease)
                agent.data["charged"] = True  # committed with the step's record
                assert await Steps(agent).run("charge", lambda: {"charge": 7}) == {"charge": 7}
            # the first worker let go: the second takes over
            lease = await LeaseManager(second, holder="second").acquire("job")
            agent = await second.agent("job", lease=lease)
            assert agent.data == {"units": 2, "charged": True}
            record = await Steps(agent).recorded("charge")
            assert record is not None and record.result == {"charge": 7}
            await lease.release()
        finally:
            pair.resume()


async def test_a_step_recorded_by_another_process_is_read_back_through_a_lagging_replica(
    pair: ReplicaPair,  # noqa: F811 (the fixture)
) -> None:
    """The key lookup (on the primary) finds the step's record: reading that record
    must not go to a replica that has not replayed it (was: StepError, "recorded at
    seq 2, but that event cannot be read", for a process that had written nothing)."""
    url = f"{pair.primary.dsn}?schema=agents&replica_url={quote(pair.replica_dsn, safe='')}"
    async with StateStore(url) as worker, StateStore(url) as watcher:
        await worker.save("job", {"units": 2})
        pair.caught_up()
        assert (await watcher.load("job")).data == {"units": 2}  # watcher reads the replica
        pair.pause()
        try:
            assert await Steps(worker, "job").run("charge", lambda: {"charge": 7}) == {"charge": 7}
            record = await Steps(watcher, "job").recorded("charge")
            assert record is not None and record.result == {"charge": 7}
            # and running it there returns the record instead of charging again
            assert await Steps(watcher, "job").run("charge", lambda: {"charge": 8}) == {"charge": 7}
        finally:
            pair.resume()
