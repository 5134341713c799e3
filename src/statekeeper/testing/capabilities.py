"""The backend contract, part: the optional capabilities: their refusal when
undeclared, export (backups), prune (retention) and read-only opening. Run through
:class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import (
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
    InvalidAgentId,
    InvalidArgument,
    NotAStore,
    ReadOnlyStore,
)
from statekeeper.records import (
    STEP_KEY_PREFIX,
    AppendRequest,
    AppendResult,
    RewriteRequest,
)

from ._contract import Contract, _needs, event, request, snapshot, tagged

__all__ = ["CapabilityConformance"]


class CapabilityConformance(Contract):
    """Conformance tests: the optional capabilities, export, prune and read-only opening."""

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
            Capability.BASE_IMPORT: lambda: backend.append_from_base(
                request("x", 2, 2), snapshot(2)
            ),
            Capability.LEASE_LIST: lambda: backend.list_leases(),
            Capability.KEY_EXPIRY: lambda: backend.expire_keys("a", time.time() + 3600),
            Capability.KEY_RENAME: lambda: backend.rename_keys("a", [("k", "n")]),
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

    async def test_export_rows_of_whole_streams_stop_at_each_cut(self, backend: Backend) -> None:
        await backend.append(tagged(request("a", 0, 3, key="k1", snap_at=2), b"t3"))
        await backend.append(tagged(request("a", 3, 2), b"t5"))
        await backend.save_snapshot("a", snapshot(5))
        await backend.append(tagged(request("b", 0, 2), b"b2"))  # between, not asked for
        await backend.append(tagged(request("c", 0, 1), b"c1"))
        ranges = [("a", 0, 4), ("c", 0, 1), ("d", 0, 0)]
        a, c, ghost = await backend.export_rows(ranges)
        # the rows are the stored records, those of export_streams, up to each cut
        for rows, export in zip((a, c, ghost), await backend.export_streams(ranges), strict=True):
            assert rows.agent_id == export.agent_id
            assert rows.events == [
                (e.seq, e.type, e.timestamp, bytes(e.payload), bytes(e.checksum))
                for e in export.events
            ]
            snap = export.snapshot
            assert rows.snapshot == (
                (snap.seq, snap.timestamp, bytes(snap.payload), bytes(snap.checksum))
                if snap is not None
                else None
            )
            assert (rows.head, rows.head_tag, rows.keys) == (
                export.head,
                export.head_tag,
                export.keys,
            )
        assert [e[0] for e in a.events] == [1, 2, 3, 4]  # not the event after the cut
        assert a.snapshot is not None and a.snapshot[0] == 2  # the latest at or below it
        assert (a.head, a.head_tag) == (5, b"t5")
        assert [e[0] for e in c.events] == [1] and c.agent_id == "c"
        assert (ghost.head, ghost.events, ghost.snapshot) == (0, [], None)
        if backend.supports(Capability.KEY_EXPORT):
            assert a.keys == [("k1", 1, 3)]

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
        assert await backend.stream_bases(["a", "b", "ghost"]) == [0, 0, 0]
        await backend.prune("a", 3, [6])
        assert [e.seq for e in await backend.read("a")] == [4, 5, 6]
        assert await backend.stream_bases(["a", "b", "ghost"]) == [3, 0, 0]
        assert [e.seq for e in await backend.read("a", 1, 5)] == [4, 5]
        assert await backend.head_tag("a") == (6, b"t6")
        assert await backend.latest_snapshot("a") == snapshot(3)
        assert await backend.latest_snapshot("a", 2) is None
        # every idempotency record stays, also of the events it removed: a retry is one
        assert await backend.lookup_key("a", "k1") == AppendResult("a", 1, 2, True)
        assert await backend.lookup_key("a", "k2") == AppendResult("a", 3, 4, True)
        assert await backend.seq_at("a", 1.5) == 0
        assert [e.seq for e in await backend.read("b")] == [1, 2, 3]  # other agents intact
        # the stream goes on from its base
        await backend.append(tagged(request("a", 6), b"t7"))
        assert [e.seq for e in await backend.read("a")] == [4, 5, 6, 7]
        infos = {i.agent_id: i.head_seq for i in await backend.list_agents()}
        assert infos == {"a": 7, "b": 3}

    async def test_a_keyed_append_retried_after_prune_is_not_stored_again(
        self, backend: Backend
    ) -> None:
        """A compaction past a keyed append keeps its record: the retry, with the same
        key, gets the original seqs and writes nothing (not a second copy)."""
        _needs(backend, Capability.PRUNE)
        await backend.append(tagged(request("a", 0, 2, key="k1"), b"t2"))
        await backend.append(tagged(request("a", 2, 2, key="k2", snap_at=4), b"t4"))
        await backend.append(tagged(request("a", 4, 2), b"t6"))
        await backend.prune("a", 4)
        assert await backend.stream_bases(["a"]) == [4]
        for key, first, count, last in (("k1", 0, 2, 2), ("k2", 2, 2, 4)):
            again = await backend.append(tagged(request("a", first, count, key=key), b"x"))
            assert (again.first_seq, again.last_seq, again.duplicate) == (first + 1, last, True)
        assert await backend.head_tag("a") == (6, b"t6")
        assert [e.seq for e in await backend.read("a")] == [5, 6]
        if backend.supports(Capability.KEY_EXPORT):
            assert await backend.idempotency_keys("a") == [("k1", 1, 2), ("k2", 3, 4)]

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

    async def test_append_from_base_makes_the_stream_prune_leaves(self, backend: Backend) -> None:
        """A restore of a compacted stream: the base snapshot and the events after it in
        one write, read as :meth:`prune` leaves a stream; an existing agent is a
        conflict and a request that does not follow its base is refused, nothing
        written."""
        _needs(backend, Capability.BASE_IMPORT)
        made = await backend.append_from_base(
            tagged(request("a", 3, 2, key="k"), b"t5"), snapshot(3)
        )
        assert (made.first_seq, made.last_seq, made.duplicate) == (4, 5, False)
        assert [e.seq for e in await backend.read("a")] == [4, 5]
        assert await backend.head_tag("a") == (5, b"t5")
        assert await backend.latest_snapshot("a") == snapshot(3)
        assert await backend.latest_snapshot("a", 2) is None
        assert await backend.lookup_key("a", "k") == AppendResult("a", 4, 5, True)
        with pytest.raises(ConflictError):
            await backend.append_from_base(request("a", 3, 2), snapshot(3))
        for bad, base in ((request("b", 2, 2), snapshot(3)), (request("b", 0, 2), snapshot(0))):
            with pytest.raises(ConfigurationError):
                await backend.append_from_base(bad, base)
        assert await backend.head("b") == 0
        assert await backend.head_tag("a") == (5, b"t5")
        # it goes on as any stream; prune moves its base further
        await backend.append(tagged(request("a", 5, snap_at=6), b"t6"))
        await backend.append(tagged(request("a", 6), b"t7"))
        await backend.prune("a", 6)
        assert [e.seq for e in await backend.read("a")] == [7]
        assert await backend.latest_snapshot("a") == snapshot(6)

    async def test_append_from_base_raises_the_feed_floor_in_the_same_write(
        self, backend: Backend
    ) -> None:
        """``raise_floor``: the feed's floor through the stream's first event in the write
        itself (a restore's, an import's): a reader behind it meets the floor, never
        the kept events alone; without it the floor stays."""
        _needs(backend, Capability.BASE_IMPORT)
        _needs(backend, Capability.FEED)
        await backend.append(request("w", 0, 2))
        await backend.append_from_base(request("b", 3, 1), snapshot(3))
        floor, before = await backend.feed_bounds()
        assert before >= 3 and floor == 0
        await backend.append_from_base(request("a", 3, 2), snapshot(3), raise_floor=True)
        floor, head = await backend.feed_bounds()
        assert before < floor < head
        assert [(r.agent_id, r.event.seq) for r in await backend.read_feed(0)] == [("a", 5)]

    async def test_append_from_base_writes_the_kept_keys_prune_leaves(
        self, backend: Backend
    ) -> None:
        """The idempotency records of the appends a prune removed, written with the
        compacted stream: found as prune leaves them; a record not at or below the base
        is refused, nothing written."""
        _needs(backend, Capability.BASE_IMPORT)
        kept = [("k1", 1, 2), ("k2", 3, 3)]
        await backend.append_from_base(
            tagged(request("a", 3, 2, key="k3"), b"t5"), snapshot(3), kept
        )
        assert await backend.lookup_key("a", "k1") == AppendResult("a", 1, 2, True)
        assert await backend.lookup_key("a", "k2") == AppendResult("a", 3, 3, True)
        assert await backend.lookup_key("a", "k3") == AppendResult("a", 4, 5, True)
        again = await backend.append(request("a", 0, 2, key="k1"))
        assert (again.first_seq, again.last_seq, again.duplicate) == (1, 2, True)
        assert await backend.head_tag("a") == (5, b"t5")
        if backend.supports(Capability.KEY_EXPORT):
            assert await backend.idempotency_keys("a") == [*kept, ("k3", 4, 5)]
        for bad in ([("k", 4, 4)], [("k", 3, 5)], [("k", 0, 1)], [("k", 1, 1), ("k", 2, 2)]):
            with pytest.raises(ConfigurationError):
                await backend.append_from_base(request("b", 3, 1), snapshot(3), bad)
        with pytest.raises(ConfigurationError):
            await backend.append_from_base(request("b", 3, 1), snapshot(3), [("", 1, 1)])
        assert await backend.head("b") == 0

    async def test_append_from_base_keeps_the_record_of_an_append_cut_in_two(
        self, backend: Backend
    ) -> None:
        """A compaction whose base falls inside a keyed append (seqs 2..4, base 3) keeps
        its record whole; written with the compacted stream, a retry of that append
        gets its original seqs and nothing is written. Two such records, one past the
        request's events, or one beside a keyed request are refused, nothing written."""
        _needs(backend, Capability.BASE_IMPORT)
        kept = [("k1", 1, 1), ("cut", 2, 4)]
        made = await backend.append_from_base(tagged(request("a", 3, 2), b"t5"), snapshot(3), kept)
        assert (made.first_seq, made.last_seq, made.duplicate) == (4, 5, False)
        assert await backend.lookup_key("a", "cut") == AppendResult("a", 2, 4, True)
        again = await backend.append(request("a", 1, 3, key="cut"))
        assert (again.first_seq, again.last_seq, again.duplicate) == (2, 4, True)
        assert await backend.head_tag("a") == (5, b"t5")
        assert [e.seq for e in await backend.read("a")] == [4, 5]
        if backend.supports(Capability.KEY_EXPORT):
            assert await backend.idempotency_keys("a") == kept
        for req, bad in (
            (request("b", 3, 1), [("c1", 2, 5)]),  # past the request's last seq
            (request("b", 3, 2), [("c1", 2, 4), ("c2", 3, 5)]),  # two across the base
            (request("b", 3, 2, key="own"), [("c1", 2, 4)]),  # the request's own key
        ):
            with pytest.raises(ConfigurationError):
                await backend.append_from_base(req, snapshot(3), bad)
        assert await backend.head("b") == 0

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

    # -- idempotency record expiry (retention's keys_ttl) --------------------------------

    async def test_expire_keys_forgets_the_records_made_before_a_time(
        self, backend: Backend
    ) -> None:
        """A record is made at its append's time; ``expire_keys`` forgets those made
        before ``before`` (one agent's, or every agent's), nothing else: the events stay,
        and a retry of an expired append is a new append."""
        _needs(backend, Capability.KEY_EXPIRY)
        made = time.time()
        await backend.append(request("a", 0, 2, key="k1", timestamp=made))
        middle = time.time()
        while middle <= made:  # (a clock of coarse resolution: wait for it to move on)
            middle = time.time()
        await backend.append(request("a", 2, key="k2", timestamp=time.time()))
        await backend.append(request("b", 0, key="k1", timestamp=time.time()))
        hour_ago, later = made - 3600, time.time() + 3600
        assert await backend.expire_keys("a", hour_ago) == 0
        assert await backend.expire_keys(None, hour_ago) == 0
        assert await backend.expire_keys("ghost", later) == 0
        # the records made before ``middle``: k1 of "a" alone (counted first: a dry run)
        assert await backend.expire_keys("a", middle, count_only=True) == 1
        assert await backend.expire_keys(None, later, count_only=True) == 3
        assert await backend.lookup_key("a", "k1") == AppendResult("a", 1, 2, True)
        assert await backend.expire_keys("a", middle) == 1
        assert await backend.lookup_key("a", "k1") is None
        assert await backend.lookup_key("a", "k2") == AppendResult("a", 3, 3, True)
        # one agent's: the other keeps its own
        assert await backend.expire_keys("a", later) == 1
        assert await backend.lookup_key("a", "k2") is None
        assert await backend.lookup_key("b", "k1") == AppendResult("b", 1, 1, True)
        # the events are untouched; a retry of an expired append is not recognised:
        # at its old head it conflicts, at the new head it is stored again
        assert [e.seq for e in await backend.read("a")] == [1, 2, 3]
        assert await backend.head("a") == 3
        with pytest.raises(ConflictError):
            await backend.append(request("a", 0, 2, key="k1", timestamp=time.time()))
        again = await backend.append(request("a", 3, key="k1", timestamp=time.time()))
        assert again == AppendResult("a", 4, 4)
        # every agent's
        assert await backend.expire_keys(None, later) == 2
        assert await backend.lookup_key("b", "k1") is None
        assert await backend.lookup_key("a", "k1") is None
        assert await backend.head("b") == 1

    async def test_expire_keys_keeps_a_durable_steps_record(self, backend: Backend) -> None:
        """A durable step's record (key ``step:<id>``) is what makes the step run once:
        ``expire_keys`` never forgets it, however old (it goes with the agent); the
        agent's other records of the same age go."""
        _needs(backend, Capability.KEY_EXPIRY)
        made, step = time.time(), STEP_KEY_PREFIX + "charge"
        await backend.append(request("a", 0, key=step, timestamp=made))
        await backend.append(request("a", 1, key="k1", timestamp=made))
        newest = STEP_KEY_PREFIX + "email-1"  # (the newest commit's key, on S3)
        await backend.append(request("a", 2, key=newest, timestamp=made))
        later = time.time() + 3600
        assert await backend.expire_keys("a", later, count_only=True) == 1
        assert await backend.expire_keys(None, later, count_only=True) == 1
        assert await backend.expire_keys("a", later) == 1
        assert await backend.expire_keys(None, later) == 0
        assert await backend.lookup_key("a", "k1") is None
        assert await backend.lookup_key("a", step) == AppendResult("a", 1, 1, True)
        assert await backend.lookup_key("a", newest) == AppendResult("a", 3, 3, True)
        again = await backend.append(request("a", 0, key=step, timestamp=time.time()))
        assert again == AppendResult("a", 1, 1, True)  # a retry: still recognised

    async def test_expire_keys_refuses_bad_arguments(self, backend: Backend) -> None:
        _needs(backend, Capability.KEY_EXPIRY)
        await backend.append(request("a", 0, key="k", timestamp=time.time()))
        for bad in (float("nan"), float("inf"), "soon", True, None):
            with pytest.raises(InvalidArgument):
                await backend.expire_keys("a", bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidAgentId):
            await backend.expire_keys("", time.time() + 3600)
        assert await backend.lookup_key("a", "k") == AppendResult("a", 1, 1, True)

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

    async def test_store_markers_are_durable_and_per_name(
        self, backend: Backend, tmp_path: Path
    ) -> None:
        """``read_marker`` / ``set_marker``: an engine that keeps store-level markers
        answers False, then True once set (idempotently), to another connection too;
        one that keeps none answers None, before and after."""
        first = await backend.read_marker("encrypted")
        if first is None:
            await backend.set_marker("encrypted")
            assert await backend.read_marker("encrypted") is None
            pytest.skip(f"{type(backend).__name__} keeps no store-level markers")
        assert first is False
        await backend.set_marker("encrypted")
        await backend.set_marker("encrypted")
        assert await backend.read_marker("encrypted") is True
        assert await backend.read_marker("other") is False
        peer = await self.open_peer(tmp_path)
        if peer is not None:
            try:
                assert await peer.read_marker("encrypted") is True
            finally:
                await peer.close()
        if backend.supports(Capability.DROP_ALL):
            await backend.drop_all()
            assert await backend.read_marker("encrypted") is False

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
