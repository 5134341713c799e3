"""Which snapshots a retention run keeps and drops (:mod:`statekeeper.governance.retention`):
the stored snapshots' seqs, the full snapshot each delta is stored against, the chains
of tail snapshots; and where a durable step's record stops a compaction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import StatekeeperError
from ..records import EventType

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["delta_bases", "first_step", "snapshot_seqs", "tail_chains"]


async def snapshot_seqs(store: StateStore, agent_id: str) -> list[int]:
    seqs: list[int] = []
    below: int | None = None
    while True:
        raw = await store.backend.latest_snapshot(agent_id, below)
        if raw is None:
            return sorted(seqs)
        seqs.append(raw.seq)
        if raw.seq <= 1:
            return sorted(seqs)
        below = raw.seq - 1


async def delta_bases(store: StateStore, agent_id: str, keep: set[int]) -> dict[int, int]:
    """The full snapshot each delta snapshot of ``keep`` is stored against
    (``{delta seq: base seq}``), read from the snapshots themselves: whatever
    ``full_snapshot_every`` the store is opened with now, its stored deltas may have been
    written under another (``statekeeper retention apply`` opens it with the default)."""
    bases: dict[int, int] = {}
    for seq in keep:
        raw = await store.backend.latest_snapshot(agent_id, seq)
        if raw is None or raw.seq != seq:
            continue
        body, _ = store._reads.open_snapshot(agent_id, raw)
        if isinstance(body.get("base"), int):
            bases[seq] = body["base"]
    return bases


async def tail_chains(
    store: StateStore, agent_id: str, snaps: list[int], target: int, drop: set[int]
) -> set[int]:
    """``drop`` with the tail snapshots (store/tails.py: each a delta on the snapshot
    before it) kept consistent: a tail whose chain goes below ``target`` (removed with
    the history) is dropped too, and the chain of every tail kept is kept."""
    bases: dict[int, int | None] = {}
    for seq in snaps:
        if seq <= target:
            continue
        raw = await store.backend.latest_snapshot(agent_id, seq)
        if raw is None or raw.seq != seq:
            continue
        try:
            body, _ = store._reads.open_snapshot(agent_id, raw)
        except StatekeeperError:  # (damaged: loads pass over it; not ours to judge)
            bases[seq] = None
            continue
        base = body.get("base")
        bases[seq] = base if type(base) is int else None
    out = set(drop)
    for seq, base in bases.items():
        while base is not None and base in bases:  # down to its whole snapshot
            base = bases[base]
            if base is None:
                break
        if bases[seq] is not None and base is not None:
            out.add(seq)  # (its chain reaches below the target, or a missing base)
    for seq in bases:
        if seq not in out:
            base = bases[seq]
            while base is not None:
                out.discard(base)
                base = bases.get(base)
    return out


_STEP = EventType.STEP
_SCAN = 1000  # events read at a time looking for a step record


async def first_step(store: StateStore, agent_id: str, base: int, target: int) -> int | None:
    """The seq of the first durable-step record (:mod:`statekeeper.concurrency.steps`)
    in ``base < seq <= target``, or None. A compaction stops before it: a step's
    record (its event and idempotency key) is how a rerun finds the step done, so
    removing it would run a recorded step again."""
    after = base
    while after < target:
        rows = await store.backend.read(agent_id, after, target, limit=_SCAN)
        for row in rows:
            if row.type == _STEP:
                return row.seq
        if len(rows) < _SCAN:
            return None
        after = rows[-1].seq
    return None
