"""A delete made by another process (another store sharing the witness file) within
``witness_interval`` of this store's last write of the agent is a delete, never a
rollback.

The deleting store wrote its deletion into the file before the rows went only when the
file held a mark of the agent; this store's mark of its last write was not written yet
(it waits up to ``witness_interval``), so none was. Its flush came after the delete and
before the other store's deletion was written: the file then held a mark of an agent
found gone, and the next load (or the next store opening) raised
:class:`RollbackDetected` for a delete that was legitimate. A delete now always writes
its deletion before the rows go, so a mark made before the delete is older than it.

A server that lost acknowledged writes is still one (tests/store/test_rollback_seen*.py,
and the last test here).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import AgentNotFound, RollbackDetected


def _store(backend: MemoryBackend | str, witness: Path) -> StateStore:
    # the deletion is written no sooner than the delete itself writes it: an hour
    # stands for "not yet" (the other store's flush is a timer, at most a second later)
    return StateStore(backend, witness=witness, witness_interval=3600)


async def _flushed(store: StateStore) -> None:
    assert store.witness is not None
    await store.witness.flush()


@pytest.mark.parametrize("first", ["load", "open"])
async def test_a_delete_elsewhere_right_after_a_write_is_not_a_rollback(
    tmp_path: Path, first: str
) -> None:
    url, witness = f"sqlite:///{tmp_path / 'app.db'}", tmp_path / "w"
    async with _store(url, witness) as mine, _store(url, witness) as theirs:
        for n in range(1, 4):
            await mine.save("a", {"n": n})  # its mark noted, not written yet
        assert await theirs.delete("a")
        await _flushed(mine)  # mine's mark of seq 3, older than the delete
        if first == "load":
            with pytest.raises(AgentNotFound):  # (was: RollbackDetected, seq 3 acknowledged)
                await mine.load("a")
        async with StateStore(url, witness=witness) as opened:  # (was: raised on open)
            assert await opened.get("a") is None
        with pytest.raises(AgentNotFound):
            await mine.load("a")
        assert (await mine.save("a", {"n": "again"})).last_seq == 1
    async with StateStore(url, witness=witness) as after:
        assert (await after.load("a")).data == {"n": "again"}


async def test_an_agent_lost_whole_after_a_delete_elsewhere_is_still_a_rollback(
    tmp_path: Path,
) -> None:
    """The same two stores: an agent deleted and saved again, then lost whole by the
    server (a restart from a copy older than it) is a rollback."""
    backend, witness = MemoryBackend(), tmp_path / "w"
    async with _store(backend, witness) as mine, _store(backend, witness) as theirs:
        await mine.save("a", {"n": 1})
        assert await theirs.delete("a")
        await _flushed(mine)
        await _flushed(theirs)
        await mine.save("a", {"n": "again"})
        await _flushed(mine)
        backend._streams.pop("a")  # the server lost it whole
        with pytest.raises(RollbackDetected, match="seq 1 was acknowledged"):
            await mine.load("a")
