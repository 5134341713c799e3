"""An engine whose ``prune`` override predates the head identity arguments.

``Backend.prune(agent_id, base_seq, drop_snapshots=(), head=None, checksum=None)`` took
the head a compaction was planned on and that head event's stored checksum, compared in
the prune's atomic step (a stream deleted and written again up to the same seq since is
not cut). A third-party engine overriding it with the old three-argument signature
would get a bare ``TypeError`` from every retention compaction (or, worse, a prune of
whichever stream is there): the store raises ``CapabilityUnsupported`` naming the engine
class and what to add, nothing removed — retention reports the compaction failed,
naming it — and the conformance suite has a case that fails on such an override.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.errors import CapabilityUnsupported
from statekeeper.governance.retention import RetentionPolicy, apply_retention
from statekeeper.observability import instrument
from statekeeper.store.conditional import prune_at
from statekeeper.testing import request
from statekeeper.testing.prune_at import PruneAtConformance


class OldEngine(MemoryBackend):
    """A third-party engine written against the three-argument contract."""

    appends_together = False

    async def prune(  # type: ignore[override]
        self, agent_id: str, base_seq: int, drop_snapshots: Sequence[int] = ()
    ) -> None:
        await super().prune(agent_id, base_seq, drop_snapshots)


async def test_a_compaction_names_the_engine_and_removes_nothing() -> None:
    async with StateStore(OldEngine()) as store:
        for i in range(9):
            await store.save("acme/b", {"n": i})
        report = await apply_retention(store, RetentionPolicy.parse("acme keep_last=3\n"))
        [action] = report.actions
        assert (action.kind, action.outcome) == ("compact", "failed")
        assert f"{OldEngine.__module__}.OldEngine" in action.reason
        assert "checksum: bytes | None = None" in action.reason
        assert "Nothing was removed" in action.reason
        assert [e.seq async for e in store.history("acme/b")] == list(range(1, 10))
        assert (await store.load("acme/b")).data == {"n": 8}


async def test_a_wrapped_old_engine_is_named_too() -> None:
    engine = OldEngine()
    async with StateStore(engine) as store:
        instrument(store)  # (an instrumented backend forwards to it)
        wrapped = store.backend
        assert wrapped is not engine
        await wrapped.append(request("b", 0, 4, snap_at=2))
        head = (await engine.read("b", 3, 4))[0]
        with pytest.raises(CapabilityUnsupported, match=r"OldEngine"):
            await prune_at(wrapped, "b", 2, (), 4, head.checksum)
        assert [e.seq for e in await engine.read("b")] == [1, 2, 3, 4]
        await wrapped.prune("b", 2)  # (without a head the old override serves)
        assert [e.seq for e in await engine.read("b")] == [3, 4]


async def test_the_conformance_suite_finds_the_old_override() -> None:
    old, current = OldEngine(), MemoryBackend()
    case = PruneAtConformance()
    with pytest.raises(pytest.fail.Exception, match=r"OldEngine\.prune must take"):
        await case.test_prune_takes_a_head_and_its_checksum(old)
    await case.test_prune_takes_a_head_and_its_checksum(current)  # (the built-in engines pass)
    await old.close()
    await current.close()
