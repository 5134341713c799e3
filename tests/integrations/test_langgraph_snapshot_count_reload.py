"""A thread whose cached view is dropped every turn is still snapshotted.

The saver snapshots a thread once the events stored since its last snapshot add up
(``_SaverCommits._snapshot_if_due``), counted on its cached view of the thread. A view
read again from storage counted from zero: a thread evicted from the saver's cache
between its turns (more threads in use than ``cache_size``), or whose view a conflict
dropped every turn (another process writing it between this one's turns), was never
snapshotted, and a cold read of it replayed an ever-longer chain. Only a view a
"duplicate" answer dropped handed its count on (``test_langgraph_duplicate_snapshot.py``).
Now a view read from storage goes on from what the store stored since the thread's
last snapshot (the store's record knows it: its replay bytes).

The cadence is compared with a thread written the same way whose view stays cached:
the store's stored bytes are not exactly the saver's estimate of them, so the seqs
may differ, not the rhythm.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m

from .conftest import checkpoint, config, new_thread

PUTS = 40


def _record(saver: StatekeeperSaver, taken: dict[str, list[int]]) -> None:
    snapshot = saver.store.snapshot

    async def recorded(agent_id: str) -> int:
        seq = await snapshot(agent_id)
        taken.setdefault(agent_id, []).append(seq)
        return seq

    saver.store.snapshot = recorded  # type: ignore[method-assign]


async def _turns(savers: list[StatekeeperSaver], thread: str, other: str | None) -> None:
    """``PUTS`` checkpoints on ``thread``, by each saver in turn; after each, one on
    ``other`` (a saver with ``cache_size=1``: the thread's view is evicted)."""
    parent: str | None = None
    parent_other: str | None = None
    for i in range(PUTS):
        saver = savers[i % len(savers)]
        cp = checkpoint({"v": f"value {i} " * 40}, {"v": str(i + 1)})
        meta: Any = {"source": "loop", "step": i}
        await saver.aput(config(thread, checkpoint_id=parent), cp, meta, {"v": str(i + 1)})
        parent = cp["id"]
        if other is not None:
            cp = checkpoint({"v": "x"}, {"v": str(i + 1)})
            conf = config(other, checkpoint_id=parent_other)
            await saver.aput(conf, cp, meta, {"v": str(i + 1)})
            parent_other = cp["id"]


def _gaps(seqs: list[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(seqs)]


@pytest.mark.parametrize("dropped", ["evicted", "conflict"])
async def test_a_thread_read_again_every_turn_is_snapshotted_as_often(
    tmp_path: Any, dropped: str
) -> None:
    url = f"sqlite:///{tmp_path}/lg.db"
    # (no fork protection: a put planned on a stale view would be refused as a fork
    # before its append; here the append's conflict drops the view)
    opts: Any = {"snapshot_min_bytes": 512, "cache_size": 1, "fork_protection": False}
    first = await StatekeeperSaver.afrom_url(url, **opts)
    second = await StatekeeperSaver.afrom_url(url, **opts)
    try:
        taken: dict[str, list[int]] = {}
        _record(first, taken)
        _record(second, taken)
        kept, reread = new_thread(), new_thread()
        await _turns([first], kept, None)
        if dropped == "evicted":
            await _turns([first], reread, new_thread())
        else:  # (each saver's view is stale at its turn: its put conflicts, it reads)
            await _turns([first, second], reread, None)
        expected = taken.get(m.agent_id(first.prefix, kept), [])
        got = taken.get(m.agent_id(first.prefix, reread), [])
        assert len(expected) >= 5  # (the test snapshots the thread several times)
        assert len(got) * 2 >= len(expected), f"snapshots at {got}, kept view's at {expected}"
        assert max(_gaps([0, *got, 1 + PUTS])) <= 2 * max(_gaps([0, *expected])) + 1
        for saver in (first, second):  # (every checkpoint stored, read back)
            tup = await saver.aget_tuple(config(reread))
            assert tup is not None and tup.metadata["step"] == PUTS - 1
    finally:
        await first.aclose()
        await second.aclose()
