"""A migration's rewrite made by another process (another store sharing the witness
file) within ``witness_interval`` of this store's last write of the agent is a rewrite,
never a rollback.

``HighWater.rewriting`` replaced the file's marks of the agents to rewrite by deletions
only when the file already held a mark of them — the pattern h/leftnight fixed for
``deleting``. This store's mark of its last write was not written yet (it waits up to
``witness_interval``), so none was replaced; flushed after the rewrite and before the
migrating store's mark of the new head, the file held the old chain link at the head's
seq: a store opening then (or this store's next load) took the rewrite for a rollback.
Now the rewrite always writes its deletions before the records are rewritten, so a mark
made before it is older and loses the merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.schema.migrate import migrate

from ..schema.test_events import v2
from ..schema.test_migrated_head_event_names import _record


def _store(url: str, witness: Path) -> StateStore:
    # an hour stands for "not yet written" (the other store's flush is a timer)
    return StateStore(url, witness=witness, witness_interval=3600)


@pytest.mark.parametrize("head", ["note", "transition"])
@pytest.mark.parametrize("first", ["load", "open"])
async def test_a_rewrite_elsewhere_right_after_a_write_is_not_a_rollback(
    tmp_path: Path, first: str, head: str
) -> None:
    url, witness = f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "w"
    async with _store(url, witness) as mine, _store(url, witness) as theirs:
        await _record(mine, head)  # its marks noted, not written yet
        assert (await migrate(theirs, v2, method="rewrite")).ok
        assert mine.witness is not None
        await mine.witness.flush()  # mine's mark of the old head, older than the rewrite
        if first == "load":
            mine._reads.cache.discard("a-1")
            assert (await mine.load("a-1")).schema_version == 2  # (was: RollbackDetected)
        async with StateStore(url, witness=witness) as opened:  # (was: raised on open)
            assert (await opened.load("a-1")).schema_version == 2
            assert (await opened.verify()).ok
