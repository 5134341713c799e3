"""The backend contract, part: a check of another stream in an ``append_from_base``
commit (``guard=``, declared by ``guards_from_base``; what a tiered store's
rehydration copies a compacted agent's base page back with). Run through
:class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import dataclasses

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import CapabilityUnsupported, ConfigurationError, ConflictError
from statekeeper.records import RewriteRequest, StreamChange

from ._contract import Contract, _needs, event, request, snapshot, tagged

__all__ = ["FromBaseGuardConformance"]


class FromBaseGuardConformance(Contract):
    """Conformance tests: a compacted stream made only while another stream's head holds."""

    async def test_append_from_base_commits_only_with_its_guard(self, backend: Backend) -> None:
        """``guard`` (``guards_from_base``): the compacted stream is made only while the
        other stream's head is the one the guard names, checked in the same write (its
        new head tag stored too); another head or tag, or the stream gone, is a
        :class:`ConflictError` naming that stream, nothing written. An engine without
        it refuses a guard; a guard that rewrites records, or of the stream itself, is
        refused, nothing written. The stream there: a :class:`ConflictError`, and
        nothing of a holding guard written either (all or nothing)."""
        _needs(backend, Capability.BASE_IMPORT)
        await backend.append(tagged(request("m", 0), b"m1"))
        held = StreamChange("m", rewrite=RewriteRequest("m", 1, b"m1"))
        if not backend.guards_from_base:
            with pytest.raises(CapabilityUnsupported):
                await backend.append_from_base(request("a", 3, 1), snapshot(3), guard=held)
            assert await backend.head("a") == 0
            return
        for stale in (
            RewriteRequest("m", 1, b"other"),
            RewriteRequest("m", 2, b"m1"),
            RewriteRequest("gone", 1, None),
        ):
            with pytest.raises(ConflictError) as caught:
                await backend.append_from_base(
                    request("a", 3, 1),
                    snapshot(3),
                    guard=StreamChange(stale.agent_id, rewrite=stale),
                )
            assert caught.value.agent_id == stale.agent_id
            assert await backend.head("a") == 0
            assert await backend.latest_snapshot("a") is None
        event_again = dataclasses.replace(event(1), payload=b"x")
        for bad in (
            StreamChange("m", rewrite=RewriteRequest("m", 1, b"m1", (event_again,))),
            StreamChange("a", rewrite=RewriteRequest("a", 1, None)),
            StreamChange("m", delete_at=1),
            StreamChange("m", rewrite=RewriteRequest("m", 1, b"m1"), delete_at=1),
        ):
            with pytest.raises(ConfigurationError):
                await backend.append_from_base(request("a", 3, 1), snapshot(3), guard=bad)
        assert await backend.head("a") == 0
        assert await backend.head_tag("m") == (1, b"m1")
        moved = StreamChange("m", rewrite=RewriteRequest("m", 1, b"m1", head_tag=b"m2"))
        made = await backend.append_from_base(
            tagged(request("a", 3, 1), b"t4"), snapshot(3), guard=moved
        )
        assert (made.first_seq, made.last_seq) == (4, 4)
        assert [e.seq for e in await backend.read("a")] == [4]
        assert await backend.latest_snapshot("a") == snapshot(3)
        assert await backend.head_tag("m") == (1, b"m2")
        assert [e.seq for e in await backend.read("m")] == [1]
        with pytest.raises(ConflictError):  # (the stream there: a conflict, as without)
            await backend.append_from_base(request("a", 3, 1), snapshot(3), guard=held)
        # the stream there and the guard holding: a conflict naming the stream, and
        # nothing of the guard written either (its new head tag not stored)
        holds = StreamChange("m", rewrite=RewriteRequest("m", 1, b"m2", head_tag=b"m3"))
        with pytest.raises(ConflictError) as caught:
            await backend.append_from_base(request("a", 3, 1), snapshot(3), guard=holds)
        assert caught.value.agent_id == "a"
        assert await backend.head_tag("m") == (1, b"m2")
        assert [e.seq for e in await backend.read("a")] == [4]
