"""A running process's check of a state read from storage against a mark the witness
file no longer holds (:mod:`statekeeper.security.held`).

The check re-reads the file when a mark does not hold (another process's delete or
rewrite is a newer entry there). When the file held no entry of the agent any more,
the process's old copy of the mark (read when the store opened, or at its last flush)
was still taken as the truth, and every cold load raised ``RollbackDetected``:

- after the operator moved the witness file away to accept the store as it is now
  (the remedy ``docs/security.md`` and every alarm give) — a running process kept
  raising until it was restarted;
- after another process deleted the agent and created it again shorter, and then the
  marks of newer writes pushed the agent's entry out of the file (it keeps the newest
  ``keep``, 1,024): a legitimate delete taken for a rollback, where a process opening
  the store just then found nothing wrong.

Now a mark the file no longer holds, and that this process has not written yet, is
not checked: the process decides as one opening the store then would.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.errors import RollbackDetected


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/s.db"


async def _marked_at_5(store: StateStore) -> Path:
    """Agent ``a`` written to seq 5, its mark in the witness file (its path)."""
    for n in range(1, 6):
        await store.save("a", {"n": n})
    assert store.witness is not None
    await store.witness.flush()
    return Path(store.witness.path)


async def test_a_witness_file_moved_away_accepts_the_store_in_a_running_process(
    tmp_path: Path,
) -> None:
    async with StateStore(_url(tmp_path), cache_size=0, witness_interval=3600) as store:
        witness = await _marked_at_5(store)
        async with StateStore(_url(tmp_path), witness=False) as other:  # rolled back
            await other.delete("a")
            for n in range(1, 4):
                await other.save("a", {"other": n})
        with pytest.raises(RollbackDetected, match="seq 5"):
            await store.load("a")
        os.replace(witness, tmp_path / "moved-away")  # the store accepted
        state = await store.load("a")
        assert (state.seq, state.data) == (3, {"other": 3})
        await store.save("a", {"n": 4})  # (and written on: its new mark is kept)
    async with StateStore(_url(tmp_path)) as later:
        assert (await later.load("a")).data == {"n": 4}


async def test_a_delete_elsewhere_whose_entry_left_the_file_is_not_a_rollback(
    tmp_path: Path,
) -> None:
    async with StateStore(_url(tmp_path), cache_size=0, witness_interval=3600) as store:
        await _marked_at_5(store)
        async with StateStore(_url(tmp_path), witness_interval=3600) as other:
            assert other.witness is not None
            other.witness.keep = 2  # (the file keeps the newest 2 marks: 1,024 by default)
            await other.delete("a")  # (its deletion written to the file first)
            for n in range(1, 4):
                await other.save("a", {"other": n})
            await other.save("x", {"n": 1})
            await other.save("y", {"n": 1})  # a's entry pushed out of the file
        async with StateStore(_url(tmp_path)) as opening:  # a process opening it now
            assert (await opening.load("a")).seq == 3
        state = await store.load("a")
        assert (state.seq, state.data) == (3, {"other": 3})


async def test_a_mark_still_unwritten_is_checked_without_the_file(tmp_path: Path) -> None:
    """This process's own acknowledged write, not yet in the file: the file moved away
    says nothing about it, and a store without it is still a rollback."""
    async with StateStore(_url(tmp_path), cache_size=0, witness_interval=3600) as store:
        for n in range(1, 6):
            await store.save("a", {"n": n})
        async with StateStore(_url(tmp_path), witness=False) as other:  # rolled back
            await other.delete("a")
            for n in range(1, 4):
                await other.save("a", {"other": n})
        assert store.witness is not None
        assert not os.path.exists(store.witness.path)  # noqa: ASYNC240 (no flush yet)
        with pytest.raises(RollbackDetected, match="seq 5"):
            await store.load("a")


async def test_a_lost_seq_written_again_by_a_process_sharing_the_witness_file(
    tmp_path: Path,
) -> None:
    import copy

    from statekeeper.backends import MemoryBackend

    backend, witness = MemoryBackend(), tmp_path / "w"
    one = StateStore(backend, witness=witness, cache_size=0, witness_interval=3600)
    two = StateStore(backend, witness=witness, cache_size=0, witness_interval=3600)
    assert one.witness is not None and two.witness is not None
    await two.save("b", {"n": 1})  # (running, its copy of the file read before)
    await two.witness.flush()
    for n in range(1, 4):
        await one.save("a", {"n": n})
    older = copy.deepcopy(backend._streams)
    await one.save("a", {"n": 4})  # acknowledged, then lost
    await one.witness.flush()
    backend._streams = older  # a lossy failover
    await two.save("a", {"other": 4})  # another event at seq 4
    await two.witness.flush()
    with pytest.raises(RollbackDetected):
        await one.load("a")
