"""The change-feed part of the backend contract (``Capability.FEED``), as tests every
engine that declares the capability runs (a base of
:class:`~statekeeper.testing.BackendConformance`: an engine's conformance file runs
them without a line more). Engines that do not declare it skip them; their refusal is
checked with the other undeclared capabilities."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import ConflictError
from statekeeper.records import AppendRequest, FeedRecord, RawEvent, RawSnapshot, RewriteRequest

__all__ = ["FeedConformance"]


def _event(seq: int, body: bytes) -> RawEvent:
    return RawEvent(seq, "patch", float(seq), body, b"sum-%d" % seq)


def _append(agent_id: str, expected_seq: int, *bodies: bytes) -> AppendRequest:
    events = tuple(_event(expected_seq + i, b) for i, b in enumerate(bodies, start=1))
    return AppendRequest(agent_id, expected_seq, events)


async def _all(backend: Backend, after: int = 0) -> list[FeedRecord]:
    out: list[FeedRecord] = []
    while True:
        page = await backend.read_feed(after, 3)
        out.extend(page)
        if not page:
            return out
        after = page[-1].position


def _order(records: list[FeedRecord]) -> list[tuple[str, int, bytes]]:
    return [(r.agent_id, r.event.seq, r.event.payload) for r in records]


class FeedConformance:
    """Feed tests; mixed into ``BackendConformance`` (which provides the fixtures)."""

    @pytest.fixture
    def feeding(self, backend: Backend) -> Backend:
        if not backend.supports(Capability.FEED):
            pytest.skip(f"{type(backend).__name__} does not offer {Capability.FEED.value}")
        return backend

    async def test_feed_orders_every_append_store_wide(self, feeding: Backend) -> None:
        await feeding.append(_append("a", 0, b"a1", b"a2"))
        await feeding.append(_append("b", 0, b"b1"))
        await feeding.append(_append("a", 2, b"a3"))
        records = await _all(feeding)
        assert _order(records) == [
            ("a", 1, b"a1"),
            ("a", 2, b"a2"),
            ("b", 1, b"b1"),
            ("a", 3, b"a3"),
        ]
        positions = [r.position for r in records]
        assert positions == sorted(set(positions)) and positions[0] >= 1
        assert records[0].event == _event(1, b"a1")  # the stored record, whole
        floor, head = await feeding.feed_bounds()
        assert (floor, head) == (0, positions[-1])

    async def test_feed_reads_in_pages_after_a_position(self, feeding: Backend) -> None:
        for i in range(7):
            await feeding.append(_append(f"agent-{i % 3}", i // 3, b"x%d" % i))
        everything = await feeding.read_feed(0, 100)
        assert len(everything) == 7
        assert await _all(feeding) == everything
        middle = everything[3].position
        assert await feeding.read_feed(middle, 2) == everything[4:6]
        assert await feeding.read_feed(everything[-1].position, 10) == []

    async def test_a_feed_page_comes_with_the_feed_id_of_its_numbering(
        self, feeding: Backend
    ) -> None:
        """``read_feed_page``: the page ``read_feed`` gives, and the feed's id as it was
        when the page was read (or later); a page written after a renewal carries the
        new id (a live subscription raises ``FeedChanged`` on it), an empty page none."""
        await feeding.append(_append("a", 0, b"1", b"2"))
        first = await feeding.feed_id()
        page, feed = await feeding.read_feed_page(0, 10)
        assert page == await feeding.read_feed(0, 10)
        assert feed == first
        assert await feeding.read_feed_page(page[-1].position, 10) == ([], None)
        renewed = await feeding.renew_feed_id()
        if first is None or renewed is None:
            return  # (an engine that keeps no id)
        await feeding.append(_append("b", 0, b"b1"))
        later, feed = await feeding.read_feed_page(page[-1].position, 10)
        assert [r.agent_id for r in later] == ["b"]
        assert feed == renewed != first

    async def test_an_append_that_fails_takes_no_position(self, feeding: Backend) -> None:
        await feeding.append(_append("a", 0, b"1"))
        with pytest.raises(ConflictError):
            await feeding.append(_append("a", 0, b"lost"))
        results = await feeding.append_batch(
            [_append("b", 0, b"b1"), _append("a", 5, b"stale"), _append("a", 1, b"2")]
        )
        assert isinstance(results[1], ConflictError)
        assert _order(await _all(feeding)) == [("a", 1, b"1"), ("b", 1, b"b1"), ("a", 2, b"2")]

    async def test_deleted_agents_leave_gaps_and_positions_are_never_reused(
        self, feeding: Backend
    ) -> None:
        await feeding.append(_append("keep", 0, b"k1"))
        await feeding.append(_append("gone", 0, b"g1", b"g2"))  # the newest positions
        before = await _all(feeding)
        assert await feeding.delete_agent("gone")
        assert _order(await _all(feeding)) == [("keep", 1, b"k1")]
        await feeding.append(_append("gone", 0, b"again"))  # the same agent, re-created
        await feeding.append(_append("new", 0, b"n1"))
        after = await _all(feeding)
        assert _order(after) == [("keep", 1, b"k1"), ("gone", 1, b"again"), ("new", 1, b"n1")]
        assert after[1].position > before[-1].position  # beyond every earlier position
        # a reader that had read everything before the delete still gets both
        assert _order(await _all(feeding, before[-1].position)) == _order(after[1:])

    async def test_trim_raises_the_floor_and_keeps_the_events(self, feeding: Backend) -> None:
        for i in range(4):
            await feeding.append(_append("a", i, b"%d" % i))
        records = await _all(feeding)
        through = records[1].position
        await feeding.trim_feed(through)
        floor, head = await feeding.feed_bounds()
        assert (floor, head) == (through, records[-1].position)
        assert await _all(feeding) == records[2:]
        assert len(await feeding.read("a")) == 4  # the stream is untouched
        await feeding.trim_feed(0)  # never goes back
        assert (await feeding.feed_bounds())[0] == through

    async def test_feed_position_is_the_events_position_or_unknown(self, feeding: Backend) -> None:
        """What retention trims through before removing events (None: the engine cannot
        say, and retention leaves the floor alone)."""
        await feeding.append(_append("gone", 0, b"g1"))
        await feeding.append(_append("a", 0, b"a1", b"a2"))
        await feeding.delete_agent("gone")
        await feeding.append(_append("gone", 0, b"again"))  # re-created: its own position
        records = {(r.agent_id, r.event.seq): r.position for r in await _all(feeding)}
        found = {key: await feeding.feed_position(*key) for key in records}
        assert found in ({key: None for key in records}, records)
        await feeding.trim_feed(records["a", 1])
        assert await feeding.feed_position("a", 1) is None  # below the floor
        assert await feeding.feed_position("a", 9) is None  # never stored

    async def test_feed_positions_are_each_events_position_at_once(self, feeding: Backend) -> None:
        """Retention's batch lookup (one pass for a page of purges): the same as
        :meth:`feed_position` of each, the events without a position left out."""
        await feeding.append(_append("gone", 0, b"g1"))
        for i in range(5):
            await feeding.append(_append(f"k{i}", 0, b"x", b"y"))
        await feeding.delete_agent("gone")
        await feeding.append(_append("gone", 0, b"again"))  # re-created: its own position
        records = {(r.agent_id, r.event.seq): r.position for r in await _all(feeding)}
        one = {k: p for k in records if (p := await feeding.feed_position(*k)) is not None}
        wanted = [*records, ("k0", 9), ("never", 1)]
        assert await feeding.feed_positions(wanted) == one
        assert await feeding.feed_positions([]) == {}
        await feeding.trim_feed(records["k2", 1])
        below = {k: p for k, p in one.items() if p > records["k2", 1]}
        assert await feeding.feed_positions(wanted) == below

    async def test_concurrent_appends_get_distinct_positions(self, feeding: Backend) -> None:
        async def writer(agent: str) -> None:
            for seq in range(5):
                await feeding.append(_append(agent, seq, f"{agent}-{seq}".encode()))

        await asyncio.gather(*(writer(f"w{i}") for i in range(4)))
        records = await _all(feeding)
        assert len(records) == 20 and len({r.position for r in records}) == 20
        for i in range(4):  # each agent's events in seq order
            seqs = [r.event.seq for r in records if r.agent_id == f"w{i}"]
            assert seqs == [1, 2, 3, 4, 5]

    async def test_wait_feed_returns_once_a_position_follows(self, feeding: Backend) -> None:
        await feeding.append(_append("a", 0, b"1"))
        head = (await feeding.feed_bounds())[1]
        await asyncio.wait_for(feeding.wait_feed(head - 1, 60.0), 30.0)  # already there

        async def follow() -> list[FeedRecord]:
            while True:
                await feeding.wait_feed(head, 0.5)
                page = await feeding.read_feed(head, 10)
                if page:
                    return page

        task = asyncio.create_task(follow())
        await feeding.append(_append("a", 1, b"2"))
        page = await asyncio.wait_for(task, 60.0)
        assert _order(page) == [("a", 2, b"2")]

    async def test_rewrite_keeps_feed_positions(self, feeding: Backend) -> None:
        if not feeding.supports(Capability.REWRITE):
            pytest.skip("no rewrite")
        await feeding.append(dataclasses.replace(_append("a", 0, b"old"), head_tag=b"t"))
        before = await _all(feeding)
        await feeding.rewrite(RewriteRequest("a", 1, b"t", (_event(1, b"new"),)))
        after = await _all(feeding)
        assert [r.position for r in after] == [r.position for r in before]
        assert after[0].event.payload == b"new"

    async def test_pruned_events_leave_the_feed(self, feeding: Backend) -> None:
        if not feeding.supports(Capability.PRUNE):
            pytest.skip("no prune")
        snap = RawSnapshot(2, 2.0, b"state@2", b"ck")
        await feeding.append(dataclasses.replace(_append("a", 0, b"1", b"2", b"3"), snapshot=snap))
        await feeding.prune("a", 2)
        assert _order(await _all(feeding)) == [("a", 3, b"3")]

    async def test_peer_follows_the_feed(
        self, feeding: Backend, peer: Backend, tmp_path: Path
    ) -> None:
        await feeding.append(_append("a", 0, b"1"))
        await peer.append(_append("b", 0, b"2"))
        mine, theirs = await _all(feeding), await _all(peer)
        assert _order(mine) == _order(theirs) == [("a", 1, b"1"), ("b", 1, b"2")]
        assert [r.position for r in mine] == [r.position for r in theirs]
