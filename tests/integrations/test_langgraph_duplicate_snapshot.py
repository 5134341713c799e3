"""A write answered "duplicate" counts towards the thread's next snapshot.

The saver snapshots a thread once the events it appended since the last snapshot
stored enough bytes (``_SaverCommits._snapshot_if_due``), counted on its cached view
of the thread. An append whose first attempt landed but whose reply was lost comes
back ``duplicate=True`` (the store's retry found its idempotency key): the saver drops
its view as stale. The snapshot check after the commit then ran on that dropped view:
the landed event was never counted (a snapshot it made due was not taken), and the
bytes counted so far were lost with the view (the thread's next view counted from
zero): the thread's snapshot came a whole interval late or more (a thread whose writes
often lose their reply was snapshotted ever later; a cold read replays the events
since). Now the landed event is counted, and the count carries on to the thread's next
view: the thread is snapshotted at the same seqs as a thread whose replies were not
lost.

The store's append is wrapped (the duplicate answer made deterministic); the two
threads get the same writes (the same checkpoint ids and values).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.integrations.langgraph import mapping as m
from statekeeper.records import AppendResult

from .conftest import checkpoint, config, new_thread

PUTS = 24


def _checkpoints() -> list[Any]:
    out = []
    for i in range(PUTS):
        cp = checkpoint({"v": f"value {i} " * 40}, {"v": str(i + 1)})
        out.append(cp)
    return out


async def _put_all(
    saver: StatekeeperSaver, thread: str, cps: list[Any], duplicate_at: set[int], mode: str
) -> None:
    store = saver.store
    original = store.append
    agent = m.agent_id(saver.prefix, thread)
    at = [0]

    async def answered(agent_id: str, *args: Any, **kwargs: Any) -> Any:
        result = await original(agent_id, *args, **kwargs)
        if agent_id != agent or kwargs.get("idempotency_key") is None:
            return result
        at[0] += 1
        if at[0] - 1 not in duplicate_at:
            return result
        # (what the store answers when its retry finds the first attempt's key)
        return AppendResult(agent_id, result.first_seq, result.last_seq, duplicate=True)

    store.append = answered  # type: ignore[method-assign]
    try:
        parent: str | None = None
        for i, cp in enumerate(cps):
            conf = config(thread, checkpoint_id=parent)
            meta = {"source": "loop", "step": i}
            if mode == "sync":
                await asyncio.to_thread(saver.put, conf, cp, meta, {"v": str(i + 1)})
            else:
                await saver.aput(conf, cp, meta, {"v": str(i + 1)})
            parent = cp["id"]
    finally:
        del store.append


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("duplicate_at", [{3}, {5, 11}, set(range(1, PUTS, 2))])
async def test_duplicates_leave_the_snapshots_where_they_were(
    url: str, duplicate_at: set[int], mode: str
) -> None:
    saver = await StatekeeperSaver.afrom_url(url, snapshot_min_bytes=512)
    try:
        taken: dict[str, list[int]] = {}
        snapshot = saver.store.snapshot

        async def recorded(agent_id: str) -> int:
            seq = await snapshot(agent_id)
            taken.setdefault(agent_id, []).append(seq)
            return seq

        saver.store.snapshot = recorded  # type: ignore[method-assign]
        cps = _checkpoints()
        plain, lossy = new_thread(), new_thread()
        await _put_all(saver, plain, cps, set(), mode)
        await _put_all(saver, lossy, cps, duplicate_at, mode)
        expected = taken.get(m.agent_id(saver.prefix, plain), [])
        assert len(expected) >= 3  # (the test snapshots the thread several times)
        assert taken.get(m.agent_id(saver.prefix, lossy), []) == expected
        for thread in (plain, lossy):  # (every checkpoint stored, read back)
            got = await saver.aget_tuple(config(thread))
            assert got is not None and got.checkpoint["id"] == cps[-1]["id"]
    finally:
        await saver.aclose()
