"""A lease fences writes of its own agent only.

Fencing tokens count per agent (each agent's first lease is token 1), so the backend's
token check alone took holder A's lease on ``M/p`` for its lease on ``M/q``: the
store refuses a lease granted on another agent, on every path that takes one, before
anything is written (and, where a callback or step would run first, before it runs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore, StateTransition
from statekeeper.concurrency import Lease, LeaseManager, Steps, update
from statekeeper.errors import InvalidArgument


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'l.db'}"
    async with StateStore(url) as s:
        yield s


async def _two_leases(store: StateStore) -> tuple[Lease, Lease]:
    """Holder A's leases on ``M/p`` and ``M/q`` (``M/q`` stored): both token 1."""
    manager = LeaseManager(store, holder="A", ttl=30)
    await store.save("M/q", {"n": 0})
    p, q = await manager.acquire("M/p"), await manager.acquire("M/q")
    assert p.fence == q.fence == ("A", 1)  # the same fence: only the agent tells them apart
    return p, q


def _names_both(error: pytest.ExceptionInfo[InvalidArgument], target: str = "M/q") -> None:
    assert error.value.argument == "lease"
    assert "'M/p'" in str(error.value) and repr(target) in str(error.value)
    assert "nothing was written" in str(error.value)


async def test_store_writes_refuse_another_agents_lease(store: StateStore) -> None:
    p, q = await _two_leases(store)
    writes: list[Callable[[], Awaitable[Any]]] = [
        lambda: store.save("M/q", {"n": 1}, lease=p),
        lambda: store.save("M/q", {"n": 1}, lease=p, expected_seq=1, idempotency_key="k"),
        lambda: store.append("M/q", "note", {}, ops=[], lease=p),
        lambda: store.save("M/q", {"n": 1}, lease=_info(p)),
    ]
    for write in writes:
        with pytest.raises(InvalidArgument) as error:
            await write()
        _names_both(error)
    with pytest.raises(InvalidArgument) as error:
        await store.create("M/new", {}, lease=p)
    _names_both(error, "M/new")
    assert (await store.load("M/q")).data == {"n": 0}
    assert await store.head("M/q") == 1
    assert await store.get("M/new") is None
    await store.save("M/q", {"n": 2}, lease=q)  # its own lease still writes
    assert (await store.load("M/q")).data == {"n": 2}


def _info(lease: Lease) -> Any:
    """The :class:`~statekeeper.records.LeaseInfo` of ``lease`` (also a ``Leased``)."""
    from statekeeper.records import LeaseInfo

    return LeaseInfo(lease.stored_id, lease.holder, lease.token, lease.expires_at)


async def test_agents_and_helpers_refuse_another_agents_lease(store: StateStore) -> None:
    p, q = await _two_leases(store)
    with pytest.raises(InvalidArgument) as error:
        await store.agent("M/q", lease=p)
    _names_both(error)
    agent = await store.agent("M/q", lease=q)
    with pytest.raises(InvalidArgument) as error:
        agent.bind(p)
    _names_both(error)
    assert agent.lease is q  # unchanged
    # a lease set on the attribute by hand is refused at the write
    agent.lease = p
    agent.data["n"] = 1
    with pytest.raises(InvalidArgument):
        await agent.save()
    with pytest.raises(InvalidArgument):
        await agent.transition(StateTransition.START_PROCESSING)
    agent.lease = q
    await agent.refresh()  # (drop the change never written)

    ran: list[str] = []

    def change(data: dict[str, Any]) -> None:
        ran.append("fn")
        data["n"] = 9

    with pytest.raises(InvalidArgument) as error:
        await update(store, "M/q", change, lease=p)
    _names_both(error)
    with pytest.raises(InvalidArgument) as error:
        Steps(store, "M/q", lease=p)
    _names_both(error)
    assert ran == []  # refused before the callback ran
    assert (await store.load("M/q")).data == {"n": 0}
    assert await store.head("M/q") == 1


async def test_a_namespaced_store_names_the_ids_its_caller_used(tmp_path: Path) -> None:
    async with StateStore(f"sqlite:///{tmp_path / 'n.db'}", namespace="acme") as store:
        p, _ = await _two_leases(store)
        with pytest.raises(InvalidArgument) as error:
            await store.save("M/q", {"n": 1}, lease=p)
        _names_both(error)
        assert "acme/" not in str(error.value)
        with pytest.raises(InvalidArgument) as error:
            await store.agent("M/q", lease=p)
        _names_both(error)
        assert "acme/" not in str(error.value)
        assert (await store.load("M/q")).data == {"n": 0}


async def test_write_behind_refuses_it_before_buffering() -> None:
    async with StateStore("memory://", durability="async", flush_interval=10) as store:
        p, _ = await _two_leases(store)
        await store.flush()
        with pytest.raises(InvalidArgument):
            await store.save("M/q", {"n": 1}, lease=p)
        await store.flush()
        assert (await store.load("M/q")).data == {"n": 0}
