"""The marks a process found lost to a stream gone back and written again.

A process holding the mark of a record the store lost, whose agent another process
sharing the witness file wrote again at that seq (a lossy failover), learns it from the
other process's newer mark: of the same incarnation, not reset since
(:func:`.incarnation.same_stream`), or of another one begun without a record that the
marked one was ended (a stream lost whole and begun again: :mod:`.ended`). That newer
mark replaces the lost one in the file, and in this process's copy of the file at its
next read of it: the next read of the agent served the other state and ``verify`` found
nothing — the rollback reported once (tests/store/test_witness_incarnation.py). The lost
mark is kept here, by witness, so that every read of the agent raises
``RollbackDetected`` again and ``verify`` reports it, until the file says otherwise
(moved away, the agent deleted or made again since) or this process writes the agent
again.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .ended import unexplained
from .incarnation import needs_proof, same_stream

if TYPE_CHECKING:
    from ..errors import RollbackDetected
    from ..store.store import StateStore
    from .highwater import HighWater

__all__ = ["forget", "keep", "lost_mark", "rechecked", "replaced", "with_lost"]

#: the lost marks, by witness and agent id
_LOST: weakref.WeakKeyDictionary[HighWater, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
#: whether any mark was ever found lost here: the read path's one test (a weak
#: dictionary's ``len`` is a Python call)
_ANY = False


def keep(witness: HighWater, agent_id: str, mark: dict[str, Any]) -> None:
    """``mark`` of ``agent_id`` was found lost: checked on every later read."""
    global _ANY
    _LOST.setdefault(witness, {})[agent_id] = mark
    _ANY = True


def forget(witness: HighWater, agent_id: str) -> None:
    """The file says otherwise now (or this process wrote the agent since)."""
    if _ANY:
        lost = _LOST.get(witness)
        if lost is not None:
            lost.pop(agent_id, None)


def lost_mark(witness: HighWater, agent_id: str) -> dict[str, Any] | None:
    """The mark of ``agent_id`` found lost, unless this process wrote it since (its
    newer mark is the one to check then)."""
    if not _ANY:  # (the common case: one test on the read path)
        return None
    mark = _LOST.get(witness, {}).get(agent_id)
    if mark is None:
        return None
    dirty = witness._dirty.get(agent_id)
    if dirty is not None and dirty[2] > float(mark["t"]):
        forget(witness, agent_id)
        return None
    return mark


def with_lost(witness: HighWater, marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``marks`` (:meth:`HighWater.marks`) with the lost mark of an agent in place of
    the mark that replaced it: what ``verify`` goes through. A lost mark this process
    wrote its agent after is not (:func:`lost_mark`) — was: ``verify`` reported it
    until the new mark was written (a delete and a new stream made here, its
    ``witness_interval`` not passed), the read path not."""
    if not _ANY or not _LOST.get(witness):
        return marks
    return [lost_mark(witness, str(m["agent_id"])) or m for m in marks]


async def rechecked(
    witness: HighWater,
    store: StateStore,
    mark: dict[str, Any],
    now: dict[str, Any],
    exact: bool = False,
) -> RollbackDetected | None:
    """A suspect ``mark`` checked again (``verify``, the opening check) against the
    file's mark ``now`` of its agent, read afresh: ``now``'s problem, or ``mark``'s when
    ``now`` holds but is of the same stream, not reset since, or of another incarnation
    begun without a record that ``mark``'s ended (:mod:`.ended`; kept then: :func:`keep`).
    Was: ``now`` holding was taken for a delete and a new stream, always."""
    problem = await witness._check_mark(store, now, exact)
    if problem is not None or now is mark:
        return problem
    same = same_stream(mark, now)
    if same or needs_proof(mark, now):  # (another incarnation, its end unproven: ended.py)
        problem = await witness._check_mark(store, mark, exact)
        if problem is not None and (same or await unexplained(witness, store, mark, now)):
            keep(witness, str(mark["agent_id"]), mark)
            return problem
    return None


async def replaced(
    witness: HighWater,
    store: StateStore,
    before: dict[str, Any],
    agents: list[str] | None = None,
) -> None:
    """After a read of the file replaced the marks ``before`` (this process's copy of
    it): each mark (of ``agents`` when given) replaced by a newer one of the same
    stream, not reset since, that no longer holds is kept as lost (``verify`` reads
    the file first: it found nothing)."""
    wanted = before if agents is None else {a: before[a] for a in agents if a in before}
    for agent_id, mark in wanted.items():
        now = witness._known.get(agent_id)
        if now is None or int(mark["seq"]) < 1 or float(now["t"]) <= float(mark["t"]):
            continue
        if now.get("digest") == mark.get("digest"):
            continue
        same = same_stream(mark, now)
        if not same and not needs_proof(mark, now):
            continue
        if await witness._check_mark(store, mark, True) is None:
            continue
        if same or await unexplained(witness, store, mark, now):  # (ended.py)
            keep(witness, agent_id, mark)
