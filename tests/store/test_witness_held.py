"""The witness's marks are checked on every state read from storage, not only when the
store opens (:mod:`statekeeper.security.held`).

A server that lost acknowledged writes under a running process and was written again
since (another event at a lost seq) was served as it is by a process whose cache did
not hold the agent, although its witness held the mark of the lost record; its next
save wrote on top and replaced that mark, so nothing ever told. The memory engine
stands in for the server (its streams copied, then put back: a lossy failover);
tests/backends/test_redis_failover_witness.py does it with a Redis master and replica.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import RollbackDetected


def _witnessed(backend: MemoryBackend, witness: Path, **options: object) -> StateStore:
    return StateStore(backend, witness=witness, **options)  # type: ignore[arg-type]


async def _lost_and_written_again(
    store: StateStore, backend: MemoryBackend, other: StateStore
) -> None:
    """``a`` saved at seq 1..3 by ``store``, the server copied, seq 4 acknowledged, the
    server back at the copy, then ``other`` saved another event at seq 4 and 5."""
    for n in range(1, 4):
        await store.save("a", {"n": n})
    older = copy.deepcopy(backend._streams)
    assert (await store.save("a", {"n": 4})).last_seq == 4
    backend._streams = older
    await other.save("a", {"other": 4})
    await other.save("a", {"other": 5})


@pytest.mark.parametrize("first", ["load", "save"])
async def test_a_lost_seq_written_again_raises_in_the_process_that_marked_it(
    tmp_path: Path, first: str
) -> None:
    backend = MemoryBackend()
    async with (
        _witnessed(backend, tmp_path / "w", cache_size=0) as store,
        StateStore(backend) as other,
    ):
        await _lost_and_written_again(store, backend, other)
        with pytest.raises(RollbackDetected, match="record at seq 4 is not the one") as caught:
            if first == "load":
                await store.load("a")
            else:
                await store.save("a", {"n": 6})
        assert (caught.value.agent_id, caught.value.seq, caught.value.found) == ("a", 4, 5)
        assert await backend.head("a") == 5  # nothing written on top
        with pytest.raises(RollbackDetected):  # said on every read: the mark stays
            await store.load("a")


async def test_a_process_sharing_the_witness_file_is_told_too(tmp_path: Path) -> None:
    backend = MemoryBackend()
    async with (
        _witnessed(backend, tmp_path / "w", cache_size=0) as store,
        _witnessed(backend, tmp_path / "w") as reader,
        StateStore(backend) as other,
    ):
        await reader.save("z", {"n": 1})  # opened (the file read) before
        await _lost_and_written_again(store, backend, other)
        assert store.witness is not None and reader.witness is not None
        await store.witness.flush()
        reader.witness.load()  # (what its next open or a suspicion reads)
        with pytest.raises(RollbackDetected, match="seq 4"):
            await reader.load("a")


async def test_writes_of_others_past_the_mark_are_no_rollback(tmp_path: Path) -> None:
    backend = MemoryBackend()
    async with (
        _witnessed(backend, tmp_path / "w", cache_size=0) as store,
        _witnessed(backend, tmp_path / "w") as other,
    ):
        for n in range(1, 4):
            await store.save("a", {"n": n})
        for n in range(4, 7):
            await other.save("a", {"other": n})
        assert (await store.load("a")).data == {"other": 6}
        assert (await store.save("a", {"n": 7})).last_seq == 7


async def test_an_agent_deleted_and_created_again_elsewhere_is_no_rollback(
    tmp_path: Path,
) -> None:
    backend = MemoryBackend()
    async with (
        _witnessed(backend, tmp_path / "w", cache_size=0) as store,
        _witnessed(backend, tmp_path / "w") as other,
    ):
        for n in range(1, 4):
            await store.save("a", {"n": n})
        assert store.witness is not None
        await store.witness.flush()
        await other.delete("a")
        await other.save("a", {"new": 1})
        await other.save("a", {"new": 2})
        state = await store.load("a")
        assert (state.seq, state.data) == (2, {"new": 2})
        assert (await store.save("a", {"n": 4})).last_seq == 3


async def test_a_cold_load_read_inline_is_checked_too(tmp_path: Path) -> None:
    """SQLite answers a cold load inline (no coroutine): a marked agent's record is
    compared with the mark there, and the check runs when it is another one. The
    server's loss is made by hand: seq 4's rows removed, the head put back at seq 3."""
    import sqlite3

    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    async with StateStore(url, cache_size=0) as store, StateStore(url, witness=False) as other:
        for n in range(1, 4):
            await store.save("a", {"n": n})
        with sqlite3.connect(db) as conn:
            tag = conn.execute("SELECT head_tag FROM sk_agents WHERE agent_id = 'a'").fetchone()
        assert (await store.save("a", {"n": 4})).last_seq == 4
        assert (await store.load("a")).data == {"n": 4}  # (its own mark: no alarm)
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM sk_events WHERE agent_id = 'a' AND seq = 4")
            conn.execute("DELETE FROM sk_snapshots WHERE agent_id = 'a' AND seq = 4")
            conn.execute(
                "UPDATE sk_agents SET head_seq = 3, head_tag = ? WHERE agent_id = 'a'", tag
            )
        await other.save("a", {"other": 4})
        with pytest.raises(RollbackDetected, match="record at seq 4 is not the one"):
            await store.load("a")
