"""A lease's ``remaining()`` counts the time a suspended machine was paused
(trialtime): it was measured on ``time.monotonic``, which Linux stops during a
suspend, so a holder resumed after a VM pause longer than its TTL was told its lease
had most of its time left while the backend's clock had expired it and another worker
held it. (Writes stay fenced either way; ``remaining()`` is what a holder consults
before work outside the store.)"""

from __future__ import annotations

import time

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import LeaseLost

BOOT = getattr(time, "CLOCK_BOOTTIME", None)
pytestmark = pytest.mark.skipif(BOOT is None, reason="no CLOCK_BOOTTIME on this system")


class Suspend:
    """The clocks a suspend moves: the wall clock (the backend's lease expiry) and the
    boot-time clock; ``time.monotonic`` (CLOCK_MONOTONIC) does not move."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paused = 0.0
        self.wall = time.time()
        real = time.clock_gettime

        def clock_gettime(clock_id: int) -> float:
            return real(clock_id) + (self.paused if clock_id == BOOT else 0.0)

        monkeypatch.setattr(time, "clock_gettime", clock_gettime)

    def clock(self) -> float:
        return self.wall + self.paused

    def pause(self, seconds: float) -> None:
        self.paused += seconds


async def test_a_lease_is_not_told_to_have_time_left_after_a_suspend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    suspend = Suspend(monkeypatch)
    backend = MemoryBackend(clock=suspend.clock)
    async with StateStore(backend) as store:
        holder = LeaseManager(store, holder="A", ttl=30)
        lease = await holder.acquire("job")
        assert 29 < lease.remaining() <= 30
        monotonic_before = time.monotonic()
        suspend.pause(120)  # the VM is paused for two minutes, then resumes
        assert time.monotonic() - monotonic_before < 5  # (CLOCK_MONOTONIC stood still)
        assert lease.remaining() < 0
        other = await LeaseManager(store, holder="B", ttl=30).acquire("job")
        with pytest.raises(LeaseLost):
            await store.save("job", {"by": "A"}, lease=lease)
        await store.save("job", {"by": "B"}, lease=other)
