"""``StateStore(url, namespace=...)``: agent ids relative to a namespace, mapped in and
out of every call; escaping ids refused; the policy still sees full ids."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import AccessDenied, ConfigurationError, InvalidAgentId, InvalidArgument
from statekeeper.governance import Audit, Policy
from statekeeper.store.namespaced import NamespacedGovernedStateStore, NamespacedStateStore

from .conftest import KEYRING


@pytest.fixture
async def stores() -> AsyncIterator[tuple[StateStore, StateStore]]:
    """(the whole store, a view of it in ``acme/support``) over one engine."""
    backend = MemoryBackend()
    whole = StateStore(backend)
    support = StateStore(backend, namespace="acme/support")
    yield whole, support
    await support.flush()
    await whole.close()


async def test_ids_are_relative_in_and_out(stores: tuple[StateStore, StateStore]) -> None:
    whole, support = stores
    assert isinstance(support, NamespacedStateStore)
    assert support.namespace == "acme/support"
    result = await support.save("a-1", {"n": 1})
    assert result.agent_id == "a-1"
    await support.save("a-1", {"n": 2})
    # stored under the full id
    assert (await whole.load("acme/support/a-1")).data == {"n": 2}
    snap = await support.load("a-1")
    assert (snap.agent_id, snap.data) == ("a-1", {"n": 2})
    old = await support.load("a-1", at_seq=1)  # time travel
    assert (old.agent_id, old.data) == ("a-1", {"n": 1})
    events = [e async for e in support.history("a-1")]
    assert [(e.agent_id, e.seq) for e in events] == [("a-1", 1), ("a-1", 2)]
    head = await support.head_state("a-1")
    assert head is not None and head.agent_id == "a-1" and head.seq == 2
    assert await support.head("a-1") == 2
    assert [s.agent_id if s else None for s in await support.get_many(["a-1", "nope"])] == [
        "a-1",
        None,
    ]
    assert (await support.stored_size("a-1")).agent_id == "a-1"
    digest = await support.digest("a-1")
    assert digest.agent_id == "a-1"
    assert await support.check_digest(digest) is None
    assert await support.get("acme/support/a-1") is None  # an absolute-looking id is relative
    assert await support.delete("a-1") is True
    assert await whole.get("acme/support/a-1") is None


async def test_listing_covers_the_namespace_and_below_only(
    stores: tuple[StateStore, StateStore],
) -> None:
    whole, support = stores
    for agent_id in ["acme/other", "acme/supportx", "acme/support", "globex/a", "zed"]:
        await whole.save(agent_id, {})
    for rel in ["a-1", "a-2", "eu/a-3", "eu/deep/a-4"]:
        await support.save(rel, {})
    expected = ["a-1", "a-2", "eu/a-3", "eu/deep/a-4"]
    assert [i.agent_id for i in await support.list_agents()] == expected
    assert [i.agent_id async for i in support.iter_agents()] == expected
    assert await support.count_agents() == 4
    # paging with relative cursors
    seen: list[str] = []
    after: str | None = None
    while page := await support.list_agents(after=after, limit=1):
        seen.extend(i.agent_id for i in page)
        after = page[-1].agent_id
    assert seen == expected
    report = await support.verify()
    assert report.ok and report.agents == 4
    fed = [e.agent_id async for e in support.subscribe(stop_at_head=True)]
    assert fed == expected
    narrowed = support.subscribe(namespace="eu", stop_at_head=True)
    assert [e.agent_id async for e in narrowed] == ["eu/a-3", "eu/deep/a-4"]


@pytest.mark.parametrize("bad", ["/a", "../a", "a/../../b", "./a", "a//b", "a/", ""])
async def test_an_id_that_escapes_is_refused_naming_it(
    stores: tuple[StateStore, StateStore], bad: str
) -> None:
    whole, support = stores
    with pytest.raises(InvalidAgentId) as caught:
        await support.save(bad, {"n": 1})
    if bad:
        assert repr(bad) in str(caught.value)
    with pytest.raises(InvalidAgentId):
        await support.load(bad)
    if not bad:
        with pytest.raises(InvalidAgentId):
            await support.list_agents(after=bad)
    else:  # a cursor is a bound, not an id ("lg/" pages a prefix): never outside
        await whole.save("acme/a-0", {})  # sorts before the namespace
        await whole.save("zed", {})  # sorts after it
        assert await support.list_agents(after=bad) == []
        await whole.delete("acme/a-0")
        await whole.delete("zed")
    with pytest.raises(InvalidArgument, match="limit"):
        await support.list_agents(limit=0)
    assert await whole.count_agents() == 0  # nothing written (or left)


async def test_the_policy_applies_to_full_ids(policy: Policy) -> None:
    backend = MemoryBackend()
    # alice reads acme/**, writes acme/support/**
    alice = StateStore(
        backend, namespace="acme/support", principal="alice", policy=policy, audit=Audit(),
        keyring=KEYRING,
    )  # fmt: skip
    assert isinstance(alice, NamespacedGovernedStateStore)
    await alice.save("t-1", {"n": 1})
    sales = StateStore(backend, namespace="acme/sales", principal="alice", policy=policy,
                       keyring=KEYRING)  # fmt: skip
    with pytest.raises(AccessDenied):
        await sales.save("s-1", {"n": 1})
    globex = StateStore(backend, namespace="globex", principal="alice", policy=policy,
                        keyring=KEYRING)  # fmt: skip
    with pytest.raises(AccessDenied):
        await globex.load("t-1")
    # a namespace in which alice may read nothing is refused, not listed empty
    with pytest.raises(AccessDenied, match="no agent in namespace 'globex'"):
        await globex.list_agents()
    assert [i.agent_id for i in await alice.list_agents()] == ["t-1"]
    await alice.flush()


def test_a_bad_namespace_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="namespace"):
        StateStore("memory://", namespace="acme//x")
    with pytest.raises(ConfigurationError, match="namespace"):
        StateStore("memory://", namespace=3)  # type: ignore[arg-type]


def test_the_blocking_face_takes_a_namespace(tmp_path: object) -> None:
    from statekeeper.store import SyncStateStore

    url = f"sqlite:///{tmp_path}/ns.db"
    with SyncStateStore(url, namespace="acme") as acme:
        assert acme.save("a-1", {"n": 1}).agent_id == "a-1"
        assert [i.agent_id for i in acme.list_agents()] == ["a-1"]
    with SyncStateStore(url) as whole:
        assert [i.agent_id for i in whole.list_agents()] == ["acme/a-1"]


def test_every_public_call_of_the_store_maps_ids() -> None:
    """A call added to StateStore must be mapped by the namespaced store too (or be
    listed here with the reason it has no agent id to map)."""
    no_ids = {
        "flush": "writes what was already mapped",
        "close": "lifecycle",
        "health": "the engine's health, no agent ids",
        "stats": "counters of this process",
        "agent": "opens through get/create/save/load, which are mapped",
        "iter_agents": "pages through list_agents, which maps",
        "witness": "the store's own witness object",
        "snapshot_events": "a setting of the store",
        "feed_bounds": "two positions of the change feed, no agent ids",
        "feed_cursor_bounds": "the feed's floor and head per shard, no agent ids",
        "trim_feed": "store-wide feed positions, no agent ids",
        "idle_settled": "waits for this store's background settles, no agent ids",
    }
    public = {
        name
        for name, member in inspect.getmembers(StateStore)
        if not name.startswith("_")
        and (inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
             or inspect.isfunction(member) or isinstance(member, property))
    }  # fmt: skip
    missing = sorted(
        name for name in public - set(no_ids) if name not in NamespacedStateStore.__dict__
    )
    assert missing == [], f"not mapped by NamespacedStateStore: {missing}"


async def test_a_durable_agent_works_with_relative_ids(
    stores: tuple[StateStore, StateStore],
) -> None:
    whole, support = stores
    agent = await support.agent("bot", initial_data={"n": 0})
    assert agent.agent_id == "bot"
    agent.data["n"] = 5
    await agent.save()
    assert (await whole.load("acme/support/bot")).data == {"n": 5}
    assert [e.seq async for e in agent.history()] == [1, 2]
