"""A mark found lost (security/lost.py) stops counting once this process writes the agent
again: the read path forgot it (its newer mark not yet written), ``verify`` did not."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends import MemoryBackend
from statekeeper.errors import RollbackDetected


def _pair(backend: MemoryBackend, witness: Path) -> tuple[StateStore, StateStore]:
    def one() -> StateStore:
        return StateStore(backend, witness=witness, cache_size=0, witness_interval=3600)

    return one(), one()


async def _lost(tmp_path: Path) -> tuple[StateStore, StateStore]:
    """``one`` holding the lost mark of seq 4 of ``a``, which ``two`` wrote again."""
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _pair(backend, witness)
    assert one.witness is not None and two.witness is not None
    await two.save("b", {"n": 1})
    await two.witness.flush()
    for n in range(1, 4):
        await one.save("a", {"n": n})
    older = copy.deepcopy(backend._streams)
    await one.save("a", {"n": 4})
    await one.witness.flush()
    backend._streams = older  # a lossy failover
    await two.save("a", {"other": 4})
    await two.witness.flush()
    with pytest.raises(RollbackDetected, match="seq 4"):
        await one.load("a")
    return one, two


async def test_verify_after_this_process_deleted_and_made_the_agent_again(
    tmp_path: Path,
) -> None:
    one, _ = await _lost(tmp_path)
    await one.delete("a")  # the rollback dealt with: the agent made again here
    await one.save("a", {"new": 1})  # (its mark not written yet: witness_interval)
    # (no read of it first: a read forgets the lost mark, verify did not)
    assert not (await one.verify()).problems  # was: RollbackDetected 'seq 4'
    assert (await one.load("a")).data == {"new": 1}


async def test_a_stream_wholly_lost_and_begun_again_elsewhere_is_a_rollback(
    tmp_path: Path,
) -> None:
    backend, witness = MemoryBackend(), tmp_path / "w"
    one, two = _pair(backend, witness)
    assert one.witness is not None and two.witness is not None
    await two.save("b", {"n": 1})
    await two.witness.flush()  # (its copy of the file: without one's marks of a)
    older = copy.deepcopy(backend._streams)
    for n in range(1, 4):
        await one.save("a", {"n": n})
    await one.witness.flush()
    backend._streams = older  # a lossy failover: a wholly lost, no delete
    await two.save("a", {"other": 1})  # (a never held by two: a new agent to it)
    await two.witness.flush()
    with pytest.raises(RollbackDetected, match="seq 3"):
        await one.load("a")
