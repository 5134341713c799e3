"""The backend contract, part: a prune at the head it was planned on
(``Backend.prune(agent_id, base_seq, drop_snapshots, head, checksum)``, what retention's
``keep_last`` compacts with). Run through :class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import inspect

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import ConfigurationError, ConflictError
from statekeeper.records import AppendRequest, RawEvent, RewriteRequest, StreamChange

from ._contract import Contract, _needs, request, snapshot

__all__ = ["PruneAtConformance"]


class PruneAtConformance(Contract):
    """Conformance tests: ``prune`` conditional on the head record's identity."""

    async def test_prune_takes_a_head_and_its_checksum(self, backend: Backend) -> None:
        """``prune`` takes the head the prune was planned on and that head event's
        stored checksum as its fourth and fifth arguments, by position or by name: an
        override written before them (``prune(self, agent_id, base_seq,
        drop_snapshots)``) fails every retention compaction with
        ``CapabilityUnsupported`` naming the engine."""
        _needs(backend, Capability.PRUNE)
        method = type(backend).prune
        try:
            inspect.signature(method).bind(backend, "a", 1, (), 2, b"sum")
            inspect.signature(method).bind(backend, "a", 1, (), head=2, checksum=b"sum")
        except TypeError as exc:
            pytest.fail(
                f"{type(backend).__qualname__}.prune must take (agent_id, base_seq,"
                f" drop_snapshots=(), head: int | None = None, checksum: bytes | None ="
                f" None): {exc}"
            )
        await backend.append(request("a", 0, 4, snap_at=2))
        checksum = (await backend.read("a", 3, 4))[0].checksum
        await backend.prune("a", 2, (), head=4, checksum=checksum)
        assert [e.seq for e in await backend.read("a")] == [3, 4]
        await backend.prune("a", 0, (), 4)  # (a head alone: its seq)
        with pytest.raises(ConfigurationError):  # (a checksum names a head's record)
            await backend.prune("a", 0, (), None, checksum)

    async def test_append_together_prunes_at_the_head_it_names(self, backend: Backend) -> None:
        """An engine whose ``append_together`` commits several streams declares
        ``prunes_together_at_head``: it compares a change's ``prune_head`` and
        ``prune_checksum`` in the commit (an ``append_together`` written before those
        fields would prune whichever stream is there — a governed compaction's on a
        stream deleted and made again since its plan; the store refuses an engine
        without the declaration, naming it); a malformed one is refused."""
        if not backend.appends_together:
            pytest.skip(f"{type(backend).__qualname__} has no append_together")
        if not backend.prunes_together_at_head:
            pytest.fail(
                f"{type(backend).__qualname__}.append_together must compare a"
                " StreamChange's prune_head and prune_checksum in its commit and declare"
                " prunes_together_at_head = True"
            )
        await backend.append(request("a", 0, 4, snap_at=2))
        checksum = (await backend.read("a", 3, 4))[0].checksum
        with pytest.raises(ConfigurationError):  # (a checksum names a head's record)
            bad = StreamChange("a", snapshot=snapshot(3), prune_to=3, prune_checksum=checksum)
            await backend.append_together([request("other", 0)], [bad])
        with pytest.raises(ConfigurationError):  # (a head names a prune's stream)
            await backend.append_together(
                [request("other", 0)], [StreamChange("a", snapshot=snapshot(3), prune_head=4)]
            )
        assert await backend.head("other") == 0
        change = StreamChange(
            "a", snapshot=snapshot(3), prune_to=3, prune_head=4, prune_checksum=checksum
        )
        await backend.append_together([request("other", 0)], [change])
        assert [e.seq for e in await backend.read("a")] == [4]
        assert await backend.head("other") == 1

    async def test_prune_at_a_stream_made_again_removes_nothing(self, backend: Backend) -> None:
        """An agent deleted and written again up to the same head (another process's
        new stream, its writes acknowledged) has another head record: a prune planned
        on the old stream (its head and head checksum) removes nothing
        (ConflictError, in the engine's atomic step), nor one at a head that moved;
        naming the right one prunes."""
        _needs(backend, Capability.PRUNE)
        await backend.append(request("a", 0, 4, snap_at=2))
        old = (await backend.read("a", 3, 4))[0].checksum
        assert await backend.delete_agent("a") is True
        remade = [
            RawEvent(s, "patch", 100.0 + s, b"new-%d" % s, b"new-sum-%d" % s) for s in range(1, 5)
        ]
        await backend.append(AppendRequest("a", 0, remade, snapshot(2, tag=b"new")))
        with pytest.raises(ConflictError) as caught:
            await backend.prune("a", 2, (), 4, old)
        assert (caught.value.expected_seq, caught.value.current_seq) == (4, 4)
        with pytest.raises(ConflictError) as caught:
            await backend.prune("a", 2, (), 3, b"new-sum-3")  # (a head that moved)
        assert (caught.value.expected_seq, caught.value.current_seq) == (3, 4)
        assert await backend.read("a") == remade  # the new stream, whole
        assert await backend.latest_snapshot("a") == snapshot(2, tag=b"new")
        if backend.appends_together:  # a retention compaction's commit with its entry
            stale = StreamChange(
                "a", snapshot=snapshot(3), prune_to=3, prune_head=4, prune_checksum=old
            )
            with pytest.raises(ConflictError):
                await backend.append_together([request("other", 0)], [stale])
            assert await backend.head("other") == 0  # nothing of the commit written
            assert await backend.read("a") == remade
            assert await backend.latest_snapshot("a") == snapshot(2, tag=b"new")
        await backend.prune("a", 2, (), 4, b"new-sum-4")
        assert await backend.read("a") == remade[2:]

    async def test_prune_never_drops_the_current_base(self, backend: Backend) -> None:
        """On a stream compacted to base 3 (its events up to 3 gone: the snapshot at 3
        is the only record of its state there), a prune whose ``drop_snapshots`` names
        that base — with ``base_seq`` 0 or 3, or below it — is refused
        (ConfigurationError naming the agent and the seq, in the engine's atomic step:
        another process may have compacted since the caller looked), nothing removed;
        the stream still loads. Other snapshots drop as asked."""
        _needs(backend, Capability.PRUNE)
        await backend.append(request("a", 0, 6, snap_at=3))
        await backend.save_snapshot("a", snapshot(5))
        await backend.prune("a", 3)
        assert await backend.stream_bases(["a"]) == [3]
        for base_seq in (0, 3):
            with pytest.raises(ConfigurationError, match=r"'a'.*\b3\b"):
                await backend.prune("a", base_seq, (3,))
            with pytest.raises(ConfigurationError, match=r"'a'.*\b3\b"):
                await backend.prune("a", base_seq, (5, 3))
        if backend.appends_together:  # (a prune committed with other writes: the same)
            for base_seq in (0, 3):
                change = StreamChange("a", prune_to=base_seq, drop_snapshots=(3,))
                with pytest.raises(ConfigurationError, match=r"'a'.*\b3\b"):
                    await backend.append_together([request("other", 0)], [change])
            assert await backend.head("other") == 0  # nothing of the commit written
        assert await backend.latest_snapshot("a", 3) == snapshot(3)
        assert await backend.latest_snapshot("a") == snapshot(5)  # (nothing removed)
        assert [e.seq for e in await backend.read("a")] == [4, 5, 6]
        await backend.prune("a", 0, (5,))  # (not the base: dropped)
        assert await backend.latest_snapshot("a") == snapshot(3)
        await backend.save_snapshot("a", snapshot(5))
        await backend.prune("a", 5, (3,), 6)  # (a new base: the old one goes anyway)
        assert await backend.latest_snapshot("a", 4) is None
        assert await backend.stream_bases(["a"]) == [5]

    async def test_append_together_takes_changes_alone(self, backend: Backend) -> None:
        """An engine declaring ``changes_alone_together`` commits changes with no
        append: a prune (and a rewrite) with a check of another stream, all or nothing
        — what a tiered store's prune and rewrite are committed with (its demoted-agent
        marker checked in the same commit). A check that fails: ConflictError naming the
        stream checked, nothing pruned or rewritten."""
        if not backend.appends_together or not backend.changes_alone_together:
            pytest.skip(f"{type(backend).__qualname__} takes no changes alone together")
        await backend.append(request("a", 0, 4, snap_at=2))
        await backend.append(request("m", 0))
        checks: list[StreamChange] = []
        if backend.checks_absence_together:
            checks.append(StreamChange("m", absent=True))
        if backend.changes_leases_and_rewrites:
            head, tag = await backend.head_tag("m")
            wrong = RewriteRequest("m", head, b"another-tag-0001")
            checks.append(StreamChange("m", rewrite=wrong))
        for check in checks:
            with pytest.raises(ConflictError) as caught:
                await backend.append_together([], [StreamChange("a", prune_to=2), check])
            assert caught.value.agent_id == "m"
            assert [e.seq for e in await backend.read("a")] == [1, 2, 3, 4]  # (nothing)
        if backend.checks_absence_together:
            passes = StreamChange("none", absent=True)
            assert await backend.append_together([], [StreamChange("a", prune_to=2), passes]) == []
            assert [e.seq for e in await backend.read("a")] == [3, 4]
        if backend.changes_leases_and_rewrites:
            head, tag = await backend.head_tag("m")
            fence = RewriteRequest("m", head, tag, head_tag=b"fenced-tag-00001")
            first = (await backend.read("a", 2, 3))[0]
            again = RawEvent(3, first.type, first.timestamp, b"rewritten", first.checksum)
            (seq, tag_a) = await backend.head_tag("a")
            rewrite = StreamChange("a", rewrite=RewriteRequest("a", seq, tag_a, (again,)))
            assert (
                await backend.append_together([], [rewrite, StreamChange("m", rewrite=fence)]) == []
            )
            assert (await backend.read("a", 2, 3))[0].payload == b"rewritten"
            assert await backend.head_tag("m") == (head, b"fenced-tag-00001")
