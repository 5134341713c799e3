"""A last-writer-wins stamp far ahead of real time that arrives in *data* (a replica's
state merged here, a field of a merged document, a hand-made stamp) would win every
later write to its key until real time caught up with it: every later edit silently
lost. Such stamps are refused with a typed error naming the key and the stamp; a state
that holds one already stays readable, and a write that would lose to it says why."""

from __future__ import annotations

import pickle
import time

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import (
    CRDTs,
    HybridClock,
    LWWMap,
    LWWRegister,
    Merger,
    Timestamp,
    Version,
    crdt_from_json,
)
from statekeeper.errors import ClockDriftExceeded, FutureStampRefused

YEAR_MS = 365 * 86_400_000


def _now_ms() -> int:
    return int(time.time() * 1000)


def _year_ahead(node: str = "broken-replica") -> Timestamp:
    return Timestamp(_now_ms() + YEAR_MS, 0, node)


def test_a_replica_state_with_a_key_stamped_a_year_ahead_is_refused_naming_it() -> None:
    clock = HybridClock("laptop")
    mine = LWWMap().set("theme", "light", clock.now())
    bad = _year_ahead()
    theirs = LWWMap().set("lang", "fr", clock.now()).set("theme", "dark", bad, max_drift=None)
    with pytest.raises(FutureStampRefused) as caught:
        mine.merge(theirs)
    err = caught.value
    assert isinstance(err, ClockDriftExceeded)  # (caught where a drift is caught)
    assert err.key == "theme" and err.stamp == bad.to_json() and not err.stored
    assert err.remote == "broken-replica" and err.max_drift_ms == 60_000
    assert err.ahead_ms >= YEAR_MS - 60_000
    assert "'theme'" in str(err) and "broken-replica" in str(err)
    assert mine.value == {"theme": "light"}  # nothing merged
    # the error crosses a process with its fields
    back = pickle.loads(pickle.dumps(err))
    assert (back.key, back.stamp, back.stored, str(back)) == (err.key, err.stamp, False, str(err))
    # within the drift, or with no bound, the merge is the usual one
    close = Timestamp(_now_ms() + 1_000, 0, "fast-replica")
    assert mine.merge(LWWMap().set("theme", "dark", close)).value == {"theme": "dark"}
    assert mine.merge(theirs, max_drift=None).value == {"theme": "dark", "lang": "fr"}


def test_a_register_refuses_a_far_future_stamp_from_a_merge_or_a_write() -> None:
    clock = HybridClock("laptop")
    register = LWWRegister().set("v1", clock.now())
    bad = _year_ahead()
    with pytest.raises(FutureStampRefused) as caught:
        register.merge(LWWRegister("poison", bad))
    assert caught.value.key is None and caught.value.stamp == bad.to_json()
    with pytest.raises(FutureStampRefused):
        register.set("poison", bad)  # a hand-made stamp: refused as a merged one
    with pytest.raises(FutureStampRefused):
        LWWMap().delete("k", bad)
    assert register.set("v2", clock.now()).value == "v2"


def test_a_stored_far_future_stamp_stays_readable_and_a_write_it_would_beat_says_why() -> None:
    clock = HybridClock("laptop")
    bad = _year_ahead()
    stored = LWWMap().set("title", "old", bad, max_drift=None).set("body", "b", clock.now())
    loaded = crdt_from_json(stored.to_json())  # a decoded state: loads, whatever its stamps
    assert isinstance(loaded, LWWMap)
    assert loaded.value == {"title": "old", "body": "b"}
    assert loaded.future_keys() == ["title"]
    # this write would silently lose to the stored stamp: refused, saying why
    with pytest.raises(FutureStampRefused) as caught:
        loaded.set("title", "new", clock.now())
    err = caught.value
    assert err.stored and err.key == "title" and err.stamp == bad.to_json()
    assert "would silently lose" in str(err) and "without_future()" in str(err)
    with pytest.raises(FutureStampRefused):
        loaded.delete("title", clock.now())
    assert loaded.set("body", "b2", clock.now()).get("body") == "b2"  # other keys: as ever
    # the way out: drop the entries, write again; the bad replica stays refused
    fixed = loaded.without_future().set("title", "new", clock.now())
    assert fixed.value == {"title": "new", "body": "b"}
    with pytest.raises(FutureStampRefused):
        fixed.merge(stored)
    register = LWWRegister("old", bad)
    with pytest.raises(FutureStampRefused) as on_register:
        register.set("new", clock.now())
    assert on_register.value.stored
    assert register.without_future().set("new", clock.now()).value == "new"


def test_a_merged_document_field_changed_only_by_the_replica_is_refused_naming_the_field() -> None:
    """A three-way merge took a CRDT field changed on one side only as that side's
    value, unchecked: the far-future stamp came in silently."""
    clock = HybridClock("laptop")
    prefs = LWWMap().set("theme", "light", clock.now())
    base = Version({"title": "t", "prefs": prefs.to_json()})
    ours = Version({"title": "mine", "prefs": prefs.to_json()})
    poisoned = prefs.set("theme", "dark", _year_ahead(), max_drift=None)
    theirs = Version({"title": "t", "prefs": poisoned.to_json()})
    merger = Merger(fields={"prefs": CRDTs()})
    with pytest.raises(FutureStampRefused) as caught:
        merger.merge(ours, theirs, base)
    assert caught.value.field == "prefs" and caught.value.key == "theme"
    assert "field 'prefs'" in str(caught.value)
    # a CRDT field the replica added (none here, none in the base): refused too
    added = Version({"title": "t", "prefs": prefs.to_json(), "more": poisoned.to_json()})
    more = Merger(fields={"prefs": CRDTs(), "more": CRDTs()})
    with pytest.raises(FutureStampRefused) as on_added:
        more.merge(ours, added, base)
    assert on_added.value.field == "more" and on_added.value.key == "theme"
    # a field changed by the replica within the drift merges as before
    fine = Version({"title": "t", "prefs": prefs.set("lang", "fr", clock.now()).to_json()})
    merged = merger.merge(ours, fine, base).data
    assert merged["title"] == "mine"
    assert LWWMap.from_json(merged["prefs"]).value == {"theme": "light", "lang": "fr"}


async def test_an_agent_holding_a_far_future_stamp_loads_and_the_write_says_why() -> None:
    bad = _year_ahead()
    async with StateStore("memory://") as store:
        prefs = LWWMap().set("theme", "dark", bad, max_drift=None)
        await store.save("a", {"prefs": prefs.to_json()})
        state = await store.load("a")
        loaded = LWWMap.from_json(state.data["prefs"])
        assert loaded.value == {"theme": "dark"}
        with pytest.raises(FutureStampRefused) as caught:
            loaded.set("theme", "light", HybridClock("n").now())
        assert caught.value.key == "theme" and caught.value.stored
