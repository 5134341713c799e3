"""``Backend.replace_snapshot`` is a settle's one commit, offered by the engines that
override it (``replaces_snapshots``: SQLite). Its default made two commits instead —
never called by the store, whose settle makes its own two on such an engine — and
broke its contract: the snapshot was stored with no head check (a head moved since:
no ConflictError, the row written at a seq that is not the head), and a prune
override older than the head arguments raised a raw TypeError. The default refuses
with CapabilityUnsupported, nothing written."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import CapabilityUnsupported
from statekeeper.testing import request, snapshot


async def test_the_default_refuses_and_writes_nothing() -> None:
    backend = MemoryBackend()
    assert not backend.replaces_snapshots
    await backend.append(request("a", 0, 3))
    with pytest.raises(CapabilityUnsupported, match=r"memory.*replace_snapshot") as caught:
        # planned at head 2, the head is 3 now: the contract's ConflictError, nothing written
        await backend.replace_snapshot("a", snapshot(2), None, 2, None)
    assert caught.value.capability == "replace_snapshot"
    assert await backend.latest_snapshot("a") is None  # (was: stored at 2, no error)


class _OldPrune(MemoryBackend):
    """An engine whose prune override predates its ``head`` and ``checksum``."""

    async def prune(  # type: ignore[override]
        self, agent_id: str, base_seq: int, drop_snapshots: Sequence[int] = ()
    ) -> None:
        await super().prune(agent_id, base_seq, drop_snapshots)


async def test_an_old_prune_override_raises_no_raw_type_error() -> None:
    backend = _OldPrune()
    await backend.append(request("a", 0, 2, snap_at=1))
    with pytest.raises(CapabilityUnsupported):  # (was: TypeError, prune's extra arguments)
        await backend.replace_snapshot("a", snapshot(2), 1, 2, None)
    assert (await backend.latest_snapshot("a")).seq == 1  # type: ignore[union-attr]


async def test_a_settle_on_an_engine_without_it_makes_its_own_two_commits() -> None:
    async with StateStore(_OldPrune(), snapshot_every=100) as store:
        for n in range(1, 4):
            await store.save("a", {"n": n})
        assert await store.settle("a") == 3
        assert (await store.backend.latest_snapshot("a")).seq == 3  # type: ignore[union-attr]
        assert (await store.load("a")).data == {"n": 3}
