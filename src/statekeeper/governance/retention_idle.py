"""A TTL purge confirmed by the agent's authenticated last write.

Retention finds idle agents by the listing's last-write time (``updated_at`` of the
head row: SQLite's and PostgreSQL's ``sk_agents``, Redis' ``u`` field, S3's commit
metadata), which nothing authenticates. Edited back in time, it made a run delete a
live agent under a legitimate "not written for 30d" — recorded as such in the audit log
and the witness, so nothing could tell afterwards. Before a purge deletes anything,
:func:`check_idle` reads the record at the head (its event, or the base snapshot of a
stream compacted down to it), verifies it, and holds its own timestamp — bound to the
record as associated data, or hashed into its chain link — to the same rule.

A listed time in the future (an edit, or a writer whose clock ran ahead) kept an agent
out of every TTL purge, silently, for as long as the date stayed ahead. Now
:func:`dated` does not trust a listed time ahead of the run's clock (by more than
:data:`AHEAD`): the authenticated record at the head dates the last write; when that
record is dated ahead too, its age cannot be told, and the purge fails naming it (a
problem in the report, every run, until the agent is written from a right clock or
deleted) rather than passing over it. ``verify`` names such a record too.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .._durations import duration_text
from ..errors import (
    AgentForgotten,
    AgentNotFound,
    ConflictError,
    IntegrityError,
    SerializationError,
    StatekeeperError,
)
from ..records import RawEvent, RawSnapshot, StreamChange
from ..store.compaction import COMPACTED
from ..store.conditional import prune_at
from ..store.verification import AHEAD
from .retention_ahead import idle
from .retention_policy import Rule

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..store import StateStore
    from .hooks import ChangeSink, GovernanceEvent

__all__ = [
    "AHEAD",
    "ahead_or_idle",
    "check_idle",
    "check_unchanged",
    "dated",
    "head_seen",
    "prune_planned",
    "together_planned",
]


def ahead_or_idle(rule: Rule, listed: float, now: float) -> bool:
    """Whether ``rule``'s TTL may purge an agent listed as last written at ``listed``:
    idle, or dated ahead (:func:`dated` tells)."""
    return rule.ttl is not None and (idle(rule, listed, now) or listed > now + AHEAD)


async def dated(
    store: StateStore, rule: Rule, agent_id: str, head: int, listed: float, now: float
) -> float:
    """The last-write time ``rule``'s TTL holds the agent to: ``listed``, unless it is
    ahead of ``now``; then the authenticated time of the record at ``head``, and
    :class:`IntegrityError` (nothing deleted) when that one is ahead too."""
    if rule.ttl is None or listed <= now + AHEAD:
        return listed
    written = await _written(store, agent_id, head)
    if written is None:  # a crypto-shredded agent: as listed
        return listed
    if written > now + AHEAD:
        raise IntegrityError(
            agent_id,
            head,
            f"its last write (seq {head}) is dated {written:.3f},"
            f" {duration_text(written - now)} ahead of this clock (a writer's clock"
            " ahead, or an edit): its age cannot be told, so the TTL cannot apply; not"
            " purged (write it again from a right clock, or delete it)",
        )
    return written


async def _head_record(store: StateStore, agent_id: str, head: int) -> RawEvent | RawSnapshot:
    """The record at ``head`` as stored (not opened): its event, or the base snapshot of
    a stream compacted down to it."""
    backend = store.backend
    events = await backend.read(agent_id, head - 1, head, limit=1)
    if events and events[0].seq == head:
        return events[0]
    snap = await backend.latest_snapshot(agent_id, head)
    if snap is None or snap.seq != head:
        # another process deleted it (or wrote it again, to another head) since it
        # was listed: not a damaged stream
        current = await backend.head(agent_id)
        if current == 0:
            raise AgentNotFound(agent_id)
        if current != head:
            raise ConflictError(agent_id, head, current)
        raise IntegrityError(agent_id, head, "no record at the head to date its last write")
    return snap


def _opened_time(store: StateStore, agent_id: str, record: RawEvent | RawSnapshot) -> float | None:
    """The verified time of ``record`` (None: crypto-shredded, its records do not open)."""
    try:
        if isinstance(record, RawEvent):
            store._reads.open_event(agent_id, record)
        else:
            store._reads.open_snapshot(agent_id, record)
    except AgentForgotten:
        return None
    return record.timestamp


async def _written(store: StateStore, agent_id: str, head: int) -> float | None:
    """The verified time of the record at ``head`` (None: crypto-shredded)."""
    return _opened_time(store, agent_id, await _head_record(store, agent_id, head))


#: which record stood at an agent's head when :func:`check_idle` verified it: its time
#: and checksum, and the checksum a delete of that stream is conditional on (the head
#: event's; None when the record is the base snapshot of a stream compacted down to it)
Seen = tuple[float, bytes, bytes | None]


def _seen(record: RawEvent | RawSnapshot) -> Seen:
    event = record.checksum if isinstance(record, RawEvent) else None
    return (record.timestamp, record.checksum, event)


async def head_seen(store: StateStore, agent_id: str, head: int) -> Seen:
    """Which record stands at ``head`` now (for :func:`check_unchanged`)."""
    return _seen(await _head_record(store, agent_id, head))


async def check_idle(
    store: StateStore, rule: Rule, agent_id: str, head: int, listed: float, now: float
) -> Seen:
    """Raise :class:`IntegrityError` (nothing deleted) unless the record at ``head``
    was written long enough ago for ``rule``'s TTL too (``listed``: the listing's
    last-write time, which found the agent idle). A crypto-shredded agent, whose records
    cannot be opened by design, is not checked. Returns which record it was (for
    :func:`check_unchanged`)."""
    record = await _head_record(store, agent_id, head)
    seen = _seen(record)
    written = _opened_time(store, agent_id, record)
    if written is None:
        return seen
    if not idle(rule, written, now):
        assert rule.ttl is not None
        raise IntegrityError(
            agent_id,
            head,
            f"listed as last written at {listed:.3f}, but its record at seq {head} was"
            f" written at {written:.3f}, within the TTL ({duration_text(rule.ttl)}): the"
            " head row's last-write time was altered; not purged",
        )
    return seen


async def check_unchanged(store: StateStore, agent_id: str, head: int, seen: Seen) -> None:
    """Just before a purge's delete: :class:`ConflictError` (reported "skipped", nothing
    deleted) when the record at ``head`` is no longer the one :func:`check_idle`
    verified — the agent deleted and written again since, up to the same head: the
    delete would take the new agent and its acknowledged writes. (The delete itself is
    conditional on that record's checksum too, in the engine's atomic step: a stream
    made again between this read and the delete is not deleted either.)"""
    record = await _head_record(store, agent_id, head)
    if _seen(record) != seen:
        raise ConflictError(agent_id, head, head)


async def prune_planned(
    store: StateStore,
    agent_id: str,
    target: int,
    drop: Sequence[int],
    head: int,
    seen: Seen,
    full: RawSnapshot | None,
    base: int,
) -> None:
    """A compaction's or thinning's change, made only on the stream it was planned on
    (its base ``base``):
    ``full`` (the new base at ``target``, folded from that stream) stored, then the
    prune conditional on ``head`` and the head record :func:`head_seen` saw, in the
    engine's atomic step (:func:`~statekeeper.store.conditional.prune_at`). A stream
    deleted and written again by another process up to the same head after
    :func:`check_unchanged` — before, the prune cut the new stream's history (its
    acknowledged events gone, ``HistoryCompacted`` on its load) — raises
    :class:`ConflictError` with nothing removed, and the snapshot stored for the other
    stream is taken back (a snapshot of another stream: its loads warned and replayed)."""
    from .retention_raced import on_grown

    async def prune(at: int, record: Seen) -> None:
        await prune_at(store.backend, agent_id, target, drop, at, record[2])

    if full is not None:
        await store.backend.save_snapshot(agent_id, full)
    try:  # (a second plan's: on the stream grown since too)
        await on_grown(store, agent_id, head, seen, prune, base)
    except ConflictError:
        if full is not None:
            await _take_back(store, agent_id, full)
        raise
    if full is not None:
        await _remark(store, agent_id, full)


async def together_planned(
    store: StateStore,
    together: ChangeSink,
    change: StreamChange,
    event: GovernanceEvent,
    head: int,
    seen: Seen,
    base: int,
) -> None:
    """:func:`prune_planned` on a governed store whose engine commits two streams at
    once: ``change`` (its snapshot, prune and dropped rows) in ONE commit with its audit
    entry ``event``, conditional on ``head`` and the head record :func:`head_seen` saw
    (``prune_head``/``prune_checksum``, the same commit)."""
    from .retention_raced import on_grown

    async def commit(at: int, record: Seen) -> None:
        planned = dataclasses.replace(change, prune_head=at, prune_checksum=record[2])
        await together.sink.record_with_change(
            planned, event.op, principal=together.principal, first_seq=event.first_seq,
            last_seq=event.last_seq, detail=event.details, outcome=event.outcome,
        )  # fmt: skip

    await on_grown(store, change.agent_id, head, seen, commit, base)


async def _remark(store: StateStore, agent_id: str, full: RawSnapshot) -> None:
    """``full`` stored again when the row at its seq, after the prune, is another
    process's unmarked one of the same state (a settle's, stored over ``full`` between
    its write and the prune: the settle's own look at the base, before the prune, saw
    none at its seq). Was: the base left unmarked, with no process killed — every load
    below it raised IntegrityError ('the stream's history was deleted')."""
    reads = store._reads
    stored = await store.backend.latest_snapshot(agent_id, full.seq)
    if stored is None or stored.seq != full.seq or stored.checksum == full.checksum:
        return
    try:
        body, opened = reads.open_snapshot(agent_id, stored)
        _, ours = reads.open_snapshot(agent_id, full)
    except (IntegrityError, SerializationError):
        return  # (verify names a damaged row; not this compaction's to judge)
    if body.get(COMPACTED) is not True and opened.prev is not None and opened.prev == ours.prev:
        await store.backend.save_snapshot(agent_id, full)


async def _take_back(store: StateStore, agent_id: str, full: RawSnapshot) -> None:
    """Remove the snapshot ``full`` stored in a stream that is not the one it was folded
    from (its checksum, sealed with the old stream's link, is only ever this one's).
    Only a snapshot — a cache of the state — can go with it: one the other stream
    stored at the same seq meanwhile, which its next save makes again. Never the other
    stream's base (compacted to that seq meanwhile: the only record of its state
    there): the engine refuses that removal in its own step (ConfigurationError,
    nothing removed) and the snapshot stays, the conflict reported as it is."""
    backend = store.backend
    try:
        stored = await backend.latest_snapshot(agent_id, full.seq)
        if stored is not None and stored.seq == full.seq and stored.checksum == full.checksum:
            await backend.prune(agent_id, 0, (full.seq,))
    except StatekeeperError:  # (the conflict is what the caller reports; a base refused)
        pass
