"""A server that lost acknowledged writes is :class:`RollbackDetected` also when the seq
found is not lower than the one this store saw, and when the whole agent is gone:

* the server lost writes and another process (or another store) then wrote past the
  old head: the seq is no longer lower, but the event stored at the seq this store saw
  is another one. Before, the store served the other history as current and its next
  save appended to it, without a word.
* the server lost the whole agent (restarted from a copy older than its creation): a
  load said "no such agent" and a save re-created it at seq 1 over the acknowledged
  history. A delete leaves no trace in storage, so only the store's witness file can
  tell a lost agent from one deleted elsewhere: with one, this raises; a delete made
  through a store sharing that witness is still a delete.

The memory engine stands in for a server restarted from an older copy (as in
tests/store/test_rollback_seen.py; tests/backends/test_redis_rollback_past.py does it
with a real Redis).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import AgentNotFound, RollbackDetected


def _older_copy(backend: MemoryBackend) -> dict[str, object]:
    return copy.deepcopy(backend._streams)


def _restart_from(backend: MemoryBackend, streams: dict[str, object]) -> None:
    backend._streams = copy.deepcopy(streams)  # type: ignore[arg-type]


async def _lost_then_written_past(
    store: StateStore, other: StateStore, backend: MemoryBackend
) -> None:
    """``store`` saved seq 1..8 of agent ``a``; the server went back to seq 5; then
    ``other`` wrote seq 6..10 (another history under seqs 6..8)."""
    for n in range(1, 6):
        await store.save("a", {"n": n})
    older = _older_copy(backend)
    for n in range(6, 9):
        await store.save("a", {"n": n})
    assert (await store.load("a")).seq == 8
    _restart_from(backend, older)
    for n in range(6, 11):
        await other.save("a", {"other": n})
    assert await backend.head("a") == 10


@pytest.mark.parametrize("snapshot_every", [100, 2])
async def test_a_load_of_a_stream_written_past_what_was_lost_raises(snapshot_every: int) -> None:
    # snapshot_every=2: a snapshot past seq 8, so the event there is not among those a
    # load reads with the state
    backend = MemoryBackend()
    async with (
        StateStore(backend) as store,
        StateStore(backend, snapshot_every=snapshot_every) as other,
    ):
        await _lost_then_written_past(store, other, backend)
        with pytest.raises(RollbackDetected, match="another event at seq 8") as raised:
            await store.load("a")
        assert (raised.value.agent_id, raised.value.seq, raised.value.found) == ("a", 8, 10)
        # said once: later reads serve what is stored
        assert (await store.load("a")).data == {"other": 10}


@pytest.mark.parametrize("snapshot_every", [100, 2])
async def test_a_save_on_a_stream_written_past_what_was_lost_raises_and_writes_nothing(
    snapshot_every: int,
) -> None:
    backend = MemoryBackend()
    async with (
        StateStore(backend) as store,
        StateStore(backend, snapshot_every=snapshot_every) as other,
    ):
        await _lost_then_written_past(store, other, backend)
        with pytest.raises(RollbackDetected, match="another event at seq 8"):
            await store.save("a", {"n": 9})
        assert await backend.head("a") == 10


@pytest.mark.parametrize("snapshot_every", [100, 2])
async def test_another_writer_past_the_seq_seen_is_no_rollback(snapshot_every: int) -> None:
    backend = MemoryBackend()
    async with (
        StateStore(backend) as store,
        StateStore(backend, snapshot_every=snapshot_every) as other,
    ):
        for n in range(1, 6):
            await store.save("a", {"n": n})
        for n in range(6, 11):
            await other.save("a", {"other": n})
        assert (await store.save("a", {"n": 11})).last_seq == 11  # a conflict, retried
        for n in range(12, 15):
            await other.save("a", {"other": n})
        assert (await store.load("a")).data == {"other": 14}


async def _marks_written(store: StateStore) -> None:
    assert store.witness is not None
    await store.witness.flush()


def _witnessed(backend: MemoryBackend, witness: Path) -> StateStore:
    return StateStore(backend, witness=witness)


async def _lost_whole(store: StateStore, backend: MemoryBackend) -> None:
    """The server copied before agent ``a`` existed, ``a`` saved at seq 1..3 (its marks
    written to the witness), then the server restarted from the copy."""
    older = _older_copy(backend)
    for n in range(1, 4):
        await store.save("a", {"n": n})
    assert (await store.load("a")).seq == 3
    await _marks_written(store)
    _restart_from(backend, older)


async def test_a_load_of_an_agent_the_server_lost_whole_raises(tmp_path: Path) -> None:
    backend = MemoryBackend()
    async with _witnessed(backend, tmp_path / "w") as store:
        await _lost_whole(store, backend)
        with pytest.raises(RollbackDetected, match="seq 3 was acknowledged") as raised:
            await store.load("a")
        assert (raised.value.agent_id, raised.value.seq, raised.value.found) == ("a", 3, 0)


async def test_a_save_of_an_agent_the_server_lost_whole_raises_and_writes_nothing(
    tmp_path: Path,
) -> None:
    backend = MemoryBackend()
    async with _witnessed(backend, tmp_path / "w") as store:
        await _lost_whole(store, backend)
        with pytest.raises(RollbackDetected, match="the agent is gone"):
            await store.save("a", {"n": 4})
        assert await backend.head("a") == 0


async def test_an_agent_deleted_elsewhere_is_not_a_rollback(tmp_path: Path) -> None:
    backend = MemoryBackend()
    async with (
        _witnessed(backend, tmp_path / "w") as store,
        _witnessed(backend, tmp_path / "w") as other,
    ):
        for n in range(1, 4):
            await store.save("a", {"n": n})
        await _marks_written(store)
        await other.delete("a")
        with pytest.raises(AgentNotFound):
            await store.load("a")
        assert (await store.save("a", {"n": "again"})).last_seq == 1
        assert (await store.load("a")).seq == 1


async def test_the_check_costs_no_read_where_the_state_is_read_in_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an engine that reads the latest state in one call (SQLite here; PostgreSQL,
    Redis), the event at the seq seen comes with the events after the latest snapshot:
    a save overtaken by another writer compares it without one more read."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    async with StateStore(url) as store, StateStore(url) as other:
        for n in range(1, 6):
            await store.save("a", {"n": n})
        for n in range(6, 11):
            await other.save("a", {"other": n})
        reads: list[int] = []
        real = store.backend.read

        async def counted(*args: object, **kwargs: object) -> object:
            reads.append(1)
            return await real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(store.backend, "read", counted)
        assert (await store.save("a", {"n": 11})).last_seq == 11  # conflict, read, retried
        assert reads == []
