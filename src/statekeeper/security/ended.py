"""Proof that a marked incarnation was ended on purpose, not lost.

A process holding a mark of agent ``a`` at seq 3 (incarnation ``I``: the mark's
``"c"``, :mod:`.incarnation`) whose stream a lossy failover lost *wholly* (no delete:
nothing of it left in storage), while another process sharing the witness file, whose
copy of the file never held that mark, began ``a`` again (incarnation ``J``): the
newer mark of ``J`` replaced the mark of ``I`` in the file, newest wins, and the holder
took it for a delete and a new stream — it served ``J``, no error
(tests/store/test_witness_lost_rewritten.py).

A delete is a deliberate act, and leaves durable records; a loss leaves none. So a
holder of a mark of ``I`` that no longer holds, finding the file's newer mark of
another incarnation ``J`` (which holds), now requires one of them, made after its
incarnation began (``"c"``; not after the mark: the two are stamped by two processes'
clocks, and in real time ``I`` was there at the mark, so a deletion made between its
begin and the mark ended no other incarnation):

- the file's: the deletion it held of the agent before ``J``'s first mark replaced it
  (a delete, a retention purge or a ``forget`` purge through a store with this witness
  marks its deletion in the file before the rows go; a schema rewrite or ``rekey``
  likewise), kept with ``J``'s marks as ``"d"`` (:func:`.incarnation.reset_kept`);
- the store's: a feed tombstone of the agent (every delete, purge and ``forget``
  appends one, in the delete's commit where the engine commits several streams
  together; a restore or import of agents the store lacked appends one of each
  first), stamped at or after that begin — a delete made by a process without this
  witness (the CLI on PostgreSQL or Redis: ``witness=PATH`` is the application's).

Neither found: :class:`~statekeeper.errors.RollbackDetected` naming the agent and the
marked seq, on every read of the agent (the mark kept as lost: :mod:`.lost`), and from
``verify``. The store's proof is read only then (a mark that does not hold, of another
incarnation, without the file's): the tombstone stream from its head back to the mark's
time, so no read is added to any write, delete or load that finds its mark. Limits: a
mark of an incarnation begun by an older version carries no ``"d"``: only the store's
tombstone proves its delete then; an engine without a change feed (S3, tiered with a
cold tier, Redis Cluster with ``feed=False``, PostgreSQL whose row-level security
predates the namespaces' tombstone streams) keeps no tombstones: a delete there proves
itself only through the file. Tombstones are never pruned by statekeeper (no retention
applies to the tombstone streams), so the guarantee holds for marks of any age; see
docs/security.md.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .incarnation import needs_proof

if TYPE_CHECKING:
    from ..store.store import StateStore
    from .highwater import HighWater

__all__ = ["Proof", "provide", "unexplained"]

#: whether a store keeps a record of a delete of an agent made at or after a time
#: (seconds since the epoch): the store's own (its feed tombstones), given by the store
Proof = Callable[["StateStore", str, float], Awaitable[bool]]

_PROOFS: weakref.WeakKeyDictionary[HighWater, Proof] = weakref.WeakKeyDictionary()


def provide(witness: HighWater, proof: Proof) -> None:
    """Where ``witness`` looks for the store's record of a delete."""
    _PROOFS[witness] = proof


async def unexplained(
    witness: HighWater, store: StateStore, mark: dict[str, Any], now: dict[str, Any]
) -> bool:
    """True when ``now`` (the file's newer mark of ``mark``'s agent, found to hold)
    does not explain ``mark`` not holding: of another incarnation, and neither the file
    nor the store records that ``mark``'s incarnation was ended since it was made (see
    module). Call it only for a ``mark`` that does not hold."""
    if not needs_proof(mark, now):
        return False
    proof = _PROOFS.get(witness)
    if proof is None:  # (a witness no store opened: no store's record to look in)
        return True
    # (since the incarnation began, not since the mark: two processes' clocks, and in
    # real time no delete between the two could end another incarnation: needs_proof)
    since = min(float(mark["c"]), float(mark["t"]))  # (or the mark's: needs_proof)
    return not await proof(store, str(mark["agent_id"]), since)
