"""Retention on a store holding delta snapshots (``full_snapshot_every`` > 1): no delta
snapshot is kept without the full snapshot it is stored against. A compaction removed
the full base below its new base and kept the deltas above it, and a thinning by a store
opened with the default ``full_snapshot_every`` (what ``statekeeper retention apply``
opens) removed the bases of the deltas it kept: ``verify`` then reported every such
delta ("the base snapshot (seq N) is missing") and each load of one warned and fell back
to a replay, after a run that reported success."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.governance.retention import RetentionPolicy, apply_retention


@pytest.mark.parametrize("opened_with", [3, 1], ids=["deltas-on", "deltas-off"])
@pytest.mark.parametrize(
    "policy",
    ["* keep_last=5", "* snapshot_every=4", "* keep_last=5 snapshot_every=4"],
    ids=["compact", "thin", "compact-and-thin"],
)
async def test_retention_keeps_no_delta_snapshot_without_its_base(
    tmp_path: Path, policy: str, opened_with: int
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url, snapshot_every=2, full_snapshot_every=3) as store:
        for i in range(20):
            await store.save("a", {"n": i, "items": list(range(i))})
        expected = {seq: (await store.load("a", at_seq=seq)).data for seq in range(15, 21)}
    async with StateStore(url, full_snapshot_every=opened_with) as store:
        report = await apply_retention(store, RetentionPolicy.parse(policy))
        assert [a.outcome for a in report.actions] == ["done"]
    async with StateStore(url) as store:
        verified = await store.verify()
        assert verified.ok, verified.problems
        for seq, data in expected.items():
            assert (await store.load("a", at_seq=seq)).data == data
