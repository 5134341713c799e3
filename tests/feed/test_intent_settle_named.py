"""What settling and listing feed intents say of an intent, named as it is.

Before: a ``recreated`` intent whose owner still runs on this host was refused as "a
delete under way" (the owner's check came first), and an intent whose agent is deleted
and whose deletion a later tombstone already announced was described (``feed_intents``,
``verify``) as "the store's next delete appends its tombstone": that settle appends
none, and drops the intent."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.store import feed_deletes

from .test_intent_settle import ELSEWHERE, craft, seed, split, tombstones


async def test_a_recreated_intent_of_a_running_owner_is_refused_as_recreated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from statekeeper.backends.tiered_owner import IN_FLIGHT, claim_owner

    me = claim_owner()
    if None in me.values():
        pytest.skip("no /proc: no owner is provably running")
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        await seed(store)
        stream = await craft(store, "acme/gone", me, monkeypatch)
        IN_FLIGHT.add(stream.encode())  # the app that left it still runs
        try:
            await store.backend.delete_agent("acme/gone")  # its tombstone not yet written
            await store.save("acme/gone", {"n": "again"})  # created again
            (intent,) = await store.feed_intents()
            assert intent.state == "recreated" and intent.live
            (done,) = await store.settle_feed_intents(["acme/gone"])
            assert done.outcome == "refused"
            assert "created again" in done.reason  # was: "a delete under way"
            assert "under way" not in done.reason
            assert len(await store.feed_intents()) == 1  # nothing written
        finally:
            IN_FLIGHT.discard(stream.encode())
        assert ("acme/gone", 2) not in await tombstones(store)
        assert (await store.load("acme/gone")).data == {"n": "again"}


async def test_a_done_intent_already_announced_says_no_tombstone_is_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with StateStore(split(tmp_path / "s.db"), witness=False) as store:
        await seed(store)
        await craft(store, "acme/gone", ELSEWHERE, monkeypatch)
        await store.backend.delete_agent("acme/gone")
        # another process's delete announced it (its own tombstone), not settling this one
        await feed_deletes.record(store.backend, store.codec, "acme/gone", 2, forgotten=False)
        before = await tombstones(store)
        (intent,) = await store.feed_intents()
        assert intent.state == "done"
        assert "appends its tombstone" not in intent.why  # was: said it would
        assert "in the feed already" in intent.why
        (problem,) = [p for p in (await store.verify()).problems if p.kind == "feed"]
        assert "appends it" not in problem.reason and "in the feed already" in problem.reason
        (done,) = await store.settle_feed_intents(["acme/gone"])  # what it says is true
        assert await tombstones(store) == before  # none appended
        assert await store.feed_intents() == []
        assert done.outcome == "tombstone"  # (found in the feed: SettledIntent)
