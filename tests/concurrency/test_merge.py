"""Conflict resolution: vector-clock detection, LWW by hybrid logical clock, CRDT fields,
application merges, per-field and per-type policies, and the typed unresolved error."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.concurrency import (
    MISSING,
    AppendOnlyList,
    CRDTs,
    Custom,
    GCounter,
    HybridClock,
    LastWriteWins,
    LWWMap,
    MergePolicies,
    Merger,
    Nested,
    Timestamp,
    Unresolved,
    VectorClock,
    Version,
    merge_into,
)
from statekeeper.errors import ConfigurationError, MergeConflict


def test_vector_clocks_fast_forward_without_a_field_merge() -> None:
    base = Version({"x": 1}, VectorClock({"a": 1}))
    newer = base.edited({"x": 2}, "b")
    assert Merger().merge(base, newer) == newer  # ours is behind: take theirs
    assert Merger().merge(newer, base) == newer
    assert Merger().merge(newer, newer) == newer


def test_concurrent_versions_without_a_strategy_raise_with_both_versions() -> None:
    base = Version({"title": "t", "body": "b"}, VectorClock({"a": 1}))
    ours = base.edited({"title": "ours", "body": "b"}, "laptop")
    theirs = base.edited({"title": "theirs", "body": "b2"}, "server")
    with pytest.raises(MergeConflict) as info:
        Merger().merge(ours, theirs, base, agent_id="doc-1")
    err = info.value
    assert err.ours is ours and err.theirs is theirs and err.base is base
    assert err.fields == ("title",)  # body changed on one side only: resolved
    assert err.agent_id == "doc-1"
    assert "title" in str(err)


def test_last_write_wins_by_hybrid_clock() -> None:
    laptop = HybridClock("laptop", wall=lambda: 100.0)
    server = HybridClock("server", wall=lambda: 50.0)
    base = Version({"title": "t"})
    theirs = Version({"title": "server"}, stamp=server.now())
    # the laptop has seen the server's stamp: its later edit is greater although its
    # wall clock is ahead, and equal wall clocks are ordered by the logical counter
    laptop.observe(theirs.stamp)  # type: ignore[arg-type]
    ours = Version({"title": "laptop"}, stamp=laptop.now())
    lww = Merger(default=LastWriteWins())
    assert lww.merge(ours, theirs, base).data == {"title": "laptop"}
    assert lww.merge(theirs, ours, base).data == {"title": "laptop"}
    merged = lww.merge(ours, theirs, base)
    assert merged.stamp == max(ours.stamp, theirs.stamp)  # type: ignore[type-var]
    with pytest.raises(MergeConflict):  # no stamps: no order
        lww.merge(Version({"title": "x"}), Version({"title": "y"}), base)


def test_hybrid_clock_is_monotonic_even_when_the_wall_clock_steps_back() -> None:
    now = [10.0]
    clock = HybridClock("n", wall=lambda: now[0])
    stamps = [clock.now()]
    now[0] = 5.0  # NTP step backwards
    stamps += [clock.now(), clock.now()]
    stamps.append(clock.observe(Timestamp(20_000, 7, "m")))
    now[0] = 30.0
    stamps.append(clock.now())
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert stamps[3] > Timestamp(20_000, 7, "m")
    assert Timestamp.from_json(stamps[2].to_json()) == stamps[2]
    with pytest.raises(ConfigurationError):
        Timestamp.from_json([1, "x", "n"])


def test_crdt_fields_and_per_field_strategies() -> None:
    t = HybridClock("x", wall=lambda: 1.0)
    base = Version(
        {
            "views": GCounter().to_json(),
            "messages": AppendOnlyList().to_json(),
            "prefs": LWWMap().to_json(),
            "title": "t",
        }
    )
    ours = Version(
        {
            "views": GCounter({"laptop": 2}).to_json(),
            "messages": AppendOnlyList().append("hi", Timestamp(1, 0, "laptop")).to_json(),
            "prefs": LWWMap().set("theme", "dark", Timestamp(5, 0, "laptop")).to_json(),
            "title": "ours",
        },
        stamp=t.now(),
    )
    theirs = Version(
        {
            "views": GCounter({"server": 3}).to_json(),
            "messages": AppendOnlyList().append("yo", Timestamp(0, 0, "server")).to_json(),
            "prefs": LWWMap().set("lang", "fr", Timestamp(4, 0, "server")).to_json(),
            "title": "theirs",
        },
        stamp=t.now(),
    )
    merger = Merger(default=CRDTs(), fields={"title": LastWriteWins()})
    merged = merger.merge(ours, theirs, base).data
    assert GCounter.from_json(merged["views"]).value == 5
    assert AppendOnlyList.from_json(merged["messages"]).value == ["yo", "hi"]
    assert LWWMap.from_json(merged["prefs"]).value == {"theme": "dark", "lang": "fr"}
    assert merged["title"] == "theirs"  # the later stamp
    # the same merge in the other direction gives the same document
    assert merger.merge(theirs, ours, base).data == merged


def test_application_merge_functions() -> None:
    base = Version({"tags": ["a"], "n": 1})
    ours = Version({"tags": ["a", "b"], "n": 2})
    theirs = Version({"tags": ["a", "c"], "n": 5})

    def union(b: Any, o: Any, t: Any) -> Any:
        return sorted(set(o) | set(t))

    def never(b: Any, o: Any, t: Any) -> Any:
        raise Unresolved

    merged = Merger(fields={"tags": Custom(union), "n": Custom(lambda b, o, t: max(o, t))})
    assert merged.merge(ours, theirs, base).data == {"tags": ["a", "b", "c"], "n": 5}
    with pytest.raises(MergeConflict) as info:
        Merger(fields={"tags": Custom(union), "n": Custom(never)}).merge(ours, theirs, base)
    assert info.value.fields == ("n",)

    def whole(b: Any, o: Any, t: Any) -> dict[str, Any]:
        assert b == base.data
        return {"tags": o["tags"] + t["tags"][1:], "n": o["n"] + t["n"] - b["n"]}

    assert Merger(document=whole).merge(ours, theirs, base).data == {
        "tags": ["a", "b", "c"],
        "n": 6,
    }


def test_deletes_and_nested_documents() -> None:
    base = Version({"gone": 1, "kept": 1, "profile": {"name": "x", "age": 1}})
    ours = Version({"kept": 2, "profile": {"name": "y", "age": 1}})  # deleted "gone"
    theirs = Version({"gone": 1, "kept": 1, "profile": {"name": "x", "age": 2}})
    merged = Merger(fields={"profile": Nested(Merger())}).merge(ours, theirs, base)
    assert merged.data == {"kept": 2, "profile": {"name": "y", "age": 2}}
    conflict = Version({"profile": {"name": "z", "age": 1}, "kept": 1, "gone": 1})
    with pytest.raises(MergeConflict) as info:
        Merger(fields={"profile": Nested(Merger())}).merge(ours, conflict, base)
    assert info.value.fields == ("profile.name",)
    # a strategy sees MISSING for an absent field and may return it to drop the field
    drop = Merger(default=Custom(lambda b, o, t: MISSING))
    assert "x" not in drop.merge(Version({"x": 1}), Version({"x": 2})).data


def test_policies_per_agent_type() -> None:
    policies = MergePolicies(Merger(default=LastWriteWins()))
    policies.register("counter", Merger(default=CRDTs()))
    assert policies.for_data({"type": "counter"}).default.__class__ is CRDTs
    assert policies.for_data({"type": "other"}).default.__class__ is LastWriteWins
    assert policies.for_data({}).default.__class__ is LastWriteWins


def test_version_document_round_trip() -> None:
    v = Version({"a": 1}, VectorClock({"n": 2}), Timestamp(3, 4, "n"))
    doc = v.document()
    assert doc == {"a": 1, "_sync": {"vc": {"n": 2}, "ts": [3, 4, "n"]}}
    assert Version.of(doc) == v
    assert Version.of({"a": 1}) == Version({"a": 1})


async def test_merge_an_offline_copy_back_into_the_store() -> None:
    async with StateStore("memory://") as store:
        await store.save("doc", Version({"title": "t", "views": GCounter().to_json()}).document())
        copied_at = await store.head("doc")
        offline = Version.of((await store.load("doc")).data)
        # the offline replica edits its copy ...
        offline = offline.edited(
            {"title": "offline title", "views": GCounter({"laptop": 4}).to_json()}, "laptop"
        )
        # ... while the server copy changes too
        server = Version.of((await store.load("doc")).data).edited(
            {"title": "t", "views": GCounter({"server": 1}).to_json()}, "server"
        )
        await store.save("doc", server.document())
        result = await merge_into(
            store, "doc", offline, base_seq=copied_at, merger=Merger(fields={"views": CRDTs()})
        )
        assert result.merged
        stored = Version.of((await store.load("doc")).data)
        assert stored.data["title"] == "offline title"
        assert GCounter.from_json(stored.data["views"]).value == 5
        assert stored.clock == VectorClock({"laptop": 1, "server": 1})
        assert result.seq == await store.head("doc")
        history = [e.type async for e in store.history("doc")]
        assert history[-1] == "merge"
        # an unresolvable merge writes nothing and carries both versions
        rival = stored.edited({**stored.data, "title": "server title"}, "server")
        await store.save("doc", rival.document())
        late = stored.edited({**stored.data, "title": "laptop again"}, "laptop")
        head = await store.head("doc")
        with pytest.raises(MergeConflict) as info:
            await merge_into(store, "doc", late, base_seq=result.seq)
        assert info.value.ours == late
        assert info.value.theirs.data["title"] == "server title"
        assert await store.head("doc") == head
        # nothing changed since the copy: a fast-forward
        ff = stored.edited({**rival.data, "title": "ff"}, "laptop")
        done = await merge_into(store, "doc", ff, base_seq=head)
        assert not done.merged and done.seq == head + 1


def test_last_write_wins_says_a_version_carries_no_stamp() -> None:
    base = Version({"title": "a", "body": "x"})
    stamped = base.edited({"title": "b", "body": "x"}, "n1", stamp=HybridClock("n1").now())
    unstamped = base.edited({"title": "c", "body": "x"}, "n2")
    merger = Merger(default=LastWriteWins())
    with pytest.raises(MergeConflict) as neither:
        merger.merge(base.edited({"title": "b", "body": "x"}, "n1"), unstamped, base)
    assert neither.value.fields == ("title",)
    assert "at title could not be merged" in str(neither.value)
    assert "neither version carries one" in str(neither.value)
    assert "stamp=clock.now()" in str(neither.value)
    with pytest.raises(MergeConflict) as one:
        merger.merge(stamped, unstamped, base)
    assert "theirs carries" in one.value.reason
    # another strategy's conflict is not blamed on stamps
    with pytest.raises(MergeConflict) as manual:
        Merger().merge(base.edited({"title": "b"}, "n1"), unstamped, base)
    assert manual.value.reason == ""


def test_a_side_edited_without_a_clock_tick_is_merged_not_dropped() -> None:
    # a merged document saved again by plain code carries its old "_sync" clock along:
    # the clock says "behind", the data says "changed since the base"
    base = Version(
        {"title": "t", "likes": GCounter({"laptop": 1}).to_json()}, VectorClock({"l": 1})
    )
    server = Version(
        {**base.data, "likes": GCounter({"laptop": 1, "server": 5}).to_json()}, base.clock
    )
    laptop = base.edited({**base.data, "likes": GCounter({"laptop": 2}).to_json()}, "l")
    merger = Merger(fields={"likes": CRDTs()})
    for merged in (merger.merge(laptop, server, base), merger.merge(server, laptop, base)):
        assert GCounter.from_json(merged.data["likes"]).value == 7
    # an honest clock still fast-forwards, without asking any strategy
    ahead = laptop.edited({**laptop.data, "title": "x"}, "l")
    assert Merger().merge(ahead, laptop, base) == ahead


async def test_merge_into_keeps_a_plain_save_made_after_an_earlier_merge() -> None:
    merger = Merger(fields={"likes": CRDTs()})
    async with StateStore("memory://") as store:
        await store.save("doc", {"title": "t", "likes": GCounter().to_json()})
        first = await store.load("doc")
        copy = Version.of(first.data).edited(
            {"title": "t", "likes": GCounter({"laptop": 1}).to_json()}, "laptop"
        )
        await merge_into(store, "doc", copy, base_seq=first.seq, merger=merger)
        copied = await store.load("doc")  # the laptop copies the merged document again
        # the server updates it with plain code: "_sync" travels along unchanged
        data = dict(copied.data)
        data["likes"] = GCounter.from_json(data["likes"]).increment("server", 5).to_json()
        await store.save("doc", data)
        offline = Version.of(copied.data)
        likes = GCounter.from_json(offline.data["likes"]).increment("laptop", 1)
        edited = offline.edited({**offline.data, "likes": likes.to_json()}, "laptop")
        result = await merge_into(store, "doc", edited, base_seq=copied.seq, merger=merger)
        assert result.merged
        stored = Version.of((await store.load("doc")).data)
        assert GCounter.from_json(stored.data["likes"]).value == 7  # the server's 5 kept


def test_a_non_finite_float_in_merged_data_is_refused_not_turned_into_null() -> None:
    base = Version({"x": 1.5, "y": 1})
    ours, theirs = Version({"x": float("nan"), "y": 1}), Version({"x": 1.5, "y": 2})
    with pytest.raises(ConfigurationError, match="not the float nan"):
        Merger().merge(ours, theirs, base)


def test_last_write_wins_never_orders_edits_by_a_stamp_they_inherited() -> None:
    """Version.edited without stamp= keeps the old stamp: two such edits carried one
    stamp, and the merge kept whichever was passed as theirs (ours in the other order),
    dropping the other edit without a word."""
    clock = HybridClock("server", wall=lambda: 10.0)
    base = Version({"title": "t"}, stamp=clock.now())
    laptop = base.edited({"title": "laptop"}, "laptop")  # no new stamp
    server = base.edited({"title": "server"}, "server")  # no new stamp
    merger = Merger(default=LastWriteWins())
    for ours, theirs in ((laptop, server), (server, laptop)):
        with pytest.raises(MergeConflict) as info:
            merger.merge(ours, theirs, base)
        assert info.value.fields == ("title",)
        assert "both versions carry the same one" in info.value.reason
    # one side stamped its edit, the other still carries the base's stamp
    stamped = base.edited({"title": "server"}, "server", stamp=clock.now())
    with pytest.raises(MergeConflict) as one:
        merger.merge(laptop, stamped, base)
    assert "ours carries its base's" in one.value.reason
    # both stamped: the later one wins, in either order
    later = base.edited({"title": "laptop"}, "laptop", stamp=clock.now())
    assert merger.merge(later, stamped, base).data == {"title": "laptop"}
    assert merger.merge(stamped, later, base).data == {"title": "laptop"}
