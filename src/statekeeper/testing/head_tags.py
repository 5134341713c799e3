"""The backend contract, part: authenticated stream heads (``head_tag``) and rewrites. Run through
:class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import (
    ConfigurationError,
    ConflictError,
    InvalidAgentId,
    LeaseLost,
    RewriteBelowPrunedBase,
)
from statekeeper.records import (
    AppendRequest,
    AppendResult,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
)

from ._contract import (
    Contract,
    _needs,
    _rewrite_refused,
    event,
    fenced,
    request,
    snapshot,
    tagged,
    untagged_at,
)

__all__ = ["HeadTagConformance"]


class HeadTagConformance(Contract):
    """Conformance tests: authenticated stream heads (``head_tag``) and rewrites."""

    # -- authenticated stream heads (head_tag) and rewrites --------------------------------
    #
    # The codec authenticates each stream's head (count + last chain link) with a tag the
    # backend stores *with the head*, in the same atomic write as the append that moves
    # it, and returns with it (``head_tag``). ``rewrite`` replaces the bytes of existing
    # records (key rotation) only while the head is still the one the caller read.

    async def test_head_tag_is_stored_with_the_head(self, backend: Backend) -> None:
        assert await backend.head_tag("a") == (0, None)
        await backend.append(tagged(request("a", 0), b"tag-1"))
        assert await backend.head_tag("a") == (1, b"tag-1")
        await backend.append(tagged(request("a", 1, 3, snap_at=3), b"tag-4"))
        assert await backend.head_tag("a") == (4, b"tag-4")
        binary = bytes(range(256)) + b"\x00" * 8  # any bytes, NULs included
        await backend.append(tagged(request("a", 4), binary))
        assert await backend.head_tag("a") == (5, binary)
        await backend.append(request("a", 5))  # no tag: the head has none any more
        assert await backend.head_tag("a") == (6, None)
        assert await backend.head_tag("b") == (0, None)
        assert await backend.head("a") == 6

    async def test_head_tag_is_untouched_by_appends_that_do_not_land(
        self, backend: Backend
    ) -> None:
        await backend.append(tagged(request("a", 0, 2, key="k"), b"good"))
        with pytest.raises(ConflictError):
            await backend.append(tagged(request("a", 0), b"stale"))
        assert await backend.head_tag("a") == (2, b"good")
        dup = await backend.append(tagged(request("a", 0, 2, key="k"), b"retry"))
        assert dup.duplicate
        assert await backend.head_tag("a") == (2, b"good")
        with pytest.raises(ConfigurationError):
            await backend.append(tagged(AppendRequest("a", 2, (event(9),)), b"bad"))
        assert await backend.head_tag("a") == (2, b"good")

    async def test_head_tag_in_a_batch(self, backend: Backend) -> None:
        results = await backend.append_batch(
            [
                tagged(request("a", 0), b"a1"),
                tagged(request("b", 0), b"b1"),
                tagged(request("a", 7), b"lost"),  # conflicts
                tagged(request("a", 1, 2), b"a3"),
            ]
        )
        assert isinstance(results[2], ConflictError)
        assert await backend.head_tag("a") == (3, b"a3")
        assert await backend.head_tag("b") == (1, b"b1")

    async def test_read_latest_is_the_latest_snapshot_and_the_events_after_it(
        self, backend: Backend
    ) -> None:
        assert await backend.read_latest("a") == (None, [])
        await backend.append(request("a", 0, 3))
        snap, events = await backend.read_latest("a")
        assert snap is None and events == [event(1), event(2), event(3)]
        await backend.append(request("a", 3, 2, snap_at=5))
        await backend.append(request("a", 5, 2))
        await backend.save_snapshot("a", snapshot(2))  # an older one changes nothing
        snap, events = await backend.read_latest("a")
        assert snap == snapshot(5) and events == [event(6), event(7)]
        await backend.append(request("a", 7, 1, snap_at=8))
        assert await backend.read_latest("a") == (snapshot(8), [])
        await backend.append(request("b", 0, 1))
        assert await backend.read_latest("b") == (None, [event(1)])
        await backend.delete_agent("a")
        assert await backend.read_latest("a") == (None, [])
        with pytest.raises(InvalidAgentId):
            await backend.read_latest("")

    async def test_append_compares_the_head_tag_when_asked(self, backend: Backend) -> None:
        """``check_tag``: the head seq AND its tag must match (a stream deleted and
        re-created to the same seq is another incarnation); engines that do not compare
        tags say so with ``compares_head_tag = False`` and are never asked."""
        if not backend.compares_head_tag:
            pytest.skip(f"{type(backend).__name__} does not compare head tags")
        await backend.append(tagged(request("a", 0, 2), b"first"))
        await backend.delete_agent("a")
        await backend.append(tagged(request("a", 0, 2), b"second"))  # same seq, new chain
        stale = dataclasses.replace(
            tagged(request("a", 2), b"on-first"), expected_tag=b"first", check_tag=True
        )
        with pytest.raises(ConflictError):
            await backend.append(stale)
        assert await backend.head_tag("a") == (2, b"second")
        assert [e.seq for e in await backend.read("a")] == [1, 2]
        [result] = await backend.append_batch([stale])
        assert isinstance(result, ConflictError)
        fresh = dataclasses.replace(stale, expected_tag=b"second")
        assert (await backend.append(fresh)).last_seq == 3
        assert await backend.head_tag("a") == (3, b"on-first")
        untagged = dataclasses.replace(request("a", 3), expected_tag=None, check_tag=True)
        with pytest.raises(ConflictError):  # None matches only a head stored without a tag
            await backend.append(untagged)
        await backend.append(request("a", 3))
        assert (await backend.append(untagged_at(4))).last_seq == 5

    async def test_append_next_stores_what_the_same_append_stores(self, backend: Backend) -> None:
        """``append_next`` — one patch event on the head at ``seq - 1``, in plain
        arguments (the store's common save) — stores the event, the head tag and the
        snapshot that ``append`` of the same request stores, and refuses what it refuses,
        writing nothing: a moved head, another incarnation's tag (on an engine that
        compares tags), a bad id, seq or snapshot."""
        first = RawSnapshot(2, 11.0, b"snap-2", b"sum-2")
        await backend.append_next("a", 1, 10.0, b"one", b"sum-1", b"t1", None)
        await backend.append_next("a", 2, 11.0, b"two", b"sum-2", b"t2", b"t1", first)
        await backend.append(tagged(request("b", 0), b"u1"))  # the same, as a request
        await backend.append(tagged(request("b", 1, snap_at=2), b"u2"))
        stored = [
            (e.seq, e.type, e.timestamp, e.payload, e.checksum) for e in await backend.read("a")
        ]
        assert stored == [
            (1, "patch", 10.0, b"one", b"sum-1"),
            (2, "patch", 11.0, b"two", b"sum-2"),
        ]
        assert await backend.head_tag("a") == (2, b"t2")
        assert await backend.latest_snapshot("a") == first
        assert [e.type for e in await backend.read("b")] == ["patch", "patch"]
        with pytest.raises(ConflictError):  # the head moved on
            await backend.append_next("a", 2, 12.0, b"late", b"x", b"t-late", b"t1")
        if backend.compares_head_tag:
            with pytest.raises(ConflictError):  # the right seq, another incarnation
                await backend.append_next("a", 3, 12.0, b"other", b"x", b"t3", b"t-other")
        with pytest.raises(ConflictError):  # a new stream starts at seq 1
            await backend.append_next("c", 2, 12.0, b"gap", b"x", None, None)
        with pytest.raises(InvalidAgentId):
            await backend.append_next("", 1, 12.0, b"x", b"x", None, None)
        for seq in (0, -1):
            with pytest.raises(ConfigurationError):
                await backend.append_next("c", seq, 12.0, b"x", b"x", None, None)
        with pytest.raises(ConfigurationError):  # a snapshot must sit on the appended seq
            await backend.append_next("c", 1, 12.0, b"x", b"x", None, None, first)
        assert await backend.head_tag("a") == (2, b"t2")
        assert [e.seq for e in await backend.read("a")] == [1, 2]
        assert await backend.head("c") == 0
        await backend.append_next("a", 3, 12.0, b"three", b"sum-3", None, b"t2")  # untagged
        assert await backend.head_tag("a") == (3, None)
        if backend.supports(Capability.FEED):  # every landed event is in the feed, in order
            fed = [(r.agent_id, r.event.seq) for r in await backend.read_feed(0, 100)]
            assert fed == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("a", 3)]

    async def test_append_next_and_appends_made_at_once_all_land(self, backend: Backend) -> None:
        """``append_next`` calls and requests made concurrently (an engine's group
        commit takes both) land each on its own, and a stale one among them fails
        alone."""
        await backend.append_next("s", 1, 1.0, b"s1", b"x", b"s1", None)
        results = await asyncio.gather(
            *(backend.append_next(f"n{i}", 1, 1.0, b"p", b"x", b"t", None) for i in range(6)),
            *(backend.append(request(f"r{i}", 0)) for i in range(3)),
            backend.append_next("s", 1, 2.0, b"stale", b"x", b"s2", None),
            return_exceptions=True,
        )
        assert results[:6] == [None] * 6
        assert [r.last_seq for r in results[6:9]] == [1, 1, 1]  # type: ignore[union-attr]
        assert isinstance(results[9], ConflictError)
        for i in range(6):
            assert await backend.head_tag(f"n{i}") == (1, b"t")
        assert [e.payload for e in await backend.read("s")] == [b"s1"]

    async def test_a_batch_compares_each_head_tag(self, backend: Backend) -> None:
        """``check_tag`` in a batch (the group-commit path): each request's tag is
        compared on its own; a stale one conflicts without disturbing the others, and
        appends spanning several events compare the tag too."""
        if not backend.compares_head_tag:
            pytest.skip(f"{type(backend).__name__} does not compare head tags")
        await backend.append_batch(
            [tagged(request("a", 0), b"a1"), tagged(request("b", 0), b"b1"), request("c", 0)]
        )

        def expecting(req: AppendRequest, tag: bytes | None) -> AppendRequest:
            return dataclasses.replace(req, expected_tag=tag, check_tag=True)

        results = await backend.append_batch(
            [
                expecting(tagged(request("a", 1, 2), b"a3"), b"a1"),  # right tag, 2 events
                expecting(tagged(request("b", 1), b"b2"), b"other"),  # stale tag
                expecting(tagged(request("c", 1), b"c2"), None),  # no tag, as stored
            ]
        )
        assert results[0] == AppendResult("a", 2, 3)
        assert isinstance(results[1], ConflictError)
        assert results[2] == AppendResult("c", 2, 2)
        assert await backend.head_tag("a") == (3, b"a3")
        assert await backend.head_tag("b") == (1, b"b1")
        assert await backend.head_tag("c") == (2, b"c2")
        with pytest.raises(ConflictError):  # several events, stale tag: nothing written
            await backend.append(expecting(tagged(request("a", 3, 3), b"x"), b"a1"))
        assert await backend.head_tag("a") == (3, b"a3")
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3]

    async def test_a_fenced_append_checks_the_fence_and_the_head_tag(
        self, leasing: Backend
    ) -> None:
        """``check_tag`` on a fenced append: both checks hold, neither replaces the other."""
        backend = leasing
        if not backend.compares_head_tag:
            pytest.skip(f"{type(backend).__name__} does not compare head tags")
        old = await backend.acquire_lease("a", "w1", 30.0)
        await backend.append(tagged(fenced("a", 0, old.fence), b"t1"))
        assert await backend.release_lease("a", "w1", old.token)
        new = await backend.acquire_lease("a", "w2", 30.0)
        stale_token = dataclasses.replace(
            tagged(fenced("a", 1, old.fence), b"t2"), expected_tag=b"t1", check_tag=True
        )
        with pytest.raises(LeaseLost):  # the right tag does not let a stale holder in
            await backend.append(stale_token)
        [result] = await backend.append_batch([stale_token])
        assert isinstance(result, LeaseLost)
        wrong_tag = dataclasses.replace(
            tagged(fenced("a", 1, new.fence), b"t2"), expected_tag=b"other", check_tag=True
        )
        with pytest.raises(ConflictError):  # the right token does not excuse a wrong tag
            await backend.append(wrong_tag)
        assert await backend.head_tag("a") == (1, b"t1")
        good = dataclasses.replace(wrong_tag, expected_tag=b"t1")
        assert (await backend.append(good)).last_seq == 2
        assert await backend.head_tag("a") == (2, b"t2")
        assert [e.seq for e in await backend.read("a")] == [1, 2]

    async def test_head_tag_goes_with_the_agent(self, backend: Backend) -> None:
        await backend.append(tagged(request("a", 0, 2), b"old"))
        await backend.delete_agent("a")
        assert await backend.head_tag("a") == (0, None)
        await backend.append(request("a", 0))
        assert await backend.head_tag("a") == (1, None)

    async def test_rewrite_replaces_record_bytes(self, backend: Backend) -> None:
        _needs(backend, Capability.REWRITE)
        await backend.append(tagged(request("a", 0, 5, snap_at=3), b"t5"))
        await backend.append(tagged(request("b", 0, 2), b"b2"))
        before = await backend.read("a")
        new2 = RawEvent(2, "patch", 2.0, b"re-encrypted-2", b"sum-2'")
        new4 = RawEvent(4, "patch", 4.0, b"re-encrypted-4", b"sum-4'")
        new_snap = RawSnapshot(3, 3.0, b"state@3 re-encrypted", b"ck'")
        await backend.rewrite(
            RewriteRequest("a", 5, b"t5", (new2, new4), (new_snap,), head_tag=b"t5'")
        )
        after = await backend.read("a")
        assert [e.seq for e in after] == [1, 2, 3, 4, 5]
        assert after[1] == new2 and after[3] == new4
        assert [after[i] for i in (0, 2, 4)] == [before[i] for i in (0, 2, 4)]
        assert await backend.latest_snapshot("a") == new_snap
        assert await backend.head_tag("a") == (5, b"t5'")
        assert await backend.seq_at("a", 4.5) == 4  # timestamps are not touched
        # other agents, and the listing, are untouched
        assert await backend.head_tag("b") == (2, b"b2")
        assert [i.head_seq for i in await backend.list_agents()] == [5, 2]
        # without a new head tag the stored one stays
        await backend.rewrite(RewriteRequest("a", 5, b"t5'", (new2,)))
        assert await backend.head_tag("a") == (5, b"t5'")

    async def test_rewrite_only_on_the_head_read(self, backend: Backend) -> None:
        _needs(backend, Capability.REWRITE)
        await backend.append(tagged(request("a", 0, 3), b"t3"))
        stored = await backend.read("a")
        change = (RawEvent(1, "patch", 1.0, b"changed", b"sum"),)
        for expected_seq, expected_tag in ((2, b"t3"), (4, b"t3"), (3, b"other"), (3, None)):
            with pytest.raises(ConflictError) as info:
                await backend.rewrite(
                    RewriteRequest("a", expected_seq, expected_tag, change, head_tag=b"x")
                )
            assert info.value.current_seq == 3
        with pytest.raises(ConflictError) as info:
            await backend.rewrite(RewriteRequest("nobody", 1, None, change))
        assert info.value.current_seq == 0
        assert await backend.read("a") == stored
        assert await backend.head_tag("a") == (3, b"t3")
        # a stream stored without a tag is matched by expected_tag None
        await backend.append(request("u", 0, 2))
        await backend.rewrite(RewriteRequest("u", 2, None, change, head_tag=b"now"))
        assert (await backend.read("u"))[0].payload == b"changed"
        assert await backend.head_tag("u") == (2, b"now")

    @pytest.mark.parametrize("seq", [0, 4, -1])
    async def test_rewrite_outside_the_stream_is_refused(self, backend: Backend, seq: int) -> None:
        _needs(backend, Capability.REWRITE)
        await backend.append(tagged(request("a", 0, 3), b"t3"))
        stored = await backend.read("a")
        ok = RawEvent(1, "patch", 1.0, b"changed", b"sum")
        bad = RawEvent(seq, "patch", 1.0, b"x", b"y")
        with pytest.raises(ConfigurationError):
            await backend.rewrite(RewriteRequest("a", 3, b"t3", (ok, bad), head_tag=b"x"))
        with pytest.raises(ConfigurationError):
            await backend.rewrite(
                RewriteRequest("a", 3, b"t3", (ok,), (RawSnapshot(seq, 0.0, b"s", b"c"),))
            )
        assert await backend.read("a") == stored
        assert await backend.head_tag("a") == (3, b"t3")
        assert await backend.latest_snapshot("a") is None

    async def test_rewrite_of_a_pruned_event_is_refused(self, backend: Backend) -> None:
        """A rewrite naming an event below the stream's pruned base (a key rotation, a
        migration or a redaction planned before a prune) changes nothing: the engine
        raises RewriteBelowPrunedBase (a ConfigurationError: its caller plans it again)
        naming the agent and the seq, and writes none of it
        (not the stored events, snapshots or head tag) — never success with nothing
        rewritten. The same in a page (``rewrite_many``) and in ``append_together``."""
        _needs(backend, Capability.REWRITE)
        _needs(backend, Capability.PRUNE)
        await backend.append(tagged(request("a", 0, 5, snap_at=3), b"t5"))
        await backend.prune("a", 3)
        stored, snap = await backend.read("a"), await backend.latest_snapshot("a")
        kept = RawEvent(4, "patch", 4.0, b"changed-4", b"sum-4'")
        pruned = RawEvent(2, "patch", 2.0, b"changed-2", b"sum-2'")
        new_snap = RawSnapshot(5, 5.0, b"state@5 new", b"ck'")
        for events in ((kept, pruned), (pruned, kept), (pruned,)):
            bad = RewriteRequest("a", 5, b"t5", events, (new_snap,), head_tag=b"t5'")
            await _rewrite_refused(backend, bad, r"'a'.* seq 2\b", seq=2, base=3, record="event")
            assert await backend.read("a") == stored
            assert await backend.latest_snapshot("a") == snap
            assert await backend.head_tag("a") == (5, b"t5")
        # in a page with another agent's request (which the engine may apply or not)
        await backend.append(request("c", 0))
        other = RewriteRequest("c", 1, None, (RawEvent(1, "patch", 1.0, b"c1 v2", b"s"),))
        bad = RewriteRequest("a", 5, b"t5", (kept, pruned), (new_snap,), head_tag=b"t5'")
        with pytest.raises(RewriteBelowPrunedBase, match=r"'a'.* seq 2\b"):
            await backend.rewrite_many([other, bad])
        assert await backend.read("a") == stored
        assert await backend.head_tag("a") == (5, b"t5")
        # the stored events still rewrite
        await backend.rewrite(RewriteRequest("a", 5, b"t5", (kept,), head_tag=b"t5'"))
        assert (await backend.read("a"))[0] == kept

    async def test_rewrite_many_applies_each_under_its_head(self, backend: Backend) -> None:
        # a page of a schema migration: each request applied only while its head is the
        # one read (the others answered False, nothing of them written), in one call
        _needs(backend, Capability.REWRITE)
        assert await backend.rewrite_many([]) == []
        await backend.append(tagged(request("a", 0, 3, snap_at=2), b"a3"))
        await backend.append(tagged(request("b", 0, 2), b"b2"))
        await backend.append(request("c", 0, 2))  # stored without a tag
        await backend.append(tagged(request("d", 0, 2), b"d2"))
        stored_b, stored_d = await backend.read("b"), await backend.read("d")
        new_a1 = RawEvent(1, "patch", 1.0, b"a1 v2", b"sum-a1'")
        new_a3 = RawEvent(3, "patch", 3.0, b"a3 v2", b"sum-a3'")
        snap_a2 = RawSnapshot(2, 2.0, b"state@2 v2", b"ck2'")
        snap_a3 = RawSnapshot(3, 3.0, b"state@3 v2", b"ck3'")  # a new one, at the head
        new_c2 = RawEvent(2, "patch", 2.0, b"c2 v2", b"sum-c2'")
        changed = (RawEvent(1, "patch", 1.0, b"must not land", b"x"),)
        done = await backend.rewrite_many(
            [
                RewriteRequest("a", 3, b"a3", (new_a1, new_a3), (snap_a2, snap_a3), b"a3'"),
                RewriteRequest("b", 2, b"stale", changed, head_tag=b"no"),
                RewriteRequest("c", 2, None, (new_c2,), head_tag=b"c2"),
                RewriteRequest("d", 1, b"d2", changed, (snapshot(1),), b"no"),
                RewriteRequest("nobody", 1, None, changed, head_tag=b"no"),
            ]
        )
        assert done == [True, False, True, False, False]
        a = await backend.read("a")
        assert [a[0], a[2]] == [new_a1, new_a3] and a[1] == event(2)
        assert await backend.latest_snapshot("a") == snap_a3
        assert await backend.head_tag("a") == (3, b"a3'")
        assert [e.payload for e in await backend.read("c")] == [b"payload-1", b"c2 v2"]
        assert await backend.head_tag("c") == (2, b"c2")
        assert await backend.read("b") == stored_b and await backend.read("d") == stored_d
        assert await backend.head_tag("b") == (2, b"b2")
        assert await backend.head_tag("d") == (2, b"d2")
        assert await backend.latest_snapshot("d") is None
        assert await backend.head("nobody") == 0
        # the same agent twice: in order, the second under the head the first left;
        # a request without a new tag keeps the stored one
        again = RewriteRequest("a", 3, b"a3'", (new_a1,), head_tag=b"a3''")
        keep = RewriteRequest("a", 3, b"a3''", (new_a3,))
        assert await backend.rewrite_many([again, keep]) == [True, True]
        assert await backend.head_tag("a") == (3, b"a3''")

    async def test_rewrite_many_refuses_a_bad_request_before_writing(
        self, backend: Backend
    ) -> None:
        _needs(backend, Capability.REWRITE)
        await backend.append(tagged(request("a", 0, 2), b"a2"))
        stored = await backend.read("a")
        good = RewriteRequest("a", 2, b"a2", (RawEvent(1, "patch", 1.0, b"v2", b"s"),), (), b"n")
        bad = RewriteRequest("b", 2, None, (RawEvent(3, "patch", 1.0, b"x", b"y"),))
        with pytest.raises(ConfigurationError):
            await backend.rewrite_many([good, bad])
        assert await backend.read("a") == stored
        assert await backend.head_tag("a") == (2, b"a2")

    async def test_peer_sees_head_tags_and_rewrites(self, backend: Backend, peer: Backend) -> None:
        await backend.append(tagged(request("b", 0, 1), b"b1"))
        assert await peer.head_tag("b") == (1, b"b1")
        _needs(backend, Capability.REWRITE)
        await backend.append(tagged(request("a", 0, 2), b"t2"))
        assert await peer.head_tag("a") == (2, b"t2")
        new = RawEvent(1, "patch", 1.0, b"new", b"sum")
        await peer.rewrite(RewriteRequest("a", 2, b"t2", (new,), head_tag=b"t2'"))
        assert (await backend.read("a"))[0] == new
        assert await backend.head_tag("a") == (2, b"t2'")

    async def test_head_tag_survives_reopen(self, tmp_path: Path) -> None:
        first = await self.make_backend(tmp_path)
        try:
            await first.append(tagged(request("a", 0, 2), b"durable-tag"))
        finally:
            await first.close()
        again = await self.open_peer(tmp_path)
        if again is None:
            pytest.skip("the engine keeps nothing after close")
        try:
            assert await again.head_tag("a") == (2, b"durable-tag")
        finally:
            await again.close()
