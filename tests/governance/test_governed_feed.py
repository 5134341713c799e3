"""The change feed on a store opened as a principal: filtered by the policy (only the
events of agents it may read), cursors that skip the rest with no gap and no duplicate,
and a subscription that can never deliver anything refused and audited."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from statekeeper import StateStore
from statekeeper.errors import AccessDenied
from statekeeper.governance import Audit, AuditLog, Policy
from statekeeper.records import FeedEvent

from .conftest import KEYRING

Make = Callable[..., StateStore]


async def _seed(as_principal: Make) -> StateStore:
    ops = as_principal("ops")
    await ops.save("acme/support/t1", {"n": 1})
    await ops.save("globex/eu/g1", {"n": 1})
    await ops.save("acme/billing/b1", {"n": 1})
    await ops.save("rootagent", {"n": 1})
    await ops.append("acme/support/t1", "tool_call", {"tool": "search"})
    await ops.save("globex/eu/g1", {"n": 2})
    return ops


async def _all(store: StateStore, **kwargs: object) -> list[FeedEvent]:
    return [e async for e in store.subscribe(stop_at_head=True, **kwargs)]  # type: ignore[arg-type]


async def _entries(store: StateStore) -> list[tuple[str | None, str, str]]:
    log = AuditLog(store.backend, KEYRING)
    return [(e.principal, e.operation, e.outcome) async for e in log.entries()]


async def test_a_principal_receives_only_the_agents_it_may_read(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    everything = await _all(ops)
    assert len(everything) == 6
    alice = as_principal("alice")  # reads acme/**
    seen = await _all(alice)
    assert [(e.agent_id, e.seq) for e in seen] == [
        ("acme/support/t1", 1),
        ("acme/billing/b1", 1),
        ("acme/support/t1", 2),
    ]
    assert seen == [e for e in everything if e.agent_id.startswith("acme/")]
    bob = as_principal("bob")  # writes (so reads) globex/*
    assert [e.agent_id for e in await _all(bob)] == ["globex/eu/g1", "globex/eu/g1"]
    # the namespace and type filters still apply on top of the policy
    assert [e.agent_id for e in await _all(alice, namespace="acme/billing")] == ["acme/billing/b1"]
    assert [e.type for e in await _all(alice, event_types=["tool_call"])] == ["tool_call"]


async def test_resuming_skips_unreadable_positions_without_gap_or_duplicate(
    as_principal: Make,
) -> None:
    ops = await _seed(as_principal)
    head = (await ops.feed_bounds())[1]
    alice = as_principal("alice")
    sub = alice.subscribe()
    first = [await anext(sub), await anext(sub)]
    resume = sub.position
    rest = await _all(alice, from_position=resume)
    whole = await _all(alice)
    assert first + rest == whole  # nothing lost, nothing twice
    finished = alice.subscribe(stop_at_head=True)
    assert len([e async for e in finished]) == 3
    assert finished.position == head  # the trailing globex/root positions were passed over


async def test_a_live_subscription_passes_over_unreadable_events(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    alice = as_principal("alice")
    sub = alice.subscribe((await ops.feed_bounds())[1])
    waiting = asyncio.ensure_future(anext(sub))
    await ops.save("globex/eu/g2", {"n": 1})  # not for alice
    await ops.save("rootagent", {"n": 2})  # nor this
    await ops.save("acme/support/t2", {"n": 1})
    event = await asyncio.wait_for(waiting, 60)
    assert (event.agent_id, event.seq) == ("acme/support/t2", 1)
    assert sub.position == event.position


async def test_a_policy_change_applies_to_running_subscriptions(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    sub = ops.subscribe(stop_at_head=True)
    assert (await anext(sub)).agent_id == "acme/support/t1"
    # ops (admin on **) narrows its own grants: the running subscription follows
    await ops.set_policy(Policy(principals={"ops": {"read": ["acme/**"]}}))  # type: ignore[attr-defined]
    assert [e.agent_id async for e in sub] == ["acme/billing/b1", "acme/support/t1"]


async def test_a_subscription_that_can_see_nothing_is_refused_and_audited(
    as_principal: Make,
) -> None:
    ops = await _seed(as_principal)
    mallory = as_principal("mallory")  # not in the policy
    sub = mallory.subscribe()
    with pytest.raises(AccessDenied, match="does not name it"):
        await anext(sub)
    bob = as_principal("bob")
    with pytest.raises(AccessDenied, match="namespace 'acme'"):
        await anext(bob.subscribe(namespace="acme"))
    with pytest.raises(AccessDenied, match="agent_prefix 'acme/support/t'"):
        await bob.subscribe(agent_prefix="acme/support/t").next_batch()
    # a namespace it may read under gives a (live) subscription, even before any event
    assert await _all(bob, namespace="globex") != []
    entries = await _entries(ops)
    assert entries.count(("mallory", "subscribe", "denied")) == 1
    assert entries.count(("bob", "subscribe", "denied")) == 2


async def test_subscriptions_are_audited_when_reads_are(as_principal: Make) -> None:
    ops = await _seed(as_principal)
    alice = as_principal("alice", audit=Audit(reads=True))
    await _all(alice, namespace="acme")
    log = AuditLog(ops.backend, KEYRING)
    started = [e async for e in log.entries() if e.operation == "subscribe"]
    assert [(e.principal, e.outcome, e.detail) for e in started] == [
        ("alice", "ok", {"from_position": 0, "namespace": "acme"})
    ]


async def test_the_feed_bounds_are_told_only_to_who_may_read_every_namespace(
    as_principal: Make,
) -> None:
    """The head counts every tenant's events: a principal that may not read the whole
    store is refused it (audited), on a plain store and in a namespace, rather than
    shown a figure over agents it may not read (their write volume)."""
    ops = await _seed(as_principal)
    assert (await ops.feed_bounds())[1] >= 6  # may read everything: the bounds
    assert (await ops.feed_cursor_bounds()).head.total >= 6
    alice = as_principal("alice")  # reads acme/**
    acme = as_principal("alice", namespace="acme")
    for store in (alice, acme):
        with pytest.raises(AccessDenied, match="feed_bounds") as caught:
            await store.feed_bounds()
        assert caught.value.principal == "alice"
        with pytest.raises(AccessDenied, match="feed_cursor_bounds"):
            await store.feed_cursor_bounds()
    assert ("alice", "feed_bounds", "denied") in await _entries(ops)
    assert ("alice", "feed_cursor_bounds", "denied") in await _entries(ops)
    # subscribing still works for alice, from the start or a position she was given
    assert len(await _all(alice)) == 3
