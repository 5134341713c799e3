"""The store's record of a delete, for the witness: a feed tombstone of the agent
stamped at or after a time (:mod:`statekeeper.security.ended`).

Every delete, retention purge and ``forget`` purge appends a tombstone of the agent
to its tombstone stream (:mod:`.feed_deletes`), and so does a restore or import of an
agent the store lacked; a stream lost by the server (a lossy failover) leaves none.
Read only when a witness mark does not hold and the file's newer mark is of another
incarnation without a deletion of its own (a rare path): the stream from its head back
to the first tombstone stamped :data:`DISORDER` before the time (each stamped by its
deleting process's clock: not in the stream's order), a page at a time, each record
opened only when stamped at or after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AgentLost, StatekeeperError
from .feed_deletes import has_feed, stream_of

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["deleted_since"]

#: tombstones read per call, going back from the stream's head
_PAGE = 256
#: seconds a tombstone may be stamped before one appended ahead of it in its stream:
#: each is stamped by its deleting process's clock, so the stream's order is not its
#: stamps' (was: the read back stopped at the first stamped before ``since``, and a
#: tombstone of another agent by a process whose clock is behind hid the agent's)
DISORDER = 600.0


async def deleted_since(store: StateStore, agent_id: str, since: float) -> bool:
    """True when the store holds a tombstone of ``agent_id`` (its stored id) stamped at
    or after ``since`` (seconds since the epoch). False on an engine without a feed
    (it keeps no tombstones)."""
    backend = store.backend
    if not has_feed(backend):
        return False
    stream = stream_of(backend, agent_id)
    try:
        top = await backend.head(stream)
    except AgentLost:
        return False
    while top > 0:
        low = max(0, top - _PAGE)
        raws = await backend.read(stream, low, top)
        for raw in reversed(raws):
            if raw.timestamp < since - DISORDER:
                return False  # (older: appended before the incarnation began)
            if raw.timestamp < since:
                continue
            try:
                body, _ = store._open_event(stream, raw)
            except StatekeeperError:  # (a damaged tombstone: verify reports it)
                continue
            if body.get("agent_id") == agent_id:
                return True
        top = low
    return False
