"""A settle whose snapshot lands at or below the stream's base: another process
appended and compacted the agent (retention ``keep_last``) between the settle's last
look at the head and its write (a window S3 and tiered did not see, their row taking no
head; every engine that settles now commits the row at the head settled, refused by
the race — nothing stored, the same loads checked; S3 refuses a settle).

* Below the base: the row is the true state at its seq, but the history after it is
  gone; a load of a seq between it and the base is compacted history
  (``HistoryCompacted``, as for any seq below the base). Before: such a load found that
  snapshot, found no events after it, logged "the events after the snapshot at seq N do
  not fold (stream ends at seq N ...); retrying with a full replay" and only then raised
  HistoryCompacted — a warning at every such load until a later retention run removed
  the row (seen in the SIGKILL trial of settle + retention + saves on SQLite).
* At the base (the compaction's base at the settle's very seq): the settle's row
  replaced the compaction's base row, which alone carries the compaction's mark.
  Before: every load below the base raised IntegrityError ('events 1..N are gone and no
  compaction removed them ... the stream's history was deleted'), not HistoryCompacted
  — an export of the store failed on it.

The race is made at a named point (the settle's policy step, after its last look), not
by timing (tests/store/_settle_race.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore

from ..backends._services import fresh_url
from ._settle_race import check_compacted_at, compacted, settle_raced


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "redis", "tiered"])
@pytest.mark.parametrize(
    ("written", "base", "below"),
    [(10, 17, (11, 12, 16)), (3, 10, (1, 5, 9))],
    ids=["below-the-base", "at-the-base"],
)
async def test_a_settles_late_row_leaves_loads_below_the_base_compacted(
    engine: str,
    written: int,
    base: int,
    below: tuple[int, ...],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def meanwhile(other: StateStore) -> None:
        for n in range(11, 11 + written):
            await other.save("a", {"n": n})
        await compacted(other, base)

    with fresh_url(engine, tmp_path) as url:
        await settle_raced(url, meanwhile)  # (stored at or below the base: late)
        await check_compacted_at(url, base, below, 10 + written, caplog)
