"""Cheap reads of an agent's head: its FSM state and stored size without folding state.

Listing many agents only to show their FSM state does not need their data documents:
:func:`read_head` decodes the newest event and, only when that event did not move the
machine, the events back to the latest snapshot (at most ``snapshot_every``), never
applying a patch or copying a document. :func:`stored_size` adds up stored record
sizes without decoding anything.

Each record read is checked as on every read (checksum, and authentication under a
key); the hash chain and the head tag are not: ``StateStore.verify`` is the full check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import IntegrityError

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["AgentHead", "StoredSize", "read_head", "read_heads", "stored_size"]

_PAGE = 1000


@dataclass(frozen=True, slots=True)
class AgentHead:
    """An agent's head: last seq, FSM state (None: never moved) and when it got there."""

    agent_id: str
    seq: int
    fsm_state: str | None
    state_entered_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class StoredSize:
    """Stored bytes of an agent: every event payload, plus its latest snapshot."""

    agent_id: str
    events: int
    event_bytes: int
    snapshot_bytes: int

    @property
    def total(self) -> int:
        return self.event_bytes + self.snapshot_bytes


async def read_head(store: StateStore, agent_id: str) -> AgentHead | None:
    """The agent's head (None when it has no stream), counting buffered writes."""
    pinned = store._reads.pinned.get(agent_id)
    if pinned is not None:
        return AgentHead(
            agent_id, pinned.seq, pinned.fsm_state, pinned.fsm_entered_at, pinned.updated_at
        )
    backend = store.backend
    head = await backend.head(agent_id)
    if head == 0:
        return None
    last = await backend.read(agent_id, head - 1, head)
    if not last or last[-1].seq != head:
        raise IntegrityError(agent_id, head, "the event at the head is missing")
    updated = last[-1].timestamp
    body = store._reads.decode_event(agent_id, last[-1])
    if body.get("fsm") is not None:
        return AgentHead(agent_id, head, body["fsm"], updated, updated)
    # the newest event did not move the machine: the last one that did, back to the
    # latest snapshot (which records the state and when it was entered)
    snap = await backend.latest_snapshot(agent_id, head)
    cursor = snap.seq if snap is not None else 0
    found: tuple[str, float] | None = None
    while cursor < head - 1:
        page = await backend.read(agent_id, cursor, head - 1, limit=_PAGE)
        if not page:
            break
        for raw in page:
            fsm = store._reads.decode_event(agent_id, raw).get("fsm")
            if fsm is not None:
                found = (fsm, raw.timestamp)
        cursor = page[-1].seq
    if found is None and snap is not None:
        snap_body, _ = store._reads.open_snapshot(agent_id, snap)
        if snap_body.get("fsm") is not None:
            found = (snap_body["fsm"], snap_body.get("entered", snap.timestamp))
    if found is None:
        return AgentHead(agent_id, head, None, 0.0, updated)
    return AgentHead(agent_id, head, found[0], found[1], updated)


async def stored_size(store: StateStore, agent_id: str) -> StoredSize:
    """Stored bytes of the agent's records (read raw: nothing is decoded)."""
    await store.flush()
    backend = store.backend
    cursor = events = total = 0
    while True:
        page = await backend.read(agent_id, cursor, None, limit=_PAGE)
        for raw in page:
            events += 1
            total += len(raw.payload)
        if len(page) < _PAGE:
            break
        cursor = page[-1].seq
    snap = await backend.latest_snapshot(agent_id)
    return StoredSize(agent_id, events, total, len(snap.payload) if snap is not None else 0)


async def read_heads(store: StateStore, agent_ids: Sequence[str]) -> list[AgentHead | None]:
    """:func:`read_head` of many agents at once: the events at their heads in one
    backend read (:meth:`~statekeeper.backends.base.Backend.read_heads`); only an agent
    whose newest event did not move its machine (or that has buffered writes) is read
    on its own."""
    await store.flush()
    raws = await store.backend.read_heads(list(agent_ids))
    out: list[AgentHead | None] = []
    for agent_id, raw in zip(agent_ids, raws, strict=True):
        if raw is None:
            out.append(None)
            continue
        fsm = store._decode_event(agent_id, raw).get("fsm")
        if fsm is not None:
            out.append(AgentHead(agent_id, raw.seq, fsm, raw.timestamp, raw.timestamp))
        else:
            out.append(await read_head(store, agent_id))
    return out
