"""The health report's breach counts are over every agent scanned, not over the top
lists it keeps (``HealthThresholds.top``): a fleet with more oversize states than
``top`` was reported as having ``top`` of them (trialscale)."""

from __future__ import annotations

from statekeeper import StateStore
from statekeeper.backends.memory import MemoryBackend
from statekeeper.observability.health import HealthThresholds, health_report


async def test_oversize_states_counted_beyond_the_top_list() -> None:
    async with StateStore(MemoryBackend(), snapshot_every=1) as store:
        for i in range(5):
            await store.save(f"big-{i}", {"blob": "x" * (2000 + i)})
        await store.save("small", {"n": 1})
        limits = HealthThresholds(max_state_bytes=1000, top=2)
        report = await health_report(store, limits)
    assert [s.agent_id for s in report.largest] == ["big-4", "big-3"]  # the top list: 2
    (breach,) = [b for b in report.breaches if "larger than" in b]
    assert breach.startswith("5 state(s) larger than 1000 bytes (largest: big-4, ")
    assert report.oversize_states == 5
    assert report.to_dict()["oversize_states"] == 5


async def test_no_threshold_counts_nothing() -> None:
    async with StateStore(MemoryBackend(), snapshot_every=1) as store:
        await store.save("big", {"blob": "x" * 5000})
        report = await health_report(store, HealthThresholds(max_state_bytes=None))
    assert report.oversize_states == 0
    assert not [b for b in report.breaches if "larger than" in b]
