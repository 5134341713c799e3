"""LeaseManager and Lease: acquire, wait, renew (heartbeat), release, and fenced writes
through the store and a lease-bound DurableAgent."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend, SQLiteBackend
from statekeeper.concurrency import Lease, LeaseManager, default_holder
from statekeeper.errors import (
    ConfigurationError,
    InvalidArgument,
    LeaseHeld,
    LeaseLost,
    StatekeeperError,
    WriteBufferError,
)

from ..conftest import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """The backend's lease clock, moved by the test (starting at the wall clock's now):
    expiry never depends on how fast this machine runs the test."""
    return FakeClock(time.time())


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Any:
    if request.param == "memory":
        backend: MemoryBackend | SQLiteBackend = MemoryBackend(clock=clock)
    else:
        backend = SQLiteBackend(tmp_path / "l.db", clock=clock)
    async with StateStore(backend) as s:
        yield s


async def _renewed_after(manager: LeaseManager, clock: FakeClock, ttl: float) -> None:
    """Wait (a condition, not a delay) until the heartbeat renewed the lease at the
    clock's current time."""
    while True:
        current = await manager.current("a")
        assert current is not None and current.holder is not None
        if current.expires_at >= clock.now + ttl:
            return
        await asyncio.sleep(0.01)


async def test_acquire_wait_and_release(store: StateStore) -> None:
    alice, bob = LeaseManager(store, holder="alice"), LeaseManager(store, holder="bob")
    sent = time.monotonic()
    lease = await alice.acquire("a", ttl=5)
    assert isinstance(lease, Lease)
    assert lease.fence == ("alice", lease.token)
    # read the lease's clock first, then ours: the bound holds however long the
    # machine stalls between the two readings (the other order failed under load)
    left = lease.remaining()
    assert 5 - (time.monotonic() - sent) <= left <= 5
    with pytest.raises(LeaseHeld) as held:
        await bob.acquire("a")
    assert held.value.holder == "alice"
    assert await bob.try_acquire("a") is None

    async def release_soon() -> None:
        await asyncio.sleep(0.1)
        await lease.release()

    task = asyncio.create_task(release_soon())
    taken = await bob.acquire("a", wait=120)  # waits for the release (bound, not a pace)
    await task
    assert taken.token > lease.token
    assert lease.released and not await lease.release()  # idempotent
    assert (await alice.current("a")).holder == "bob"  # type: ignore[union-attr]


async def test_hold_heartbeats_past_the_ttl_and_releases(
    store: StateStore, clock: FakeClock
) -> None:
    workers = LeaseManager(store, holder="w1", ttl=0.6)
    async with workers.hold("a") as lease:
        for _ in range(5):  # 2.5 s of lease time: well past the TTL ...
            clock.advance(0.5)
            await _renewed_after(workers, clock, 0.6)  # ... the heartbeat keeps it
        with pytest.raises(LeaseHeld):
            await LeaseManager(store, holder="w2").acquire("a")
        await store.save("a", {"ok": True}, lease=lease)
        assert not lease.lost
    assert lease.released
    assert (await workers.current("a")).holder is None  # type: ignore[union-attr]


async def test_heartbeat_reports_a_lost_lease(store: StateStore, clock: FakeClock) -> None:
    lost: list[BaseException] = []
    lease = await LeaseManager(store, holder="w1").acquire("a", ttl=0.2)
    clock.advance(0.3)
    await LeaseManager(store, holder="w2").acquire("a", ttl=30)
    task = lease.start_heartbeat(interval=0.05, on_lost=lambda _, exc: lost.append(exc))
    await asyncio.wait_for(task, 5)
    assert lease.lost
    assert isinstance(lost[0], LeaseLost)
    with pytest.raises(LeaseLost):
        await lease.renew()
    assert await lease.release() is False


async def test_fenced_store_writes(store: StateStore, clock: FakeClock) -> None:
    old = await LeaseManager(store, holder="w1").acquire("a", ttl=0.2)
    await store.save("a", {"v": 1}, lease=old)
    await store.append("a", "note", {"x": 1}, lease=old)
    clock.advance(0.3)
    new = await LeaseManager(store, holder="w2").acquire("a", ttl=30)
    for write in (
        lambda: store.save("a", {"v": 2}, lease=old),
        lambda: store.save("a", {"v": 2}, lease=old, expected_seq=1),  # stale view too
        lambda: store.append("a", "note", {"x": 2}, lease=old),
    ):
        with pytest.raises(LeaseLost):
            await write()  # type: ignore[no-untyped-call]
    with pytest.raises(InvalidArgument):  # a lease on another agent (test_lease_other_agent)
        await store.create("b", {}, lease=old)
    assert (await store.load("a")).data == {"v": 1}
    assert await store.head("a") == 2
    await store.save("a", {"v": 3}, lease=new)
    assert (await store.load("a")).data == {"v": 3}


