"""A load at a seq the stream keeps, while another process compacts the agent
(retention ``keep_last``) to a base at or below that seq: between the load's read of
the snapshot it folds from (below the new base) and its read of the events after it,
the compaction removed both. The state asked for is stored (the new base, or the base
and the events after it).

Before: the fold found the events after its snapshot gone and raised HistoryCompacted
(at the base itself, a seq the stream keeps), or warned that the events "do not fold",
retried a full replay and raised HistoryCompacted — for a state that is there, which a
second load returns. The race is made at a named point (after the load's snapshot
read), not by timing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.records import RawSnapshot

from ..backends._services import fresh_url
from ._settle_race import compacted


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis", "s3", "tiered"])
@pytest.mark.parametrize("at", [10, 11, 12])
async def test_a_load_raced_by_a_compaction_to_below_its_seq_returns_the_state(
    engine: str, at: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=4, cache_size=0) as reader,
            StateStore(url, snapshot_every=4) as other,
        ):
            for n in range(1, 14):
                await other.save("a", {"n": n})
            backend = reader._reads.backend
            latest = backend.latest_snapshot
            raced = False

            async def then_compacted(agent_id: str, seq: int | None) -> RawSnapshot | None:
                nonlocal raced
                found = await latest(agent_id, seq)
                if not raced:
                    raced = True
                    await compacted(other, 10)
                return found

            backend.latest_snapshot = then_compacted  # type: ignore[method-assign,assignment]
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="statekeeper"):
                snap = await reader.load("a", at_seq=at)
            assert raced
            assert (snap.seq, snap.data) == (at, {"n": at})
            assert [
                r.getMessage() for r in caplog.records if r.name.startswith("statekeeper")
            ] == []
