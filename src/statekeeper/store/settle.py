"""Settling an agent: its head stored as one whole snapshot, off the save's path.

A cold load of the latest state reads the latest snapshot and the events after it. At
a whole snapshot that is one row; past it, the chain of a whole snapshot, tails and
events (:mod:`.tails`), which costs a load more per record than per byte
(docs/benchmarks.md, "cold7": a head stored whole loads at 0.95-1.03x of LangGraph's
``get_tuple``, the chain at 1.2-1.7x). Writing the whole head with every save would
cost each save the whole state (ibid.); *settling* writes it once the agent has gone
quiet instead — when the caller says so (:meth:`StateStore.settle`), never on a save.

The row is an ordinary whole snapshot at the head (sealed and chained like one:
verified on every load, a damaged one passed over for the chain before it, as any
snapshot), and becomes the base of the agent's next snapshots as an explicit
:meth:`StateStore.snapshot` does. What it adds: it *replaces* the snapshot before it
when that one is no longer needed — the latest snapshot below the head (nothing
stored after it is made on it: a tail names a base below itself) is removed, in the
same commit as the new row, when a load of any seq between it and the head still
replays no more than the policy's bound without it, in events and in bytes (the
snapshot before it, or the start of a whole stream, is near enough), and it is not the
stream's base (the engine keeps it in the commit's own step: another process may have
compacted the stream to it meanwhile; then both rows stay). So settling every turn of
a chat keeps one whole state per ~``snapshot_every`` events, not one per turn. A crash
before the commit leaves today's chain.

The commit is made only at the head's identity: while the head is the seq read and its
event the one read (seq and stored checksum, compared in the commit), so a stream
another process wrote, or deleted and made again, since the last look gets nothing
(None). :func:`~statekeeper.backends.settle_row.store_at_head` makes it:
``Backend.replace_snapshot`` where the engine overrides it (SQLite; Redis, a cluster
too — one script on one agent's keys, which share a hash slot; a tiered store, through
its durable tier's commit, the hot copy following), else one ``append_together`` of a
change checked at the head (PostgreSQL, memory). Was: PostgreSQL, Redis and memory
stored the row checked and removed the old one in a second commit (checked at the
head's seq alone when the record was folded from a snapshot at the head: its
checksum None); S3, tiered and a Redis Cluster stored the row with ``save_snapshot``,
which takes no head — another process deleting the agent and making it again past
that seq between the last look and the write got the old stream's state over its own
row (an upsert): its compacted base replaced, its history unloadable
(tests/store/test_settle_remade_race.py). An engine that can do neither (S3: no
conditional write spans the head's object and the snapshot's, so the check and the
write cannot be one step) is refused an explicit settle with
:class:`~statekeeper.errors.CapabilityUnsupported`, nothing written; an idle settle
(``settle_after``) is skipped there, and switched off at the first, as a governed
store's (was: queued by every save, then skipped).

Settled only where it is one whole row and its removal is a plain engine op: a store
with ``full_snapshot_every=1`` on an engine with ``PRUNE``, not governed (a governed
store's snapshots and removals carry audit entries of their own: there ``settle``
stores nothing and says so with None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backends.base import Backend, Capability
from ..backends.settle_row import settles_at_head, store_at_head
from ..errors import (
    AgentNotFound,
    CapabilityUnsupported,
    ConflictError,
    IntegrityError,
)
from .snapshots import mark_snapshot

if TYPE_CHECKING:
    from .state import AgentRecord
    from .writes import WritePipeline

__all__ = ["settle", "settles", "settles_checked"]


def settles(writes: WritePipeline) -> bool:
    """``writes``' store can settle an agent (see the module's last paragraph)."""
    return (
        writes.snapshots.full_every == 1
        and writes.snapshot_saver is None
        and writes.backend.supports(Capability.PRUNE)
    )


async def settle(writes: WritePipeline, agent_id: str, *, cached_only: bool = False) -> int | None:
    """Store the head of ``agent_id`` as one whole snapshot unless one is there, and
    remove the snapshot it replaces (module doc); the seq of the row written, or None
    (nothing written: the head is a whole snapshot already, the store does not settle,
    or the stored head is no longer the one read: :func:`_same_stream`).
    :class:`~statekeeper.errors.AgentNotFound` for an unknown agent. Under the agent's
    write lock: no save of this store runs between the read and the writes (another
    process's may: the head is read again before each write)."""
    if not settles(writes):
        return None
    backend = writes.backend
    if not settles_checked(backend):
        if cached_only:
            return None  # (an idle settle: skipped, as for a store that does not settle)
        raise CapabilityUnsupported(
            backend.name,
            "settle",
            "its engine cannot store the settle's row only while the head is the one read"
            " (no commit spans the head and the snapshot: module statekeeper.store.settle);"
            " nothing was written",
        )
    policy = writes.snapshots
    reads = writes.reads
    async with writes.lock(agent_id):
        if cached_only:
            # (an idle settle: the cached head this store wrote, never read again — a
            # read would replace the cache with another process's stream, and a write
            # planned on the old one, its compare-and-set on the cached tag, would then
            # land on the new one; _same_stream below skips a head moved since)
            record = reads.trusted(agent_id)
            if record is None:
                return None
        else:
            record = await reads.current(agent_id)
        if record is None:
            raise AgentNotFound(agent_id)
        head = record.seq
        if head == 0:
            return None
        below = await backend.latest_snapshot(agent_id, head)
        if below is not None and below.seq == head and record.full_seq == head:
            return None  # (the head is a whole snapshot already)
        if below is not None and below.seq == head:
            below = await backend.latest_snapshot(agent_id, head - 1)
        checksum = record.checksum
        if checksum is None:
            # (a record folded from a snapshot at the head: its event's checksum read
            # here, before the look below — a commit checked at the seq alone would
            # store this stream's state in one made again up to it meanwhile)
            checksum = await _checksum_at(writes, agent_id, head)
            if checksum is None:
                return None
        if not await _same_stream(writes, record):
            return None  # (written, or deleted and made again, by another process)
        drop = None
        if below is not None and await _replaceable(writes, agent_id, below.seq, head):
            drop = below.seq
        try:
            await policy.prepare(record)
            policy.next_tail = False  # (whole: full_every is 1, no tail)
            raw, marks = policy.encode(record)
            try:  # at the head's identity, the removal in the same commit
                await store_at_head(backend, agent_id, raw, drop, head, checksum)
            except ConflictError:
                reads.cache.discard(agent_id)
                return None  # (moved since the last look: nothing written)
        except BaseException:
            reads.cache.discard(agent_id)
            raise
        mark_snapshot(record, marks)
        writes.snapshots_written += 1
        return head


def settles_checked(backend: Backend) -> bool:
    """``backend`` commits a settle's row only while the head is the one settled (its
    seq and its event's stored checksum), with the removal in the same commit
    (:func:`~statekeeper.backends.settle_row.store_at_head`)."""
    return settles_at_head(backend)


async def _same_stream(writes: WritePipeline, record: AgentRecord) -> bool:
    """The stored head is still ``record``'s: the same seq, its tag over ``record``'s link.
    Read again just before the write: another process (whose saves this store's lock
    does not hold back) may have written the agent since, or deleted it and made it
    again — then the row at ``record.seq`` would be the old stream's state put in the
    new one (over the new one's own row there), and the removal by seq would remove the
    new one's snapshot (its compacted base: its history gone). The commit checks the
    head again in its own step (:func:`settles_checked`): a change after this look is
    caught there, and nothing is written."""
    head, tag = await writes.backend.head_tag(record.agent_id)
    if head != record.seq:
        return False
    try:
        writes.codec.check_head(record.agent_id, head, record.link, tag)
    except IntegrityError:
        return False
    return True


async def _checksum_at(writes: WritePipeline, agent_id: str, seq: int) -> bytes | None:
    """The stored checksum of ``agent_id``'s event at ``seq`` (None: none stored)."""
    raw = await writes.backend.read(agent_id, seq - 1, seq)
    return raw[0].checksum if raw and raw[0].seq == seq else None


async def _replaceable(writes: WritePipeline, agent_id: str, seq: int, head: int) -> bool:
    """The snapshot at ``seq`` (the latest below ``head``, where a whole one is now
    stored) may go: a load of a seq between them replays at most the policy's event
    bound from the snapshot before it — or from the start of a stream with no base
    (a compacted stream's base is never removed), and no more bytes than its bound."""
    backend = writes.backend
    policy = writes.snapshots
    before = await backend.latest_snapshot(agent_id, seq - 1) if seq > 1 else None
    if before is not None:
        start, start_bytes = before.seq, len(before.payload)
    else:
        base = (await backend.stream_bases([agent_id]))[0]
        if base != 0:
            return False
        start, start_bytes = 0, 0
    events = head - start
    if events > policy.every:
        return False
    if not policy.by_cost and policy.max_replay_bytes is None:
        return True
    # the policy's bound in bytes too (snapshots.SnapshotPolicy.due): the replay a load
    # just below the head would do from ``start`` must not have made a snapshot due
    replay = sum(len(e.payload) for e in await backend.read(agent_id, start, head - 1))
    if policy.max_replay_bytes is not None and replay >= policy.max_replay_bytes:
        return False
    return not policy.by_cost or replay + policy.event_cost * (events - 1) < max(
        start_bytes + policy.cost_base, policy.min_cost
    )
