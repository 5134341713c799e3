"""The backend contract, part: a rewrite's snapshots below the stream's pruned base.
Run through :class:`~statekeeper.testing.BackendConformance`."""

from __future__ import annotations

import pytest

from statekeeper.backends.base import Backend, Capability
from statekeeper.errors import RewriteBelowPrunedBase
from statekeeper.records import RawEvent, RawSnapshot, RewriteRequest

from ._contract import Contract, _needs, _rewrite_refused, request, tagged

__all__ = ["SnapshotBaseConformance"]


class SnapshotBaseConformance(Contract):
    """Conformance tests: a rewrite never writes back a snapshot a prune removed."""

    async def test_rewrite_of_a_snapshot_below_the_base_is_refused(self, backend: Backend) -> None:
        """A rewrite carrying a snapshot at a seq below the stream's pruned base (a key
        rotation, a migration or a redaction planned before a retention prune) raises
        RewriteBelowPrunedBase (a ConfigurationError: its caller plans it again) naming
        the agent and the seq and writes none of it: the
        snapshot the prune removed (maybe personal data retention removed) is never
        stored again. The snapshot AT the base is kept by the prune and rewrites like
        any stored one. The same in a page (``rewrite_many``) and in
        ``append_together``."""
        _needs(backend, Capability.REWRITE)
        _needs(backend, Capability.PRUNE)
        await backend.append(request("a", 0, 2, snap_at=2))
        await backend.append(request("a", 2, 1, snap_at=3))
        await backend.append(tagged(request("a", 3, 2), b"t5"))
        await backend.prune("a", 3)  # (drops the snapshot at 2, keeps the one at 3)
        stored, base = await backend.read("a"), await backend.latest_snapshot("a", 3)
        assert base is not None and base.seq == 3
        assert await backend.latest_snapshot("a", 2) is None
        kept = RawEvent(4, "patch", 4.0, b"changed-4", b"sum-4'")
        gone = RawSnapshot(2, 2.0, b"state@2 back", b"ck2'")
        at_base = RawSnapshot(3, 3.0, b"state@3 new", b"ck3'")
        for events, snaps in (((kept,), (gone,)), ((kept,), (at_base, gone)), ((), (gone,))):
            bad = RewriteRequest("a", 5, b"t5", events, snaps, head_tag=b"t5'")
            await _rewrite_refused(backend, bad, r"'a'.* seq 2\b", seq=2, base=3, record="snapshot")
            assert await backend.read("a") == stored
            assert await backend.latest_snapshot("a", 2) is None
            assert await backend.latest_snapshot("a", 3) == base
            assert await backend.head_tag("a") == (5, b"t5")
        # in a page with another agent's request (which the engine may apply or not)
        await backend.append(request("c", 0))
        other = RewriteRequest("c", 1, None, (RawEvent(1, "patch", 1.0, b"c1 v2", b"s"),))
        bad = RewriteRequest("a", 5, b"t5", (kept,), (gone,), head_tag=b"t5'")
        with pytest.raises(RewriteBelowPrunedBase, match=r"'a'.* seq 2\b"):
            await backend.rewrite_many([other, bad])
        assert await backend.read("a") == stored
        assert await backend.latest_snapshot("a", 2) is None
        # the base's snapshot and the stored events still rewrite, a new snapshot too
        new_head = RawSnapshot(5, 5.0, b"state@5", b"ck5")
        good = RewriteRequest("a", 5, b"t5", (kept,), (at_base, new_head), head_tag=b"t5'")
        await backend.rewrite(good)
        assert (await backend.read("a"))[0] == kept
        assert await backend.latest_snapshot("a", 3) == at_base
        assert await backend.latest_snapshot("a") == new_head
        assert await backend.latest_snapshot("a", 2) is None
        again = RewriteRequest("a", 5, b"t5'", (), (at_base,), head_tag=b"t5''")
        assert await backend.rewrite_many([again]) == [True]
        assert await backend.head_tag("a") == (5, b"t5''")

    async def test_a_page_committed_together_is_refused_whole(self, backend: Backend) -> None:
        """An engine that commits a page of rewrites together (``rewrites_many``) writes
        none of a page of distinct agents holding a request refused for a snapshot below
        its stream's base — the requests before it and after it neither: its caller (a
        schema migration's page) takes the error for "nothing of the page written", voids
        every audit entry of the page and forgets no cached state. Was: PostgreSQL
        committed the others, the memory engine those before it."""
        _needs(backend, Capability.REWRITE)
        _needs(backend, Capability.PRUNE)
        if not backend.rewrites_many:
            pytest.skip(f"{type(backend).__name__} applies a page's rewrites in turn")
        await backend.append(request("a", 0, 2, snap_at=2))
        await backend.append(request("a", 2, 2, snap_at=4))
        await backend.append(request("a", 4, 1))
        await backend.prune("a", 4)  # (drops the snapshot at 2)
        for agent_id in ("c", "d"):
            await backend.append(request(agent_id, 0))
        before = {agent_id: await backend.read(agent_id) for agent_id in ("a", "c", "d")}
        gone = RawSnapshot(2, 2.0, b"state@2 back", b"ck2'")
        page = [
            RewriteRequest("c", 1, None, (RawEvent(1, "patch", 1.0, b"c1 v2", b"s"),)),
            RewriteRequest("a", 5, None, (), (gone,)),
            RewriteRequest("d", 1, None, (RawEvent(1, "patch", 1.0, b"d1 v2", b"s"),)),
        ]
        with pytest.raises(RewriteBelowPrunedBase, match=r"'a'.* seq 2\b"):
            await backend.rewrite_many(page)
        assert {agent_id: await backend.read(agent_id) for agent_id in before} == before
        assert await backend.latest_snapshot("a", 3) is None
        assert await backend.rewrite_many([page[0], page[2]]) == [True, True]
