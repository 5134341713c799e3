"""``stop_heartbeat()`` / ``release()`` end the heartbeat even when its cancellation is
lost below it.

A renewal in flight when the heartbeat is stopped is cancelled; a driver or pool may
lose that cancellation (psycopg_pool waits for a free connection through Python 3.11's
``asyncio.wait_for``, which returns the connection and drops a cancellation that
arrives as the connection does, gh-86296). The
heartbeat then went on renewing for ever while ``stop_heartbeat`` waited for it:
``release()`` never returned and the lease never expired — in the chaos test one worker
sat in ``release()`` holding its job's lease alive, and the other worker of the pool
could never take the job (CI stop 39)."""

from __future__ import annotations

import asyncio
from typing import Any

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.concurrency import LeaseManager


class LosesCancellation(MemoryBackend):
    """A backend whose lease renewals wait (a slow server) and, when cancelled while
    they wait, renew anyway and return — the cancellation lost in the driver."""

    def __init__(self) -> None:
        super().__init__()
        self.renewing = asyncio.Event()
        self.cancelled_renewals = 0

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> Any:
        self.renewing.set()
        try:
            await asyncio.Event().wait()  # the server is slow to answer
        except asyncio.CancelledError:
            self.cancelled_renewals += 1
            if self.cancelled_renewals > 1:
                raise  # (lost once: enough to show it; a test that fails ends cleanly)
            # ... and the cancellation goes no further
        return await super().renew_lease(agent_id, holder, token, ttl)


async def test_release_ends_a_heartbeat_whose_cancellation_was_lost() -> None:
    backend = LosesCancellation()
    async with StateStore(backend) as store:
        await store.save("job", {"units": 1})
        worker = LeaseManager(store, holder="p0", ttl=30.0)
        lease = await worker.acquire("job")
        lease.start_heartbeat(interval=0.01)
        await backend.renewing.wait()  # a renewal is in flight
        # the lost cancellation used to leave this waiting for ever: the limit only
        # ends a test that would otherwise hang
        released = await asyncio.wait_for(lease.release(), timeout=60)
        assert released is True
        assert backend.cancelled_renewals == 1
        # the job is free for the pool's next worker at once (not after the TTL)
        other = await LeaseManager(store, holder="p1", ttl=30.0).try_acquire("job")
        assert other is not None


async def test_stop_heartbeat_keeps_the_lease_but_stops_renewing() -> None:
    backend = LosesCancellation()
    async with StateStore(backend) as store:
        await store.save("job", {"units": 1})
        lease = await LeaseManager(store, holder="p0", ttl=30.0).acquire("job")
        task = lease.start_heartbeat(interval=0.01)
        await backend.renewing.wait()
        await asyncio.wait_for(lease.stop_heartbeat(), timeout=60)
        assert task.done()
        assert backend.cancelled_renewals == 1  # ended by the stop, not by the limit
        assert not lease.released  # stopping the heartbeat does not give the lease up
        assert await lease.release() is True
