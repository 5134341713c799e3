"""The backend contract, as one reusable test class every storage engine runs unmodified.

A backend's test suite adds one small file (see "Writing a backend" in docs/backends.md)::

    from statekeeper.backends.sqlite import SQLiteBackend
    from statekeeper.testing import BackendConformance

    class TestSQLiteConformance(BackendConformance):
        async def make_backend(self, tmp_path):
            return SQLiteBackend(tmp_path / "conformance.db")

        async def open_peer(self, tmp_path):          # optional: shared storage
            return SQLiteBackend(tmp_path / "conformance.db")

``make_backend`` returns a fresh, empty backend (a server-backed engine uses a fresh
namespace per test); ``open_peer`` returns a second, independent instance on the *same*
storage, or None when the engine has no shared storage (the memory backend) — the tests
that need one are then skipped. The suite closes every backend it is given.

A backend never interprets payloads, so the records here are arbitrary bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.base import Backend, Capability, Health
from statekeeper.errors import (
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
    InvalidAgentId,
    LeaseHeld,
    LeaseLost,
    LeasesUnsupported,
    NotAStore,
    ReadOnlyStore,
    StoreClosed,
)
from statekeeper.records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
)

from .feed import FeedConformance

__all__ = ["BackendConformance", "event", "fenced", "request", "snapshot", "tagged"]


def event(seq: int, *, ts: float | None = None, kind: str = "patch", body: bytes = b"") -> RawEvent:
    """A raw event whose payload and checksum name its seq (so reads can be checked)."""
    payload = body or f"payload-{seq}".encode()
    return RawEvent(seq, kind, float(seq) if ts is None else ts, payload, b"sum-%d" % seq)


def snapshot(seq: int, *, ts: float | None = None, tag: bytes = b"") -> RawSnapshot:
    return RawSnapshot(seq, float(seq) if ts is None else ts, b"state@%d%s" % (seq, tag), b"ck")


def untagged_at(expected_seq: int) -> AppendRequest:
    """An append to agent "a" after ``expected_seq`` that expects a head with no tag."""
    return dataclasses.replace(request("a", expected_seq), expected_tag=None, check_tag=True)


def request(
    agent_id: str,
    expected_seq: int,
    count: int = 1,
    *,
    key: str | None = None,
    snap_at: int | None = None,
    ts: float | None = None,
) -> AppendRequest:
    """Append ``count`` events after ``expected_seq`` (optionally with a snapshot)."""
    events = tuple(event(s, ts=ts) for s in range(expected_seq + 1, expected_seq + count + 1))
    snap = snapshot(snap_at) if snap_at is not None else None
    return AppendRequest(agent_id, expected_seq, events, snap, key)


class BackendConformance(FeedConformance):
    """The shared contract of :class:`statekeeper.backends.base.Backend`.

    Not collected on its own (no ``Test`` prefix); subclass it as ``Test<Engine>…``.
    """

    # -- what an engine's test file provides ---------------------------------------

    async def make_backend(self, tmp_path: Path) -> Backend:
        """A fresh, empty backend."""
        raise NotImplementedError

    async def open_peer(self, tmp_path: Path) -> Backend | None:
        """A second instance on the same storage as :meth:`make_backend`, or None."""
        return None

    async def open_readonly(self, tmp_path: Path) -> Backend | None:
        """An instance opened with ``readonly=True`` on the same storage as
        :meth:`make_backend`, or None when the engine cannot open read-only."""
        return None

    # -- fixtures ------------------------------------------------------------------

    @pytest.fixture
    async def backend(self, tmp_path: Path) -> AsyncIterator[Backend]:
        backend = await self.make_backend(tmp_path)
        try:
            yield backend
        finally:
            await backend.close()

    @pytest.fixture
    async def peer(self, backend: Backend, tmp_path: Path) -> AsyncIterator[Backend]:
        other = await self.open_peer(tmp_path)
        if other is None:
            pytest.skip(f"{type(backend).__name__} has no shared storage")
        try:
            yield other
        finally:
            await other.close()

    # -- an unknown agent ------------------------------------------------------------

    async def test_unknown_agent_is_empty(self, backend: Backend) -> None:
        assert await backend.head("nobody") == 0
        assert await backend.read("nobody") == []
        assert await backend.seq_at("nobody", 1e12) == 0
        assert await backend.latest_snapshot("nobody") is None
        assert await backend.lookup_key("nobody", "k") is None
        assert await backend.list_agents() == []
        assert await backend.count_agents() == 0
        assert await backend.delete_agent("nobody") is False

    # -- append ----------------------------------------------------------------------

    async def test_append_returns_where_it_landed(self, backend: Backend) -> None:
        first = await backend.append(request("a", 0))
        assert first == AppendResult("a", 1, 1, duplicate=False)
        second = await backend.append(request("a", 1, 3))
        assert second == AppendResult("a", 2, 4, duplicate=False)
        assert await backend.head("a") == 4

    async def test_read_returns_exactly_what_was_appended(self, backend: Backend) -> None:
        stored = (
            RawEvent(1, "created", 1700000000.123456, b"\x00\xff binary \x00", b"\x01" * 32),
            RawEvent(2, "custom/kind with spaces", 1700000001.5, b"", b"\x02" * 32),
            RawEvent(3, "transition", 1700000002.0, os.urandom(256 * 1024), os.urandom(32)),
        )
        await backend.append(AppendRequest("a", 0, stored))
        got = await backend.read("a")
        assert got == list(stored)
        assert all(type(e.payload) is bytes and type(e.checksum) is bytes for e in got)

    async def test_conflict_carries_current_seq_and_writes_nothing(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 2))
        before = await backend.read("a")
        for stale in (0, 1, 3, 7):
            with pytest.raises(ConflictError) as info:
                await backend.append(request("a", stale, 2, key=f"k{stale}", snap_at=stale + 1))
            assert info.value.agent_id == "a"
            assert info.value.expected_seq == stale
            assert info.value.current_seq == 2
            # nothing of the failed request is stored: events, snapshot, key
            assert await backend.head("a") == 2
            assert await backend.read("a") == before
            assert await backend.latest_snapshot("a") is None
            assert await backend.lookup_key("a", f"k{stale}") is None

    async def test_conflict_on_an_agent_that_does_not_exist(self, backend: Backend) -> None:
        with pytest.raises(ConflictError) as info:
            await backend.append(request("new", 3))
        assert info.value.current_seq == 0
        assert await backend.head("new") == 0
        assert await backend.list_agents() == []
        assert await backend.count_agents() == 0

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param(AppendRequest("a", -1, (event(0),)), id="negative-expected"),
            pytest.param(AppendRequest("a", 0, ()), id="no-events"),
            pytest.param(AppendRequest("a", 0, (event(2),)), id="does-not-follow"),
            pytest.param(AppendRequest("a", 0, (event(1), event(3))), id="gap"),
            pytest.param(AppendRequest("a", 0, (event(1), event(1))), id="repeat"),
            pytest.param(AppendRequest("a", 0, (event(2), event(1))), id="out-of-order"),
            pytest.param(AppendRequest("a", 0, (event(1),), snapshot(2)), id="snapshot-after"),
            pytest.param(AppendRequest("a", 1, (event(2),), snapshot(1)), id="snapshot-before"),
        ],
    )
    async def test_malformed_request_is_refused_before_writing(
        self, backend: Backend, bad: AppendRequest
    ) -> None:
        if bad.expected_seq == 1:
            await backend.append(request("a", 0))
        head = await backend.head("a")
        with pytest.raises(ConfigurationError):
            await backend.append(bad)
        assert await backend.head("a") == head
        assert await backend.latest_snapshot("a") is None

    async def test_snapshot_is_stored_with_the_append(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 3, snap_at=2))
        snap = await backend.latest_snapshot("a")
        assert snap == snapshot(2)

    async def test_concurrent_appends_at_one_seq_have_one_winner(self, backend: Backend) -> None:
        await backend.append(request("a", 0))
        attempts = [AppendRequest("a", 1, (event(2, body=b"writer-%d" % i),)) for i in range(12)]
        results = await asyncio.gather(
            *(backend.append(r) for r in attempts), return_exceptions=True
        )
        wins = [i for i, r in enumerate(results) if isinstance(r, AppendResult)]
        assert len(wins) == 1
        assert all(
            isinstance(r, ConflictError) and r.current_seq == 2
            for i, r in enumerate(results)
            if i != wins[0]
        )
        stored = await backend.read("a")
        assert [e.seq for e in stored] == [1, 2]
        assert stored[1].payload == b"writer-%d" % wins[0]

    # -- idempotency -----------------------------------------------------------------

    async def test_same_key_stores_once_and_returns_the_first_result(
        self, backend: Backend
    ) -> None:
        first = await backend.append(request("a", 0, 2, key="step-1"))
        assert first == AppendResult("a", 1, 2, duplicate=False)
        again = await backend.append(request("a", 0, 2, key="step-1"))
        assert again == AppendResult("a", 1, 2, duplicate=True)
        assert await backend.head("a") == 2
        assert [e.seq for e in await backend.read("a")] == [1, 2]

    async def test_key_is_checked_before_the_head(self, backend: Backend) -> None:
        await backend.append(request("a", 0, key="k1"))
        await backend.append(request("a", 1, 4))
        # a late retry with the old expected seq is a duplicate, not a conflict
        retry = await backend.append(request("a", 0, key="k1"))
        assert retry == AppendResult("a", 1, 1, duplicate=True)
        # a retry with a current expected seq is a duplicate too, and writes nothing
        retry = await backend.append(request("a", 5, key="k1"))
        assert retry == AppendResult("a", 1, 1, duplicate=True)
        assert await backend.head("a") == 5

    async def test_keys_are_per_agent(self, backend: Backend) -> None:
        await backend.append(request("a", 0, key="k"))
        other = await backend.append(request("b", 0, 2, key="k"))
        assert other == AppendResult("b", 1, 2, duplicate=False)
        assert await backend.lookup_key("a", "k") == AppendResult("a", 1, 1, duplicate=True)
        assert await backend.lookup_key("b", "k") == AppendResult("b", 1, 2, duplicate=True)

    async def test_lookup_key(self, backend: Backend) -> None:
        await backend.append(request("a", 0))
        await backend.append(request("a", 1, 3, key="batch-7"))
        assert await backend.lookup_key("a", "batch-7") == AppendResult("a", 2, 4, True)
        assert await backend.lookup_key("a", "batch-8") is None
        assert await backend.lookup_key("b", "batch-7") is None

    # -- append_batch ----------------------------------------------------------------

    async def test_batch_results_are_independent(self, backend: Backend) -> None:
        await backend.append(request("b", 0, 2))
        results = await backend.append_batch(
            [request("a", 0), request("b", 0), request("c", 0, 2), request("b", 2)]
        )
        assert results[0] == AppendResult("a", 1, 1)
        assert isinstance(results[1], ConflictError)
        assert results[1].current_seq == 2
        assert results[2] == AppendResult("c", 1, 2)
        assert results[3] == AppendResult("b", 3, 3)
        assert [await backend.head(x) for x in "abc"] == [1, 3, 2]

    async def test_batch_applies_one_agent_in_order(self, backend: Backend) -> None:
        results = await backend.append_batch(
            [request("a", 0), request("a", 1, 2), request("a", 9), request("a", 3, key="k")]
        )
        assert results[0] == AppendResult("a", 1, 1)
        assert results[1] == AppendResult("a", 2, 3)
        assert isinstance(results[2], ConflictError)
        assert results[2].current_seq == 3
        assert results[3] == AppendResult("a", 4, 4)
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4]

    async def test_batch_failed_request_leaves_no_trace(self, backend: Backend) -> None:
        await backend.append(request("a", 0))
        results = await backend.append_batch(
            [request("a", 0, 3, key="lost", snap_at=2), request("z", 0)]
        )
        assert isinstance(results[0], ConflictError)
        assert results[1] == AppendResult("z", 1, 1)
        assert await backend.head("a") == 1
        assert await backend.lookup_key("a", "lost") is None
        assert await backend.latest_snapshot("a") is None

    async def test_batch_with_malformed_request(self, backend: Backend) -> None:
        results = await backend.append_batch(
            [request("a", 0), AppendRequest("a", 1, (event(5),)), request("a", 1)]
        )
        assert results[0] == AppendResult("a", 1, 1)
        assert isinstance(results[1], ConfigurationError)
        assert results[2] == AppendResult("a", 2, 2)

    async def test_batch_duplicate_key(self, backend: Backend) -> None:
        results = await backend.append_batch(
            [request("a", 0, key="k"), request("a", 1, key="k"), request("a", 1)]
        )
        assert results == [
            AppendResult("a", 1, 1),
            AppendResult("a", 1, 1, duplicate=True),
            AppendResult("a", 2, 2),
        ]

    async def test_empty_batch(self, backend: Backend) -> None:
        assert await backend.append_batch([]) == []

    # -- read ------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("after", "to", "limit", "expected"),
        [
            (0, None, None, list(range(1, 11))),
            (3, None, None, list(range(4, 11))),
            (0, 4, None, [1, 2, 3, 4]),
            (2, 5, None, [3, 4, 5]),
            (0, None, 3, [1, 2, 3]),
            (6, None, 10, [7, 8, 9, 10]),
            (2, 8, 2, [3, 4]),
            (0, 100, None, list(range(1, 11))),
            (10, None, None, []),
            (12, None, None, []),
            (5, 5, None, []),
            (5, 3, None, []),
            (0, None, 0, []),
        ],
    )
    async def test_read_ranges(
        self,
        backend: Backend,
        after: int,
        to: int | None,
        limit: int | None,
        expected: list[int],
    ) -> None:
        await backend.append(request("a", 0, 6))
        await backend.append(request("a", 6, 4))
        await backend.append(request("b", 0, 3))
        got = await backend.read("a", after, to, limit)
        assert [e.seq for e in got] == expected
        assert [e.payload for e in got] == [f"payload-{s}".encode() for s in expected]

    async def test_long_stream_reads_in_pages(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 1500))
        await backend.append(request("a", 1500, 1000))
        seqs: list[int] = []
        cursor = 0
        while page := await backend.read("a", cursor, limit=700):
            seqs.extend(e.seq for e in page)
            cursor = page[-1].seq
        assert seqs == list(range(1, 2501))

    # -- seq_at ----------------------------------------------------------------------

    async def test_seq_at(self, backend: Backend) -> None:
        stamps = [10.0, 20.0, 20.0, 30.5]
        events = tuple(event(i, ts=t) for i, t in enumerate(stamps, start=1))
        await backend.append(AppendRequest("a", 0, events))
        await backend.append(AppendRequest("b", 0, (event(1, ts=1.0),)))
        cases = {5.0: 0, 10.0: 1, 15.0: 1, 20.0: 3, 30.4999: 3, 30.5: 4, 1e12: 4}
        for when, seq in cases.items():
            assert await backend.seq_at("a", when) == seq, when

    async def test_seq_at_is_the_last_seq_stamped_at_or_before(self, backend: Backend) -> None:
        # clocks can step back (NTP): the contract is the highest seq with ts <= t
        stamps = [10.0, 20.0, 50.0, 30.0, 35.0]
        events = tuple(event(i, ts=t) for i, t in enumerate(stamps, start=1))
        await backend.append(AppendRequest("a", 0, events))
        cases = {5.0: 0, 15.0: 1, 25.0: 2, 32.0: 4, 40.0: 5, 50.0: 5}
        for when, seq in cases.items():
            assert await backend.seq_at("a", when) == seq, when

    # -- snapshots -------------------------------------------------------------------

    async def test_latest_snapshot_at_or_below(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 10, snap_at=3))
        await backend.save_snapshot("a", snapshot(6))
        await backend.save_snapshot("a", snapshot(9))
        assert await backend.latest_snapshot("a") == snapshot(9)
        assert await backend.latest_snapshot("a", 10) == snapshot(9)
        assert await backend.latest_snapshot("a", 9) == snapshot(9)
        assert await backend.latest_snapshot("a", 8) == snapshot(6)
        assert await backend.latest_snapshot("a", 5) == snapshot(3)
        assert await backend.latest_snapshot("a", 2) is None
        assert await backend.latest_snapshot("a", 0) is None
        assert await backend.latest_snapshot("b") is None

    async def test_save_snapshot_replaces_one_at_the_same_seq(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 4, snap_at=4))
        await backend.save_snapshot("a", snapshot(4, tag=b"-v2"))
        assert await backend.latest_snapshot("a") == snapshot(4, tag=b"-v2")

    async def test_save_snapshot_needs_its_event(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 2))
        for seq in (3, 0):
            with pytest.raises(ConflictError):
                await backend.save_snapshot("a", snapshot(seq))
        with pytest.raises(ConflictError):
            await backend.save_snapshot("nobody", snapshot(1))
        assert await backend.latest_snapshot("a") is None
        assert await backend.count_agents() == 1

    # -- listing ---------------------------------------------------------------------

    async def test_list_agents_orders_and_pages(self, backend: Backend) -> None:
        ids = ["b", "a", "a-1", "a1", "B", "ü", "a/b", "z" * 200, "0", "aa", "é", "a 1"]
        for n, agent_id in enumerate(ids, start=1):
            await backend.append(request(agent_id, 0, n % 3 + 1, ts=100.0 + n))
        expected = sorted(ids)  # code point order
        page = await backend.list_agents(limit=100)
        assert [i.agent_id for i in page] == expected
        collected: list[str] = []
        after = None
        while True:
            page = await backend.list_agents(after=after, limit=5)
            assert len(page) <= 5
            collected.extend(i.agent_id for i in page)
            if len(page) < 5:
                break
            after = page[-1].agent_id
        assert collected == expected
        # ``after`` need not be an existing id
        assert [i.agent_id for i in await backend.list_agents(after="a0", limit=3)] == [
            "a1",
            "aa",
            "b",
        ]
        assert await backend.list_agents(after=expected[-1]) == []

    async def test_list_agents_reports_heads_and_times(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 2, ts=50.0))
        await backend.append(AppendRequest("a", 2, (event(3, ts=75.0),)))
        await backend.append(request("b", 0, ts=60.0))
        assert await backend.list_agents() == [
            AgentInfo("a", 3, 50.0, 75.0),
            AgentInfo("b", 1, 60.0, 60.0),
        ]

    async def test_list_agents_by_write_orders_and_pages(self, backend: Backend) -> None:
        """Newest write first (or longest idle first), ties by id, keyset pages that
        neither skip nor repeat an agent; an agent written again moves to the front.
        Engines without the index refuse with CapabilityUnsupported."""
        if not backend.lists_by_write:
            with pytest.raises(CapabilityUnsupported):
                await backend.list_agents_by_write()
            return
        stamps = {"a": 10.0, "b": 30.0, "c": 20.0, "d": 30.0, "e": 5.0, "f": 20.0, "g": 40.0}
        for agent_id, ts in stamps.items():
            await backend.append(request(agent_id, 0, ts=ts))
        newest = sorted(stamps, key=lambda a: (stamps[a], a), reverse=True)
        assert [i.agent_id for i in await backend.list_agents_by_write()] == newest
        for newest_first, expected in ((True, newest), (False, newest[::-1])):
            collected: list[str] = []
            cursor: tuple[float, str] | None = None
            while True:
                page = await backend.list_agents_by_write(cursor, 3, newest_first=newest_first)
                collected.extend(i.agent_id for i in page)
                if len(page) < 3:
                    break
                cursor = (page[-1].updated_at, page[-1].agent_id)
            assert collected == expected
        top = (await backend.list_agents_by_write(limit=1))[0]
        assert top == AgentInfo("g", 1, 40.0, 40.0)
        await backend.append(AppendRequest("e", 1, (event(2, ts=50.0),)))
        assert [i.agent_id for i in await backend.list_agents_by_write(limit=2)] == ["e", "g"]
        await backend.delete_agent("e")
        assert [i.agent_id for i in await backend.list_agents_by_write(limit=1)] == ["g"]

    async def test_count_agents(self, backend: Backend) -> None:
        for i in range(25):
            await backend.append(request(f"agent-{i:03d}", 0))
        assert await backend.count_agents() == 25
        await backend.delete_agent("agent-007")
        assert await backend.count_agents() == 24

    # -- delete ----------------------------------------------------------------------

    async def test_delete_removes_everything(self, backend: Backend) -> None:
        await backend.append(request("a", 0, 3, key="k", snap_at=2))
        await backend.append(request("keep", 0, 2, key="k", snap_at=1))
        assert await backend.delete_agent("a") is True
        assert await backend.head("a") == 0
        assert await backend.read("a") == []
        assert await backend.latest_snapshot("a") is None
        assert await backend.lookup_key("a", "k") is None
        assert await backend.seq_at("a", 1e12) == 0
        assert [i.agent_id for i in await backend.list_agents()] == ["keep"]
        assert await backend.delete_agent("a") is False
        # the id and the key are free again: a new stream starts at 1
        assert await backend.append(request("a", 0, key="k")) == AppendResult("a", 1, 1)
        # the other agent is untouched
        assert await backend.head("keep") == 2
        assert await backend.lookup_key("keep", "k") == AppendResult("keep", 1, 2, True)
        assert await backend.latest_snapshot("keep") == snapshot(1)

    # -- read_latest: the latest snapshot and the events after it, in one read -------

    async def _check_read_latest(
        self, backend: Backend, agent_id: str, snap_seq: int | None, tail: list[int]
    ) -> None:
        """The engine's read_latest equals the composed default, and both equal what
        was written: the snapshot at ``snap_seq`` and the events ``tail``."""
        native = await backend.read_latest(agent_id)
        composed = await Backend.read_latest(backend, agent_id)
        assert native == composed
        snap, events = native
        assert (snap.seq if snap is not None else None) == snap_seq
        if snap is not None:
            assert snap == snapshot(snap.seq)
        assert events == [event(s) for s in tail]
        # read_state: the same, with the head and its tag, in one call
        state = await backend.read_state(agent_id)
        assert state == await Backend.read_state(backend, agent_id)
        head, tag = await backend.head_tag(agent_id)
        if head == 0:
            assert state == (0, None, None, [])
        else:
            assert state == (head, tag, snap, events)

    @pytest.mark.parametrize("tail", [0, 1, 5])
    async def test_read_latest_without_a_snapshot(self, backend: Backend, tail: int) -> None:
        await backend.append(request("other", 0, 3, snap_at=3))
        if tail:
            await backend.append(request("a", 0, tail))
        await self._check_read_latest(backend, "a", None, list(range(1, tail + 1)))

    @pytest.mark.parametrize("tail", [0, 1, 7])
    async def test_read_latest_after_the_newest_snapshot(self, backend: Backend, tail: int) -> None:
        await backend.append(request("a", 0, 3, snap_at=2))
        await backend.append(request("a", 3, 2, snap_at=5))  # the newer snapshot wins
        await backend.append(request("other", 0, 9, snap_at=9))
        if tail:
            await backend.append(request("a", 5, tail))
        await self._check_read_latest(backend, "a", 5, list(range(6, 6 + tail)))
        # a snapshot saved afterwards moves the split point
        await backend.save_snapshot("a", snapshot(5 + tail))
        await self._check_read_latest(backend, "a", 5 + tail, [])

    async def test_read_latest_of_unknown_and_deleted_agents(self, backend: Backend) -> None:
        assert await backend.read_latest("nobody") == (None, [])
        assert await backend.read_state("nobody") == (0, None, None, [])
        await backend.append(request("a", 0, 4, snap_at=3))
        await backend.append(request("b", 0, 2))
        assert await backend.delete_agent("a") is True
        assert await backend.read_latest("a") == (None, [])
        await self._check_read_latest(backend, "b", None, [1, 2])
        await backend.append(request("a", 0, 2))  # re-created: no trace of the old stream
        await self._check_read_latest(backend, "a", None, [1, 2])

    async def test_read_latest_many_equals_one_read_per_agent(self, backend: Backend) -> None:
        """Many agents' latest states in one call: for each agent (in the order asked,
        repeats and unknown agents included) its head, head tag, newest snapshot and
        the events after it, as the per-agent reads give them."""
        await backend.append(request("a", 0, 3, snap_at=2))
        await backend.append(request("b", 0, 2))
        await backend.append(request("c", 0, 4, snap_at=4))
        await backend.append(request("gone", 0, 1))
        assert await backend.delete_agent("gone") is True
        ids = ["c", "nobody", "a", "gone", "b", "a"]
        many = await backend.read_latest_many(ids)
        assert len(many) == len(ids)
        for agent_id, got in zip(ids, many, strict=True):
            head, tag = await backend.head_tag(agent_id)
            if head == 0:
                assert got is None, agent_id
                continue
            assert got is not None, agent_id
            snap, events = await backend.read_latest(agent_id)
            assert (got.head, got.tag, got.snapshot, got.events) == (head, tag, snap, events)
        a = many[2]
        assert a is not None and a.snapshot == snapshot(2) and a.events == [event(3)]
        assert await backend.read_latest_many([]) == []

    # -- health and close ------------------------------------------------------------

    async def test_health(self, backend: Backend) -> None:
        health = await backend.health()
        assert isinstance(health, Health)
        assert health.ok is True
        assert health.backend == backend.name

    async def test_closed_backend_refuses_every_call(self, tmp_path: Path) -> None:
        backend = await self.make_backend(tmp_path)
        await backend.append(request("a", 0))
        await backend.close()
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "append": lambda: backend.append(request("a", 1)),
            "append_batch": lambda: backend.append_batch([request("a", 1)]),
            "lookup_key": lambda: backend.lookup_key("a", "k"),
            "head": lambda: backend.head("a"),
            "read": lambda: backend.read("a"),
            "seq_at": lambda: backend.seq_at("a", 1.0),
            "save_snapshot": lambda: backend.save_snapshot("a", snapshot(1)),
            "latest_snapshot": lambda: backend.latest_snapshot("a"),
            "list_agents": lambda: backend.list_agents(),
            "count_agents": lambda: backend.count_agents(),
            "delete_agent": lambda: backend.delete_agent("a"),
        }
        for name, call in calls.items():
            with pytest.raises(StoreClosed):
                await call()
                raise AssertionError(f"{name} worked on a closed backend")
        health = await backend.health()
        assert health.ok is False
        await backend.close()  # idempotent

    # -- agent ids: one rule on every engine (statekeeper.arguments.check_agent_id) ------

    @pytest.mark.parametrize(
        "bad",
        [
            pytest.param("", id="empty"),
            pytest.param("a\x00b", id="nul"),
            pytest.param("a\ud800b", id="lone-surrogate"),
            pytest.param("\u00e9" * 512 + "x", id="1025-bytes"),
            pytest.param("x" * (1 << 20), id="1-MiB"),
            pytest.param(b"agent", id="bytes"),
            pytest.param(None, id="none"),
            pytest.param(7, id="int"),
        ],
    )
    async def test_bad_agent_ids_are_refused_before_anything_is_written(
        self, backend: Backend, bad: object
    ) -> None:
        with pytest.raises(InvalidAgentId, match="agent_id"):
            await backend.append(request(bad, 0))  # type: ignore[arg-type]
        results = await backend.append_batch([request(bad, 0), request("ok", 0)])  # type: ignore[arg-type]
        assert isinstance(results[0], InvalidAgentId)
        assert results[1] == AppendResult("ok", 1, 1)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "head": lambda: backend.head(bad),  # type: ignore[arg-type]
            "head_tag": lambda: backend.head_tag(bad),  # type: ignore[arg-type]
            "read": lambda: backend.read(bad),  # type: ignore[arg-type]
            "seq_at": lambda: backend.seq_at(bad, 1.0),  # type: ignore[arg-type]
            "latest_snapshot": lambda: backend.latest_snapshot(bad),  # type: ignore[arg-type]
            "read_latest": lambda: backend.read_latest(bad),  # type: ignore[arg-type]
            "read_state": lambda: backend.read_state(bad),  # type: ignore[arg-type]
            "save_snapshot": lambda: backend.save_snapshot(bad, snapshot(1)),  # type: ignore[arg-type]
            "lookup_key": lambda: backend.lookup_key(bad, "k"),  # type: ignore[arg-type]
            "delete_agent": lambda: backend.delete_agent(bad),  # type: ignore[arg-type]
        }
        if backend.supports_leases:
            calls["acquire_lease"] = lambda: backend.acquire_lease(bad, "w", 5.0)  # type: ignore[arg-type]
            calls["get_lease"] = lambda: backend.get_lease(bad)  # type: ignore[arg-type]
        for name, call in calls.items():
            with pytest.raises(InvalidAgentId):
                await call()
                raise AssertionError(f"{name} accepted agent id {bad!r:.40}")
        assert [info.agent_id for info in await backend.list_agents()] == ["ok"]

    @pytest.mark.parametrize(
        "good",
        [
            pytest.param("x" * 1024, id="1024-ascii"),
            pytest.param("\u00e9" * 512, id="1024-bytes-latin"),
            pytest.param("\U0001f642" * 256, id="1024-bytes-emoji"),
            pytest.param("a b/c:d*?[]{}%\\\n\t'\"#", id="punctuation"),
            pytest.param("\u65e5\u672c-\u00fc", id="non-ascii"),
        ],
    )
    async def test_every_valid_agent_id_works_the_same(self, backend: Backend, good: str) -> None:
        assert await backend.append(request(good, 0, 2, key="k", snap_at=2)) == AppendResult(
            good, 1, 2
        )
        assert await backend.head(good) == 2
        assert [e.seq for e in await backend.read(good)] == [1, 2]
        found = await backend.latest_snapshot(good)
        assert found is not None and found.seq == 2
        assert await backend.read_latest(good) == (found, [])
        assert await backend.read_state(good) == (2, None, found, [])
        assert await backend.lookup_key(good, "k") == AppendResult(good, 1, 2, duplicate=True)
        assert [info.agent_id for info in await backend.list_agents()] == [good]
        if backend.supports_leases:
            lease = await backend.acquire_lease(good, "w", 5.0)
            assert (await backend.get_lease(good)) == lease
        assert await backend.delete_agent(good) is True
        assert await backend.head(good) == 0

    # -- shared storage (engines with a peer) ------------------------------------------

    async def test_peer_sees_committed_appends(self, backend: Backend, peer: Backend) -> None:
        await backend.append(request("a", 0, 3, key="k", snap_at=2))
        assert await peer.head("a") == 3
        assert await peer.read("a") == await backend.read("a")
        assert await peer.lookup_key("a", "k") == AppendResult("a", 1, 3, True)
        assert await peer.latest_snapshot("a") == snapshot(2)

    async def test_data_survives_close_and_reopen(self, tmp_path: Path) -> None:
        first = await self.make_backend(tmp_path)
        try:
            await first.append(request("a", 0, 5, key="k", snap_at=4))
        finally:
            await first.close()
        again = await self.open_peer(tmp_path)
        if again is None:
            pytest.skip("the engine keeps nothing after close")
        try:
            assert [e.seq for e in await again.read("a")] == [1, 2, 3, 4, 5]
            assert await again.latest_snapshot("a") == snapshot(4)
            assert await again.lookup_key("a", "k") == AppendResult("a", 1, 5, True)
            assert await again.append(request("a", 5)) == AppendResult("a", 6, 6)
        finally:
            await again.close()

    async def test_two_instances_race_one_winner_per_seq(
        self, backend: Backend, peer: Backend
    ) -> None:
        rounds = 30

        async def writer(b: Backend, name: bytes) -> list[int]:
            won = []
            for seq in range(1, rounds + 1):
                req = AppendRequest("a", seq - 1, (event(seq, body=name + b"-%d" % seq),))
                try:
                    await b.append(req)
                    won.append(seq)
                except ConflictError as exc:
                    assert exc.current_seq >= seq
            return won

        wins_a, wins_b = await asyncio.gather(writer(backend, b"A"), writer(peer, b"B"))
        assert sorted(wins_a + wins_b) == list(range(1, rounds + 1))
        stored = await backend.read("a")
        assert [e.seq for e in stored] == list(range(1, rounds + 1))
        for e in stored:
            owner = b"A" if e.seq in wins_a else b"B"
            assert e.payload == owner + b"-%d" % e.seq

    # -- leases and fencing ------------------------------------------------------------
    #
    # An engine that cannot check fencing tokens declares ``supports_leases = False``
    # and must refuse every lease call and every fenced append (never store one
    # unchecked); the other lease tests are then skipped.

    @pytest.fixture
    def leasing(self, backend: Backend) -> Backend:
        if not backend.supports_leases:
            pytest.skip(f"{type(backend).__name__} does not support leases")
        return backend

    async def test_unsupported_leases_are_refused_not_ignored(self, backend: Backend) -> None:
        if backend.supports_leases:
            pytest.skip(f"{type(backend).__name__} supports leases")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "acquire": lambda: backend.acquire_lease("a", "w1", 5.0),
            "renew": lambda: backend.renew_lease("a", "w1", 1, 5.0),
            "release": lambda: backend.release_lease("a", "w1", 1),
            "get": lambda: backend.get_lease("a"),
            "fenced append": lambda: backend.append(fenced("a", 0, ("w1", 1))),
        }
        for name, call in calls.items():
            with pytest.raises(LeasesUnsupported):
                await call()
                raise AssertionError(f"{name} did not refuse")
        results = await backend.append_batch([fenced("a", 0, ("w1", 1)), request("b", 0)])
        assert isinstance(results[0], LeasesUnsupported)
        assert results[1] == AppendResult("b", 1, 1)
        assert await backend.head("a") == 0

    async def test_acquire_grants_growing_tokens(self, leasing: Backend) -> None:
        backend = leasing
        assert await backend.get_lease("a") is None
        first = await backend.acquire_lease("a", "w1", 30.0)
        assert isinstance(first, LeaseInfo)
        assert (first.agent_id, first.holder) == ("a", "w1")
        assert first.token >= 1
        assert first.fence == ("w1", first.token)
        assert await backend.get_lease("a") == first
        with pytest.raises(LeaseHeld) as info:
            await backend.acquire_lease("a", "w2", 30.0)
        assert info.value.holder == "w1"
        assert info.value.expires_at == pytest.approx(first.expires_at, abs=0.01)
        # re-acquiring one's own lease hands out a newer token (fencing older incarnations)
        again = await backend.acquire_lease("a", "w1", 30.0)
        assert again.token > first.token
        # leases are per agent
        other = await backend.acquire_lease("b", "w2", 30.0)
        assert other.holder == "w2"
        assert (await backend.get_lease("a")) == again

    async def test_an_expired_lease_can_be_taken_over(self, leasing: Backend) -> None:
        backend = leasing
        old = await backend.acquire_lease("a", "w1", 30.0)
        with pytest.raises(LeaseHeld):
            await backend.acquire_lease("a", "w2", 5.0)
        old = await backend.renew_lease("a", "w1", old.token, 0.2)  # now let it expire
        await asyncio.sleep(0.3)  # a lower bound: the lease can only be older than this
        new = await backend.acquire_lease("a", "w2", 5.0)
        assert new.token > old.token
        assert new.holder == "w2"
        assert new.expires_at > old.expires_at

    async def test_renew_keeps_the_token_and_extends(self, leasing: Backend) -> None:
        backend = leasing
        lease = await backend.acquire_lease("a", "w1", 0.3)
        renewed = await backend.renew_lease("a", "w1", lease.token, 30.0)
        assert renewed.token == lease.token
        assert renewed.expires_at > lease.expires_at
        with pytest.raises(LeaseHeld):
            await backend.acquire_lease("a", "w2", 5.0)
        # expired but not taken over: still the newest token, so it may renew
        short = await backend.renew_lease("a", "w1", lease.token, 0.2)
        await asyncio.sleep(0.3)
        assert (await backend.renew_lease("a", "w1", lease.token, 0.2)).token == short.token
        await asyncio.sleep(0.3)
        taken = await backend.acquire_lease("a", "w2", 30.0)
        with pytest.raises(LeaseLost) as info:
            await backend.renew_lease("a", "w1", lease.token, 30.0)
        assert (info.value.token, info.value.current_token) == (lease.token, taken.token)
        assert info.value.current_holder == "w2"
        assert await backend.get_lease("a") == taken

    async def test_release_frees_the_lease_at_once(self, leasing: Backend) -> None:
        backend = leasing
        lease = await backend.acquire_lease("a", "w1", 30.0)
        assert await backend.release_lease("a", "w2", lease.token) is False  # not w2's
        assert await backend.release_lease("a", "w1", lease.token + 1) is False
        assert await backend.release_lease("a", "w1", lease.token) is True
        assert await backend.release_lease("a", "w1", lease.token) is False  # idempotent
        released = await backend.get_lease("a")
        assert released is not None and released.holder is None
        assert released.token == lease.token
        nxt = await backend.acquire_lease("a", "w2", 30.0)
        assert nxt.token > lease.token
        assert await backend.release_lease("nobody", "w1", 1) is False
        with pytest.raises(LeaseLost):
            await backend.renew_lease("a", "w1", lease.token, 5.0)

    async def test_fenced_append_with_the_current_token(self, leasing: Backend) -> None:
        backend = leasing
        lease = await backend.acquire_lease("a", "w1", 30.0)
        assert await backend.append(fenced("a", 0, lease.fence)) == AppendResult("a", 1, 1)
        assert await backend.append(fenced("a", 1, lease.fence, count=2)) == AppendResult("a", 2, 3)
        # unfenced writes are not governed by leases (optimistic locking only)
        assert await backend.append(request("a", 3)) == AppendResult("a", 4, 4)
        # an expired lease nobody took over still fences correctly: its token is newest
        short = await backend.acquire_lease("b", "w1", 0.2)
        await asyncio.sleep(0.3)
        assert await backend.append(fenced("b", 0, short.fence)) == AppendResult("b", 1, 1)

    async def test_stale_fenced_append_is_refused_and_writes_nothing(
        self, leasing: Backend
    ) -> None:
        backend = leasing
        old = await backend.acquire_lease("a", "w1", 0.2)
        await backend.append(fenced("a", 0, old.fence, key="k1"))
        await asyncio.sleep(0.3)
        new = await backend.acquire_lease("a", "w2", 30.0)
        await backend.append(fenced("a", 1, new.fence))
        before = await backend.read("a")
        stale = [
            fenced("a", 2, old.fence, snap_at=3),  # right seq, old token
            fenced("a", 2, old.fence, key="k9"),
            fenced("a", 0, old.fence, key="k1"),  # checked before the idempotency key
            fenced("a", 2, ("w1", new.token)),  # current token, wrong holder
            fenced("a", 2, ("w2", new.token + 1)),  # a token never granted
        ]
        for req in stale:
            with pytest.raises(LeaseLost) as info:
                await backend.append(req)
            assert info.value.agent_id == "a"
            assert info.value.current_token == new.token
            assert info.value.current_holder == "w2"
            assert await backend.head("a") == 2
            assert await backend.read("a") == before
            assert await backend.latest_snapshot("a") is None
            assert await backend.lookup_key("a", "k9") is None
        # a fence on an agent that never had a lease
        with pytest.raises(LeaseLost) as none:
            await backend.append(fenced("z", 0, ("w1", 1)))
        assert (none.value.current_token, none.value.current_holder) == (0, None)
        assert await backend.head("z") == 0
        # after a release, the released token fences nothing any more
        await backend.release_lease("a", "w2", new.token)
        with pytest.raises(LeaseLost):
            await backend.append(fenced("a", 2, new.fence))
        assert await backend.head("a") == 2

    async def test_fence_in_a_batch(self, leasing: Backend) -> None:
        backend = leasing
        old = await backend.acquire_lease("a", "w1", 30.0)
        await backend.release_lease("a", "w1", old.token)
        lease = await backend.acquire_lease("a", "w2", 30.0)
        results = await backend.append_batch(
            [
                fenced("a", 0, lease.fence),
                fenced("a", 1, old.fence),
                request("b", 0),
                fenced("a", 1, lease.fence, key="k"),
            ]
        )
        assert results[0] == AppendResult("a", 1, 1)
        assert isinstance(results[1], LeaseLost)
        assert results[2] == AppendResult("b", 1, 1)
        assert results[3] == AppendResult("a", 2, 2)
        assert [e.seq for e in await backend.read("a")] == [1, 2]

    async def test_tokens_never_go_back(self, leasing: Backend) -> None:
        backend = leasing
        tokens = []
        for holder in ("w1", "w2", "w1", "w3"):
            lease = await backend.acquire_lease("a", holder, 30.0)
            tokens.append(lease.token)
            await backend.append(fenced("a", await backend.head("a"), lease.fence))
            await backend.release_lease("a", holder, lease.token)
        # deleting the agent keeps its token: a stale holder of token 1 stays fenced off
        assert await backend.delete_agent("a") is True
        after = await backend.acquire_lease("a", "w4", 30.0)
        tokens.append(after.token)
        assert tokens == sorted(set(tokens))
        with pytest.raises(LeaseLost):
            await backend.append(fenced("a", 0, ("w1", tokens[0])))
        assert await backend.append(fenced("a", 0, after.fence)) == AppendResult("a", 1, 1)

    async def test_concurrent_acquires_have_one_winner(self, leasing: Backend) -> None:
        backend = leasing
        results = await asyncio.gather(
            *(backend.acquire_lease("a", f"w{i}", 30.0) for i in range(10)),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, LeaseInfo)]
        assert len(winners) == 1
        assert all(isinstance(r, LeaseHeld) for r in results if r is not winners[0])
        assert await backend.get_lease("a") == winners[0]

    @pytest.mark.parametrize("ttl", [0, -1.0, float("nan"), float("inf")])
    async def test_lease_ttl_must_be_positive(self, leasing: Backend, ttl: float) -> None:
        with pytest.raises(ConfigurationError):
            await leasing.acquire_lease("a", "w1", ttl)
        assert await leasing.get_lease("a") is None

    async def test_peer_sees_leases(self, leasing: Backend, peer: Backend) -> None:
        lease = await leasing.acquire_lease("a", "w1", 30.0)
        with pytest.raises(LeaseHeld):
            await peer.acquire_lease("a", "w2", 30.0)
        assert await peer.append(fenced("a", 0, lease.fence)) == AppendResult("a", 1, 1)
        assert await peer.release_lease("a", "w1", lease.token) is True
        taken = await peer.acquire_lease("a", "w2", 30.0)
        with pytest.raises(LeaseLost):
            await leasing.append(fenced("a", 1, lease.fence))
        assert await leasing.get_lease("a") == taken

    async def test_closed_backend_refuses_lease_calls(self, tmp_path: Path) -> None:
        backend = await self.make_backend(tmp_path)
        supported = backend.supports_leases
        await backend.close()
        if not supported:
            pytest.skip("no leases")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "acquire": lambda: backend.acquire_lease("a", "w1", 5.0),
            "renew": lambda: backend.renew_lease("a", "w1", 1, 5.0),
            "release": lambda: backend.release_lease("a", "w1", 1),
            "get": lambda: backend.get_lease("a"),
        }
        for name, call in calls.items():
            with pytest.raises(StoreClosed):
                await call()
                raise AssertionError(f"{name} worked on a closed backend")

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

    # -- optional capabilities ----------------------------------------------------------
    #
    # An engine lists what it offers beyond the core in ``capabilities`` (see
    # ``statekeeper.backends.base.Capability``). Every declared capability must work
    # (the tests below); every other one must be refused with a typed error and change
    # nothing — never silently do nothing or half of it. Leases are checked above.

    async def test_capabilities_are_declared_in_a_typed_way(self, backend: Backend) -> None:
        caps = backend.capabilities
        assert isinstance(caps, frozenset)
        assert all(isinstance(c, Capability) for c in caps)
        assert (Capability.LEASES in caps) == backend.supports_leases
        for capability in Capability:
            assert backend.supports(capability) == (capability in caps)
            if capability in caps:
                backend.require(capability)
            else:
                with pytest.raises(CapabilityUnsupported):
                    backend.require(capability, "a test needs it")

    @pytest.mark.parametrize("capability", [c for c in Capability if c is not Capability.LEASES])
    async def test_undeclared_capabilities_are_refused_not_ignored(
        self, backend: Backend, capability: Capability
    ) -> None:
        if backend.supports(capability):
            pytest.skip(f"{type(backend).__name__} offers {capability.value}")
        await backend.append(tagged(request("a", 0, 2, key="k", snap_at=2), b"t2"))
        calls: dict[Capability, Callable[[], Awaitable[Any]]] = {
            Capability.KEY_EXPORT: lambda: backend.idempotency_keys("a"),
            Capability.REWRITE: lambda: backend.rewrite(
                RewriteRequest("a", 2, b"t2", (event(1, body=b"x"),), head_tag=b"t2'")
            ),
            Capability.TTL: lambda: backend.set_ttl("a", 0.001),
            Capability.DROP_ALL: lambda: backend.drop_all(),
            Capability.MIGRATIONS: lambda: backend.schema_version(),
            Capability.PRUNE: lambda: backend.prune("a", 0, (2,)),
            Capability.FEED: lambda: backend.read_feed(0),
        }
        with pytest.raises(CapabilityUnsupported) as info:
            await calls[capability]()
        assert info.value.capability == capability.value
        assert info.value.backend == backend.name
        # refused, not half done: the agent is exactly as it was
        assert await backend.head_tag("a") == (2, b"t2")
        assert [e.payload for e in await backend.read("a")] == [b"payload-1", b"payload-2"]
        assert await backend.lookup_key("a", "k") == AppendResult("a", 1, 2, True)
        assert await backend.latest_snapshot("a") == snapshot(2)

    # -- export (backups) ----------------------------------------------------------

    async def test_export_streams_returns_each_slice_as_stored(self, backend: Backend) -> None:
        await backend.append(tagged(request("a", 0, 3, key="k1", snap_at=2), b"t3"))
        await backend.append(tagged(request("a", 3, 2), b"t5"))
        await backend.save_snapshot("a", snapshot(5))
        await backend.append(tagged(request("b", 0, 1), b"b1"))
        a_full, a_part, b_full, ghost = await backend.export_streams(
            [("a", 0, 4), ("a", 3, 5), ("b", 0, 1), ("ghost", 0, 0)]
        )
        assert [e.seq for e in a_full.events] == [1, 2, 3, 4]
        assert a_full.events == await backend.read("a", 0, 4)
        assert a_full.snapshot == snapshot(2)  # the latest at or below the slice's end
        assert (a_full.head, a_full.head_tag) == (5, b"t5")
        assert [e.seq for e in a_part.events] == [3, 4, 5]  # from the seq given, included
        assert a_part.snapshot == snapshot(5)
        assert b_full.events == await backend.read("b") and b_full.snapshot is None
        assert (ghost.head, ghost.events, ghost.snapshot) == (0, [], None)
        if backend.supports(Capability.KEY_EXPORT):
            assert a_full.keys == [("k1", 1, 3)]

    # -- prune (retention) ---------------------------------------------------------

    async def test_prune_removes_history_below_a_snapshot_and_nothing_else(
        self, backend: Backend
    ) -> None:
        _needs(backend, Capability.PRUNE)
        await backend.append(tagged(request("a", 0, 2, key="k1", snap_at=2), b"t2"))
        await backend.append(tagged(request("a", 2, 2, key="k2"), b"t4"))
        await backend.save_snapshot("a", snapshot(3))
        await backend.append(tagged(request("a", 4, 2, snap_at=6), b"t6"))
        await backend.append(tagged(request("b", 0, 3, snap_at=2), b"b3"))
        await backend.prune("a", 3, [6])
        assert [e.seq for e in await backend.read("a")] == [4, 5, 6]
        assert [e.seq for e in await backend.read("a", 1, 5)] == [4, 5]
        assert await backend.head_tag("a") == (6, b"t6")
        assert await backend.latest_snapshot("a") == snapshot(3)
        assert await backend.latest_snapshot("a", 2) is None
        assert await backend.lookup_key("a", "k1") is None  # its events are gone
        assert await backend.lookup_key("a", "k2") == AppendResult("a", 3, 4, True)
        assert await backend.seq_at("a", 1.5) == 0
        assert [e.seq for e in await backend.read("b")] == [1, 2, 3]  # other agents intact
        # the stream goes on from its base
        await backend.append(tagged(request("a", 6), b"t7"))
        assert [e.seq for e in await backend.read("a")] == [4, 5, 6, 7]
        infos = {i.agent_id: i.head_seq for i in await backend.list_agents()}
        assert infos == {"a": 7, "b": 3}

    async def test_prune_refuses_without_a_base_snapshot_and_changes_nothing(
        self, backend: Backend
    ) -> None:
        _needs(backend, Capability.PRUNE)
        await backend.append(tagged(request("a", 0, 4, snap_at=2), b"t4"))
        for base, drop in ((3, ()), (4, ()), (2, (2,)), (5, ())):
            with pytest.raises(ConfigurationError):
                await backend.prune("a", base, drop)
        with pytest.raises(ConfigurationError):
            await backend.prune("ghost", 0, ())
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4]
        assert await backend.latest_snapshot("a") == snapshot(2)
        await backend.prune("a", 0, [2])  # only thin snapshots
        assert await backend.latest_snapshot("a") is None
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4]

    @pytest.fixture
    def exporting(self, backend: Backend) -> Backend:
        if not backend.supports(Capability.KEY_EXPORT):
            pytest.skip(f"{type(backend).__name__} does not export idempotency keys")
        return backend

    async def test_key_export_lists_every_key_in_seq_order(self, exporting: Backend) -> None:
        backend = exporting
        assert await backend.idempotency_keys("a") == []
        await backend.append(request("a", 0, 2, key="first"))
        await backend.append(request("a", 2))  # no key
        await backend.append(request("a", 3, 3, key="third"))
        await backend.append(request("a", 6, key="odd: k/ü*?[]"))
        await backend.append(request("b", 0, key="first"))
        assert await backend.idempotency_keys("a") == [
            ("first", 1, 2),
            ("third", 4, 6),
            ("odd: k/ü*?[]", 7, 7),
        ]
        assert await backend.idempotency_keys("b") == [("first", 1, 1)]
        # a duplicate and a conflict add no key
        await backend.append(request("a", 0, 2, key="first"))
        with pytest.raises(ConflictError):
            await backend.append(request("a", 3, key="late"))
        assert len(await backend.idempotency_keys("a")) == 3
        assert await backend.delete_agent("a")
        assert await backend.idempotency_keys("a") == []

    async def test_exported_keys_import_by_appending_the_same_ranges(
        self, exporting: Backend
    ) -> None:
        """Export + import is how an agent moves between engines (the tiered backend's
        cold tier): afterwards a retried step is still recognised as a duplicate."""
        backend = exporting
        await backend.append(request("a", 0, 2, key="s1"))
        await backend.append(request("a", 2))
        await backend.append(request("a", 3, 2, key="s3"))
        keys = await backend.idempotency_keys("a")
        starts = {first: (key, last) for key, first, last in keys}
        seq = 0
        while seq < await backend.head("a"):
            key, last = starts.get(seq + 1, (None, seq + 1))
            events = tuple(await backend.read("a", seq, last))
            await backend.append(AppendRequest("copy", seq, events, None, key))
            seq = last
        assert await backend.idempotency_keys("copy") == keys
        for key, first, last in keys:
            retry = AppendRequest("copy", 0, tuple(await backend.read("a", first - 1, last)))
            retry = dataclasses.replace(retry, expected_seq=first - 1, idempotency_key=key)
            assert await backend.append(retry) == AppendResult("copy", first, last, True)
        assert await backend.read("copy") == await backend.read("a")

    async def test_ttl_expires_an_agent(self, backend: Backend) -> None:
        if not backend.supports(Capability.TTL):
            pytest.skip(f"{type(backend).__name__} has no TTL")
        await backend.append(request("a", 0, 2))
        await backend.append(request("b", 0))
        assert await backend.set_ttl("nobody", 5.0) is False
        for bad in (0, -1.0):
            with pytest.raises(ConfigurationError):
                await backend.set_ttl("a", bad)
        assert await backend.set_ttl("b", None) is True
        assert await backend.set_ttl("a", 0.2) is True
        deadline = time.monotonic() + 30
        while await backend.head("a") != 0:  # expiry is the server's business: wait for it
            assert time.monotonic() < deadline, "the agent never expired"
            await asyncio.sleep(0.05)
        assert await backend.read("a") == []
        assert await backend.head("b") == 1

    async def test_drop_all_deletes_everything(self, backend: Backend, tmp_path: Path) -> None:
        if not backend.supports(Capability.DROP_ALL):
            pytest.skip(f"{type(backend).__name__} has no drop_all")
        await backend.append(request("a", 0, 2, key="k", snap_at=1))
        await backend.append(request("b", 0))
        await backend.drop_all()
        peer = await self.open_peer(tmp_path)
        view = peer if peer is not None else backend
        try:
            assert await view.list_agents() == []
            assert await view.head("a") == 0
            assert await view.lookup_key("a", "k") is None
            assert await view.latest_snapshot("a") is None
        finally:
            if peer is not None:
                await peer.close()

    async def test_schema_version(self, backend: Backend, tmp_path: Path) -> None:
        if not backend.supports(Capability.MIGRATIONS):
            pytest.skip(f"{type(backend).__name__} has no migrations")
        await backend.append(request("a", 0))
        version = await backend.schema_version()
        assert type(version) is int and version >= 1
        peer = await self.open_peer(tmp_path)
        if peer is not None:
            try:  # opening it again migrates nothing more
                assert await peer.schema_version() == version
            finally:
                await peer.close()

    # -- read-only opening (``readonly=True``) -----------------------------------------

    async def _readonly(self, tmp_path: Path) -> Backend:
        ro = await self.open_readonly(tmp_path)
        if ro is None:
            pytest.skip("the engine cannot be opened read-only")
        return ro

    async def test_readonly_reads_what_a_writer_wrote(self, tmp_path: Path) -> None:
        writer = await self.make_backend(tmp_path)
        try:
            await writer.append(request("a", 0, 3, snap_at=2, key="k"))
            await writer.append(request("b", 0, 1))
            ro = await self._readonly(tmp_path)
            try:
                await ro.ensure_store()
                assert await ro.head("a") == 3
                assert [e.seq for e in await ro.read("a")] == [1, 2, 3]
                assert [i.agent_id for i in await ro.list_agents()] == ["a", "b"]
                assert await ro.count_agents() == 2
                latest = await ro.latest_snapshot("a")
                assert latest is not None and latest.seq == 2
                assert await ro.lookup_key("a", "k") is not None
                await writer.append(request("a", 3, 1))  # a reader sees later writes
                assert await ro.head("a") == 4
            finally:
                await ro.close()
        finally:
            await writer.close()

    async def test_readonly_refuses_every_write(self, tmp_path: Path) -> None:
        writer = await self.make_backend(tmp_path)
        try:
            await writer.append(request("a", 0, 2))
            await writer.initialize()
            ro = await self._readonly(tmp_path)
            try:
                writes: list[Callable[[], Awaitable[Any]]] = [
                    lambda: ro.append(request("a", 2, 1)),
                    lambda: ro.append(request("new", 0, 1)),
                    lambda: ro.append_batch([request("a", 2, 1)]),
                    lambda: ro.save_snapshot("a", snapshot(2)),
                    lambda: ro.delete_agent("a"),
                    lambda: ro.initialize(),
                ]
                if ro.supports_leases:
                    writes.append(lambda: ro.acquire_lease("a", "me", 10.0))
                for write in writes:
                    with pytest.raises(ReadOnlyStore):
                        await write()
            finally:
                await ro.close()
            assert await writer.head("a") == 2
            assert await writer.head("new") == 0
        finally:
            await writer.close()

    async def test_readonly_refuses_what_is_not_a_store(self, tmp_path: Path) -> None:
        """Nothing was ever written here: a read-only opening says so (and creates
        nothing); once the store is initialised, even empty, it is accepted."""
        with pytest.raises(NotAStore):
            ro = await self._readonly(tmp_path)
            try:
                await ro.ensure_store()
            finally:
                await ro.close()
        writer = await self.make_backend(tmp_path)
        try:
            await writer.initialize()
            ro = await self._readonly(tmp_path)
            try:
                await ro.ensure_store()
                assert await ro.list_agents() == []
            finally:
                await ro.close()
        finally:
            await writer.close()


def _needs(backend: Backend, capability: Capability) -> None:
    """Skip the calling test unless ``backend`` offers ``capability`` (the refusal of an
    undeclared one is checked by ``test_undeclared_capabilities_are_refused_not_ignored``)."""
    if not backend.supports(capability):
        pytest.skip(f"{type(backend).__name__} does not offer {capability.value}")


def fenced(
    agent_id: str,
    expected_seq: int,
    fence: tuple[str, int],
    count: int = 1,
    *,
    key: str | None = None,
    snap_at: int | None = None,
) -> AppendRequest:
    """Like :func:`request`, made under the lease ``fence`` = (holder, token)."""
    base = request(agent_id, expected_seq, count, key=key, snap_at=snap_at)
    return AppendRequest(
        base.agent_id, base.expected_seq, base.events, base.snapshot, base.idempotency_key, fence
    )


def tagged(req: AppendRequest, head_tag: bytes | None) -> AppendRequest:
    """``req`` carrying ``head_tag`` (the authenticated stream head after it)."""
    return dataclasses.replace(req, head_tag=head_tag)
