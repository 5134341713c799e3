"""A settle whose snapshot lands below the stream's base: another process appended and
compacted the agent (retention ``keep_last``) between the settle's last look at the
head and its write (store/settle.py says that window is not seen). The row is the true
state at its seq, but the history after it is gone; a load of a seq between it and the
base is compacted history (``HistoryCompacted``, as for any seq below the base).

Before: such a load found that snapshot, found no events after it, logged "the events
after the snapshot at seq N do not fold (stream ends at seq N ...); retrying with a full
replay" and only then raised HistoryCompacted — a warning at every such load until a
later retention run removed the row (seen in the SIGKILL trial of settle + retention +
saves on SQLite). The race is made here at a named point (the settle's policy step,
after its last look), not by timing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.errors import HistoryCompacted
from statekeeper.governance.retention import RetentionPolicy, apply_retention

from ..backends._services import fresh_url


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_a_load_below_a_settles_late_row_says_compacted_without_a_warning(
    engine: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=4, full_snapshot_every=1) as settler,
            StateStore(url, snapshot_every=4, full_snapshot_every=1) as other,
        ):
            for n in range(1, 11):
                await settler.save("a", {"n": n})
            settler.backend.replaces_snapshots = False  # (two commits)
            policy = settler._writes.snapshots
            prepare = policy.prepare

            async def meanwhile(record: Any) -> None:
                # after the settle's last look at the head (10), before its write
                for n in range(11, 21):
                    await other.save("a", {"n": n})
                report = await apply_retention(other, RetentionPolicy.parse("* keep_last=3"))
                assert [(a.kind, a.outcome, a.base_seq) for a in report.actions] == [
                    ("compact", "done", 17)
                ]
                await prepare(record)

            policy.prepare = meanwhile  # type: ignore[method-assign]
            try:
                assert await settler.settle("a") == 10  # (stored below the base: late)
            finally:
                policy.prepare = prepare  # type: ignore[method-assign]
        caplog.clear()
        async with StateStore(url) as store:
            with caplog.at_level(logging.WARNING, logger="statekeeper"):
                for seq in (11, 12, 16):
                    with pytest.raises(HistoryCompacted) as caught:
                        await store.load("a", at_seq=seq)
                    assert caught.value.base_seq == 17
                assert (await store.load("a", at_seq=17)).data == {"n": 17}
                assert (await store.load("a")).data == {"n": 20}
                assert (await store.verify()).ok
            assert [r.getMessage() for r in caplog.records] == []


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis"])
async def test_a_settles_late_row_at_the_new_base_keeps_the_compaction_mark(
    engine: str, tmp_path: Path
) -> None:
    """The same window, the compaction's base at the settle's very seq: the settle's
    row replaced the compaction's base row, which alone carries the compaction's mark.
    Before: every load below the base raised IntegrityError ('events 1..N are gone and
    no compaction removed them ... the stream's history was deleted'), not
    HistoryCompacted — an export of the store failed on it."""
    with fresh_url(engine, tmp_path) as url:
        async with (
            StateStore(url, snapshot_every=4, full_snapshot_every=1) as settler,
            StateStore(url, snapshot_every=4, full_snapshot_every=1) as other,
        ):
            for n in range(1, 11):
                await settler.save("a", {"n": n})
            settler.backend.replaces_snapshots = False  # (two commits)
            policy = settler._writes.snapshots
            prepare = policy.prepare

            async def meanwhile(record: Any) -> None:
                for n in range(11, 14):
                    await other.save("a", {"n": n})
                report = await apply_retention(other, RetentionPolicy.parse("* keep_last=3"))
                assert [(a.kind, a.outcome, a.base_seq) for a in report.actions] == [
                    ("compact", "done", 10)
                ]
                await prepare(record)

            policy.prepare = meanwhile  # type: ignore[method-assign]
            try:
                assert await settler.settle("a") == 10
            finally:
                policy.prepare = prepare  # type: ignore[method-assign]
        async with StateStore(url) as store:
            for seq in (1, 5, 9):
                with pytest.raises(HistoryCompacted) as caught:
                    await store.load("a", at_seq=seq)
                assert caught.value.base_seq == 10
            assert (await store.load("a", at_seq=10)).data == {"n": 10}
            assert (await store.load("a")).data == {"n": 13}
            assert (await store.verify()).ok
