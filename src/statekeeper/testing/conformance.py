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

The tests are grouped by part of the contract: this module holds the core (append,
idempotency, batches, reads, snapshots, listing); :mod:`._contract` the hooks, fixtures
and record builders; :mod:`.lifecycle`, :mod:`.leases`, :mod:`.head_tags`,
:mod:`.capabilities`, :mod:`.prune_at`, :mod:`.snapshot_base`, :mod:`.absence`,
:mod:`.from_base_guard` and :mod:`.feed` the rest.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from statekeeper.backends.base import Backend
from statekeeper.errors import (
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
)
from statekeeper.records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    RawEvent,
)

from ._contract import event, fenced, request, snapshot, tagged, untagged_at
from .absence import AbsenceConformance
from .capabilities import CapabilityConformance
from .feed import FeedConformance
from .from_base_guard import FromBaseGuardConformance
from .head_tags import HeadTagConformance
from .key_rename import KeyRenameConformance
from .leases import LeaseConformance
from .lifecycle import LifecycleConformance
from .prune_at import PruneAtConformance
from .snapshot_base import SnapshotBaseConformance

__all__ = [
    "BackendConformance",
    "event",
    "fenced",
    "request",
    "snapshot",
    "tagged",
    "untagged_at",
]


class BackendConformance(
    LifecycleConformance,
    LeaseConformance,
    HeadTagConformance,
    CapabilityConformance,
    KeyRenameConformance,
    FeedConformance,
    PruneAtConformance,
    AbsenceConformance,
    FromBaseGuardConformance,
    SnapshotBaseConformance,
):
    """The shared contract of :class:`statekeeper.backends.base.Backend`.

    Not collected on its own (no ``Test`` prefix); subclass it as ``Test<Engine>…``.
    """

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
        events = tuple(event(i, timestamp=t) for i, t in enumerate(stamps, start=1))
        await backend.append(AppendRequest("a", 0, events))
        await backend.append(AppendRequest("b", 0, (event(1, timestamp=1.0),)))
        cases = {5.0: 0, 10.0: 1, 15.0: 1, 20.0: 3, 30.4999: 3, 30.5: 4, 1e12: 4}
        for when, seq in cases.items():
            assert await backend.seq_at("a", when) == seq, when

    async def test_seq_at_is_the_last_seq_stamped_at_or_before(self, backend: Backend) -> None:
        # clocks can step back (NTP): the contract is the highest seq with ts <= t
        stamps = [10.0, 20.0, 50.0, 30.0, 35.0]
        events = tuple(event(i, timestamp=t) for i, t in enumerate(stamps, start=1))
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
            await backend.append(request(agent_id, 0, n % 3 + 1, timestamp=100.0 + n))
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
        await backend.append(request("a", 0, 2, timestamp=50.0))
        await backend.append(AppendRequest("a", 2, (event(3, timestamp=75.0),)))
        await backend.append(request("b", 0, timestamp=60.0))
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
            await backend.append(request(agent_id, 0, timestamp=ts))
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
        await backend.append(AppendRequest("e", 1, (event(2, timestamp=50.0),)))
        assert [i.agent_id for i in await backend.list_agents_by_write(limit=2)] == ["e", "g"]
        await backend.delete_agent("e")
        assert [i.agent_id for i in await backend.list_agents_by_write(limit=1)] == ["g"]

    async def test_count_agents(self, backend: Backend) -> None:
        for i in range(25):
            await backend.append(request(f"agent-{i:03d}", 0))
        assert await backend.count_agents() == 25
        await backend.delete_agent("agent-007")
        assert await backend.count_agents() == 24
