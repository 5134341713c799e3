"""A TTL purge confirmed by the agent's authenticated last write.

Retention finds idle agents by the listing's last-write time (``updated_at`` of the
head row: SQLite's and PostgreSQL's ``sk_agents``, Redis' ``u`` field, S3's commit
metadata), which nothing authenticates. Edited back in time, it made a run delete a
live agent under a legitimate "not written for 30d" — recorded as such in the audit log
and the witness, so nothing could tell afterwards. Before a purge deletes anything,
:func:`check_idle` reads the record at the head (its event, or the base snapshot of a
stream compacted down to it), verifies it, and holds its own timestamp — bound to the
record as associated data, or hashed into its chain link — to the same rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._durations import duration_text
from ..errors import AgentForgotten, IntegrityError
from .retention_ahead import idle
from .retention_policy import Rule

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["check_idle"]


async def check_idle(
    store: StateStore, rule: Rule, agent_id: str, head: int, listed: float, now: float
) -> None:
    """Raise :class:`IntegrityError` (nothing deleted) unless the record at ``head``
    was written long enough ago for ``rule``'s TTL too (``listed``: the listing's
    last-write time, which found the agent idle). A crypto-shredded agent, whose records
    cannot be opened by design, is not checked."""
    backend, reads = store.backend, store._reads
    try:
        events = await backend.read(agent_id, head - 1, head, limit=1)
        if events and events[0].seq == head:
            reads.open_event(agent_id, events[0])
            written = events[0].timestamp
        else:  # a stream compacted down to its head: its base snapshot
            snap = await backend.latest_snapshot(agent_id, head)
            if snap is None or snap.seq != head:
                raise IntegrityError(agent_id, head, "no record at the head to date its last write")
            reads.open_snapshot(agent_id, snap)
            written = snap.timestamp
    except AgentForgotten:
        return
    if not idle(rule, written, now):
        assert rule.ttl is not None
        raise IntegrityError(
            agent_id,
            head,
            f"listed as last written at {listed:.3f}, but its record at seq {head} was"
            f" written at {written:.3f}, within the TTL ({duration_text(rule.ttl)}): the"
            " head row's last-write time was altered; not purged",
        )
