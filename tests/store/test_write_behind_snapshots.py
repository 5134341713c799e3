"""The write-behind buffer (``durability="async"``) stores every snapshot its saves made.

Its flush merges an agent's consecutive keyless appends into one; a merged append
carried only the later one's snapshot. Under the default ``snapshot_every="bounded"``
the later one is often a tail snapshot (a delta, see ``store/tails.py``) whose base was
the earlier one, so the tail was stored without its base: ``verify()`` of a store that
only ever saved reported "the base snapshot (seq 63) is missing" (at seq 95, 197, 245 of
250 saves) and every cold load skipped the tail and replayed the events it was there to
spare. Two appends that both carry a snapshot are no longer merged."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
async def test_buffered_saves_store_every_snapshot_with_its_base(
    engine: str, tmp_path: Path
) -> None:
    url = "memory://" if engine == "memory" else f"sqlite:///{tmp_path / 'a.db'}"
    store = StateStore(url, durability="async", flush_size=100, flush_interval=3600)
    try:
        for i in range(250):
            await store.save("a-1", {"n": i + 1, "note": "x" * 40})
        await store.flush()
        report = await store.verify()
        assert report.problems == []
        if engine == "memory":
            return
    finally:
        await store.close()
    async with StateStore(url) as fresh:  # a cold load: from the tail, not a replay
        assert (await fresh.verify()).problems == []
        loaded = await fresh.load("a-1")
        assert loaded.seq == 250 and loaded.data["n"] == 250
