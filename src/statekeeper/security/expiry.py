"""A witness mark of an agent the store's TTL expired (Redis ``ttl=``) is no rollback.

A store that expires its agents (:attr:`Backend.expires_agents`) deletes them by
itself, without a mark in the witness file (no process deleted them): an agent that
expired "is gone as the TTL says, never reported lost" (docs/backends.md), but the
witness (:mod:`.highwater`) held its mark, and raised ``RollbackDetected`` at every
opening of the store and every read of the agent; and an agent saved again after it
expired — a new stream, shorter than the mark, or as long with other records — in
another process, whose mark of it was not yet written (``witness_interval``), was a
rollback too for every process reading the file meanwhile.

On such a store, a mark whose agent is gone is taken as expired, and one whose
agent's stream starts (seq 1) after the mark was made as a stream made again after
it expired: neither is a rollback. A stream that starts before the mark (the same
stream, gone back in time) still is, and so is one whose first record is the marked
stream's own (the mark's ``c``, :mod:`.incarnation`), whatever its time. The cost: on
a store that expires its agents, an agent wholly lost (a server restarted from an
older copy that lacked it) reads as expired, as it does to a process without a
witness. The comparison takes the
writers' clocks (record timestamps: :attr:`StateStore.clock`) to agree with this one's
(the mark's time): a first record stamped later than now (a writer's clock ahead, or a
``clock=`` of its own) proves nothing, and the stream is checked as a rollback. A
writer's clock ahead by less than the time since was not told apart (the stream gone
back served, no error): the mark's incarnation tells it now. A mark without one (a
file written before, a process of an older version, a schema rewrite's mark) is still
checked by the times only.

On a store without a TTL, an agent given one of its own (Redis ``set_ttl``, as typed
states with an expiry are) and gone is taken as expired when its backend says so
(``expired_own_ttl``: the mark ``set_ttl`` leaves in the agent index, which an append
making it again takes off), and noted deleted in the witness file; one lost (no such
mark) is still a rollback.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..errors import StatekeeperError

if TYPE_CHECKING:
    from ..store.store import StateStore
    from .highwater import HighWater

__all__ = ["expired_since"]


async def expired_since(
    store: StateStore,
    agent_id: str,
    marked_at: float,
    head: int,
    witness: HighWater | None = None,
    created: float | None = None,
) -> bool:
    """True when ``agent_id``'s mark, made at ``marked_at`` (seconds since the epoch),
    no longer holding (``head``: the stream's head now) is explained by the store's
    TTL: the agent expired (gone), or expired and was made again after the mark. An
    agent gone by a TTL of its own is noted deleted in ``witness`` (the index mark that
    tells it goes when a listing takes the agent off the index). ``created``: the time
    of the marked stream's first record (the mark's ``c``), None when not known."""
    backend = store.backend
    if not backend.expires_agents:
        # (a store without a TTL: an agent given its own, set_ttl, gone, expired)
        own = getattr(backend, "expired_own_ttl", None)
        if head != 0 or own is None:
            return False
        try:
            expired = bool(await own(agent_id))
        except StatekeeperError:
            return False
        if expired and witness is not None:
            witness.deleted(agent_id)
        return expired
    if head == 0:
        return True
    try:
        first = await backend.read(agent_id, 0, 1)
    except StatekeeperError:
        return False
    if not first or first[0].seq != 1:
        return False
    if created is not None and first[0].timestamp == created:
        return False  # the marked stream's first record: the same stream, gone back
    # (stamped after now: the writer's clock is not this one's, its time proves nothing)
    return marked_at < first[0].timestamp <= time.time()
