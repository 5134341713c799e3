"""A caller cancelled while ``Lease.stop_heartbeat()`` (and so ``release()``, ``hold``'s
exit) waited for the heartbeat task to end had its cancellation swallowed — the
wait was ``with suppress(CancelledError): await task`` — so ``release()`` went on and
returned as if never cancelled (``asyncio.timeout`` around it never fired, a
cancelled task group's member kept running). The heartbeat's own cancellation is
still absorbed; the caller's is raised."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager


async def _slow_renewal(
    monkeypatch: pytest.MonkeyPatch, store: StateStore
) -> tuple[asyncio.Event, asyncio.Event]:
    """The heartbeat's renewal waits for ``finish``; cancelled, it still waits for it
    before it ends (a driver finishing its I/O before it honours the cancel)."""
    entered, finish = asyncio.Event(), asyncio.Event()
    real = store.backend.renew_lease

    async def slow(*args: Any) -> Any:
        entered.set()
        try:
            await finish.wait()
        except asyncio.CancelledError:
            await finish.wait()
            raise
        return await real(*args)

    monkeypatch.setattr(store.backend, "renew_lease", slow)
    return entered, finish


@pytest.mark.parametrize("call", ["stop_heartbeat", "release"])
async def test_a_cancelled_stop_raises_the_cancellation(
    monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    async with StateStore("memory://") as store:
        lease = await LeaseManager(store, holder="w1", ttl=60).acquire("job")
        entered, finish = await _slow_renewal(monkeypatch, store)
        lease.start_heartbeat(interval=0.001)
        await entered.wait()
        task = asyncio.ensure_future(getattr(lease, call)())
        await asyncio.sleep(0)  # one step: the call now waits for the heartbeat's end
        assert lease._heartbeat is None and not task.done()
        task.cancel()
        finish.set()
        with pytest.raises(asyncio.CancelledError):  # (was: returned)
            await task
        assert not lease.released  # nothing sent after the cancellation
        stored = await store.backend.get_lease("job")
        assert stored is not None and stored.holder == "w1"
        assert await lease.release() is True  # and a release after it works


async def test_a_timeout_around_release_fires() -> None:
    """Without a slow heartbeat nothing changes: release() under a generous timeout."""
    async with StateStore("memory://") as store:
        lease = await LeaseManager(store, holder="w1", ttl=60).acquire("job")
        lease.start_heartbeat(interval=0.001)
        async with asyncio.timeout(30):
            assert await lease.release() is True


@pytest.mark.parametrize("renewing", [False, True])
async def test_a_cancelled_hold_block_still_releases(
    monkeypatch: pytest.MonkeyPatch, renewing: bool
) -> None:
    """The block of ``hold()`` cancelled (also while a renewal is in flight): its exit
    stops the heartbeat and releases — the cancellation that ended the block is not
    one of the stop's own."""
    async with StateStore("memory://") as store:
        manager = LeaseManager(store, holder="w1", ttl=60)
        inside = asyncio.Event()
        entered, finish = await _slow_renewal(monkeypatch, store)

        async def work() -> None:
            async with manager.hold("job"):
                inside.set()
                await asyncio.Event().wait()

        if renewing:
            monkeypatch.setattr(manager, "ttl", 0.003)  # a beat every millisecond
        task = asyncio.ensure_future(work())
        await inside.wait()
        if renewing:
            await entered.wait()
        task.cancel()
        finish.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        stored = await store.backend.get_lease("job")
        assert stored is not None and stored.holder is None