async def test_durable_agent_bound_to_a_lease_reverts_a_fenced_transition(
    store: StateStore, clock: FakeClock
) -> None:
    from statekeeper import StateTransition

    old = await LeaseManager(store, holder="w1").acquire("a", ttl=0.2)
    agent = await store.agent("a", lease=old)
    agent.data["step"] = 1
    await agent.save()
    clock.advance(0.3)
    new = await LeaseManager(store, holder="w2").acquire("a", ttl=30)
    before = agent.state
    with pytest.raises(LeaseLost):
        await agent.transition(StateTransition.START_PROCESSING)
    assert agent.state == before  # reverted: the write never happened
    taker = await store.agent("a", lease=new)
    taker.data["step"] = 2
    await taker.save()
    agent.bind(new)  # re-bound to the current lease, after a refresh it may write
    await agent.refresh()
    agent.data["step"] = 3
    await agent.save()
    assert (await store.load("a")).data == {"step": 3}


async def test_fenced_write_behind_fails_at_flush() -> None:
    backend = MemoryBackend()
    store = StateStore(backend, durability="async", flush_interval=10)
    old = await LeaseManager(store, holder="w1").acquire("a", ttl=30)
    await store.save("a", {"v": 1}, lease=old)
    await store.flush()
    await backend.release_lease("a", "w1", old.token)
    await LeaseManager(backend, holder="w2").acquire("a", ttl=30)
    await store.save("a", {"v": 2}, lease=old)  # buffered: accepted for now ...
    with pytest.raises(WriteBufferError) as info:  # ... refused when it is stored
        await store.flush()
    assert isinstance(info.value.failures["a"], LeaseLost)
    assert isinstance(info.value.failures["a"], StatekeeperError)
    await store.close()


def test_manager_arguments() -> None:
    with pytest.raises(ConfigurationError):
        LeaseManager(MemoryBackend(), ttl=0)
    with pytest.raises(ConfigurationError):
        LeaseManager(MemoryBackend(), holder="")
    a, b = default_holder(), default_holder()
    assert a != b and a.count(":") == 2


async def test_group_commit_keeps_fences(tmp_path: Any) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'g.db'}", durability="group") as store:
        lease = await LeaseManager(store, holder="w1").acquire("a", ttl=30)
        await asyncio.gather(
            *(store.save(f"x{i}", {"i": i}) for i in range(5)),
            store.save("a", {"v": 1}, lease=lease),
        )
        await store.backend.release_lease("a", "w1", lease.token)
        results = await asyncio.gather(
            store.save("a", {"v": 2}, lease=lease),
            *(store.save(f"y{i}", {"i": i}) for i in range(5)),
            return_exceptions=True,
        )
        assert isinstance(results[0], LeaseLost)
        assert all(not isinstance(r, BaseException) for r in results[1:])
        assert (await store.load("a")).data == {"v": 1}


async def test_a_released_lease_is_reported_as_released(store: StateStore) -> None:
    lease = await LeaseManager(store, holder="B").acquire("a", ttl=30)
    await store.save("a", {"v": 1}, lease=lease)
    assert await lease.release()
    for refused in (lease.renew(), store.save("a", {"v": 2}, lease=lease)):
        with pytest.raises(LeaseLost) as lost:
            await refused
        message = str(lost.value)
        assert "lease token 1 of 'B' was released" in message
        assert "None" not in message and "stale" not in message
        assert (lost.value.token, lost.value.current_token) == (1, 1)
        assert lost.value.current_holder is None
    # an older token, after a newer lease was granted and released: stale, not "None"
    newer = await LeaseManager(store, holder="C").acquire("a", ttl=30)
    await newer.release()
    with pytest.raises(LeaseLost) as lost:
        await store.save("a", {"v": 3}, lease=lease)
    assert "is stale (newest is 2, since released)" in str(lost.value)
    assert (await store.load("a")).data == {"v": 1}
