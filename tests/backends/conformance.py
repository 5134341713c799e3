"""The backend contract, as one reusable test class every storage engine runs unmodified.

A backend module adds one small file::

    from statekeeper.backends.sqlite import SQLiteBackend
    from .conformance import BackendConformance

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
import os
from pathlib import Path

import pytest

from statekeeper.backends.base import Backend, Health
from statekeeper.errors import ConfigurationError, ConflictError, StoreClosed
from statekeeper.records import AgentInfo, AppendRequest, AppendResult, RawEvent, RawSnapshot

__all__ = ["BackendConformance", "event", "request", "snapshot"]


def event(seq: int, *, ts: float | None = None, kind: str = "patch", body: bytes = b"") -> RawEvent:
    """A raw event whose payload and checksum name its seq (so reads can be checked)."""
    payload = body or f"payload-{seq}".encode()
    return RawEvent(seq, kind, float(seq) if ts is None else ts, payload, b"sum-%d" % seq)


def snapshot(seq: int, *, ts: float | None = None, tag: bytes = b"") -> RawSnapshot:
    return RawSnapshot(seq, float(seq) if ts is None else ts, b"state@%d%s" % (seq, tag), b"ck")


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


class BackendConformance:
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

    # -- fixtures ------------------------------------------------------------------

    @pytest.fixture
    async def backend(self, tmp_path: Path):
        backend = await self.make_backend(tmp_path)
        try:
            yield backend
        finally:
            await backend.close()

    @pytest.fixture
    async def peer(self, backend: Backend, tmp_path: Path):
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
        seqs, cursor = [], 0
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
        calls = {
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
                pytest.fail(f"{name} worked on a closed backend")
        health = await backend.health()
        assert health.ok is False
        await backend.close()  # idempotent

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
