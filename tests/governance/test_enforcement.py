"""Every call of a store opened as a principal is checked, on every engine;
refusals raise AccessDenied and are audited; a store without a policy is unchanged."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import AccessDenied, ConfigurationError
from statekeeper.governance import Audit, AuditLog
from statekeeper.store.governed import GovernedStateStore
from statekeeper.store.governed_base import GovernedBase

from .conftest import KEYRING

Make = Callable[..., StateStore]


async def _seed(as_principal: Make) -> StateStore:
    ops = as_principal("ops")
    await ops.save("acme/support/t1", {"n": 1})
    await ops.save("acme/support/t1", {"n": 2})
    await ops.save("acme/billing/b1", {"n": 1})
    await ops.save("globex/eu/g1", {"n": 1})
    await ops.save("rootagent", {"n": 1})
    return ops


async def _entries(store: StateStore) -> list[tuple[str | None, str, str, str | None]]:
    log = AuditLog(store.backend, KEYRING)
    return [(e.principal, e.operation, e.outcome, e.agent_id) async for e in log.entries()]


async def test_reads_and_writes_follow_the_policy(as_principal: Make) -> None:
    await _seed(as_principal)
    alice = as_principal("alice")
    # read: everything under acme, time travel and history included
    assert (await alice.load("acme/billing/b1")).data == {"n": 1}
    many = await alice.get_many(["acme/billing/b1", "acme/support/t1"])
    assert [s.data if s else None for s in many] == [{"n": 1}, {"n": 2}]
    assert (await alice.load("acme/support/t1", at_seq=1)).data == {"n": 1}
    assert [e.seq async for e in alice.history("acme/support/t1")] == [1, 2]
    assert await alice.head("acme/support/t1") == 2
    # write: only under acme/support
    result = await alice.save("acme/support/t1", {"n": 3})
    assert result.last_seq == 3
    # the stream itself says who wrote
    assert [e.actor async for e in alice.history("acme/support/t1", after_seq=2)] == ["alice"]
    denied = [
        alice.save("acme/billing/b1", {"n": 9}),
        alice.create("acme/billing/new", {}),
        alice.append("acme/billing/b1", "note", {"x": 1}),
        alice.delete("acme/billing/b1"),
        alice.snapshot("acme/billing/b1"),
        alice.load("globex/eu/g1"),
        alice.load("globex/eu/g1", at_seq=1),
        alice.get("rootagent"),
        alice.get_many(["acme/billing/b1", "globex/eu/g1"]),  # one unreadable id: refused
        alice.head("globex/eu/g1"),
        alice.head_state("globex/eu/g1"),
        alice.stored_size("globex/eu/g1"),
        alice.digest("globex/eu/g1"),
        alice.find_key("globex/eu/g1", "k"),
        alice.verify(["globex/eu/g1"]),
    ]
    for call in denied:
        with pytest.raises(AccessDenied):
            await call
    with pytest.raises(AccessDenied):
        [e async for e in alice.history("globex/eu/g1")]
    # nothing was written by a refused call
    ops = as_principal("ops")
    assert (await ops.load("acme/billing/b1")).data == {"n": 1}
    assert await ops.head("acme/billing/new") == 0


async def test_listing_shows_only_readable_agents(as_principal: Make) -> None:
    await _seed(as_principal)
    alice = as_principal("alice")
    assert [a.agent_id for a in await alice.list_agents()] == ["acme/billing/b1", "acme/support/t1"]
    assert [a.agent_id async for a in alice.iter_agents()] == ["acme/billing/b1", "acme/support/t1"]
    assert await alice.count_agents() == 2
    # small pages still fill up past agents the principal may not see
    assert [a.agent_id for a in await alice.list_agents(limit=1)] == ["acme/billing/b1"]
    assert [a.agent_id for a in await alice.list_agents(after="acme/billing/b1", limit=1)] == [
        "acme/support/t1"
    ]
    bob = as_principal("bob")
    assert [a.agent_id for a in await bob.list_agents()] == ["globex/eu/g1"]
    # an administrator sees everything but the audit log itself
    ops = as_principal("ops")
    assert [a.agent_id for a in await ops.list_agents()] == [
        "acme/billing/b1", "acme/support/t1", "globex/eu/g1", "rootagent",
    ]  # fmt: skip
    # so does a plain store over the same data
    plain = as_principal(None)
    assert type(plain) is StateStore
    assert len(await plain.list_agents()) == 4
    assert (await plain.verify()).ok


async def test_an_unknown_principal_is_denied_and_audited(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    mallory = as_principal("mallory")
    for call in (
        mallory.list_agents(),
        mallory.load("rootagent"),
        mallory.save("rootagent", {"n": 0}),
        mallory.count_agents(),
    ):
        with pytest.raises(AccessDenied, match="does not name it"):
            await call
    refusals = [e for e in await _entries(ops) if e[0] == "mallory"]
    assert refusals == [
        ("mallory", "list", "denied", None),
        ("mallory", "load", "denied", "rootagent"),
        ("mallory", "save", "denied", "rootagent"),
        ("mallory", "list", "denied", None),
    ]


async def test_every_mutation_and_refusal_is_audited(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    alice = as_principal("alice")
    await alice.save("acme/support/t2", {"a": 1})
    await alice.append("acme/support/t2", "note", {"x": 1}, fsm_state="busy")
    await alice.snapshot("acme/support/t2")
    with pytest.raises(AccessDenied):
        await alice.delete("acme/billing/b1")
    assert await alice.delete("acme/support/t2")
    log = AuditLog(ops.backend, KEYRING)
    mine = [e async for e in log.entries(principal="alice")]
    assert [(e.operation, e.outcome, e.agent_id, e.first_seq, e.last_seq) for e in mine] == [
        ("save", "ok", "acme/support/t2", 1, 1),
        ("transition", "ok", "acme/support/t2", 2, 2),
        ("snapshot", "ok", "acme/support/t2", 2, 2),
        ("delete", "denied", "acme/billing/b1", None, None),
        ("delete", "ok", "acme/support/t2", None, None),
    ]
    assert all(e.time > 0 for e in mine)
    # filters
    assert [e.operation async for e in log.entries(agent="acme/billing/b1")] == ["save", "delete"]
    assert {e.agent_id async for e in log.entries(agent="acme/")} >= {"acme/support/t2"}
    assert [e.outcome async for e in log.entries(operation="delete")] == ["denied", "ok"]
    newest = mine[-1].time
    assert [e.operation async for e in log.entries(since=newest)] == ["delete"]
    assert (await log.verify()).ok


async def test_reads_are_audited_when_asked(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    reader = as_principal("alice", audit=Audit(reads=True))
    await reader.load("acme/support/t1")
    [e async for e in reader.history("acme/support/t1")]
    ops_entries = await _entries(ops)
    assert ("alice", "load", "ok", "acme/support/t1") in ops_entries
    assert ("alice", "history", "ok", "acme/support/t1") in ops_entries
    # without reads=True, reads leave no entry
    quiet = as_principal("alice")
    before = len(await _entries(ops))
    await quiet.load("acme/support/t1")
    assert len(await _entries(ops)) == before


async def test_leases_need_write_and_are_audited(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    alice = as_principal("alice")
    manager = LeaseManager(alice, holder="worker-a", ttl=30)
    with pytest.raises(AccessDenied):
        await manager.acquire("acme/billing/b1")
    lease = await manager.acquire("acme/support/t1")
    await alice.save("acme/support/t1", {"n": 5}, lease=lease)
    # another holder takes the lease over: the first one learns it lost it
    taker = LeaseManager(ops, holder="worker-b", ttl=30)
    await ops.backend.release_lease("acme/support/t1", lease.holder, lease.token)
    await taker.acquire("acme/support/t1")
    with pytest.raises(Exception, match="lease"):
        await lease.renew()
    lease_ops = [(e[0], e[1], e[2]) for e in await _entries(ops) if e[1].startswith("lease")]
    assert lease_ops == [
        ("alice", "lease", "denied"),
        ("alice", "lease", "ok"),
        ("ops", "lease", "ok"),
        ("alice", "lease-lost", "ok"),
    ]


async def test_policy_changes_need_store_admin_and_are_audited(as_principal: Make) -> None:
    from statekeeper.governance import Policy

    ops = await _seed(as_principal)
    alice = as_principal("alice")
    assert isinstance(alice, GovernedStateStore)
    wider = Policy(principals={"alice": {"read": ["**"]}, "ops": {"admin": ["**"]}})
    with pytest.raises(AccessDenied):
        await alice.set_policy(wider)  # type: ignore[attr-defined]
    await ops.set_policy(wider)  # type: ignore[attr-defined]
    entries = await _entries(ops)
    assert ("alice", "policy", "denied", None) in entries
    assert ("ops", "policy", "ok", None) in entries


def test_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="needs a principal"):
        StateStore("memory://", policy=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Policy"):
        StateStore("memory://", principal="a", policy=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs a key"):
        StateStore("memory://", principal="a", audit=Audit())
    # no governance option: the plain store, nothing in between
    assert type(StateStore("memory://")) is StateStore


def test_every_public_call_of_the_store_is_governed() -> None:
    """A call added to StateStore must be checked by the governed store too (or be
    listed here with the reason it needs no check)."""
    import inspect

    needs_no_check = {
        "flush": "writes what was already checked",
        "close": "lifecycle",
        "health": "the engine's health, no agent data",
        "stats": "counters of this process",
        "agent": "opens through get/create/save, which are checked",
        "iter_agents": "pages through list_agents, which filters",
        "witness": "the store's own witness object",
        "snapshot_events": "a setting of the store",
        "idle_settled": "waits for this store's background settles: no agent data",
    }
    public = {
        name
        for name, member in inspect.getmembers(StateStore)
        if not name.startswith("_")
        and (inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
             or inspect.isfunction(member) or isinstance(member, property))
    }  # fmt: skip
    # the governed store is composed of parts (store/governed_*.py): a call is
    # overridden when one of the classes between it and StateStore defines it
    mro = GovernedStateStore.__mro__
    parts = mro[: mro.index(StateStore)]
    assert all(issubclass(part, GovernedBase) for part in parts)
    overridden = {name for part in parts for name in vars(part)}
    missing = sorted(name for name in public - set(needs_no_check) if name not in overridden)
    assert missing == [], f"not checked by GovernedStateStore: {missing}"


def test_the_blocking_face_is_governed_too(policy: object) -> None:
    from statekeeper.store import SyncStateStore

    with SyncStateStore(
        "memory://",
        keyring=KEYRING,
        principal="bob",
        policy=policy,
        audit=Audit(),  # type: ignore[arg-type]
    ) as bob:
        bob.save("globex/eu/g1", {"n": 1})
        with pytest.raises(AccessDenied):
            bob.save("acme/support/t1", {"n": 1})
        assert [a.agent_id for a in bob.list_agents()] == ["globex/eu/g1"]
