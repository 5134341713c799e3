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
stored after it is made on it: a tail names a base below itself) is removed, in a
second write after the new row is stored, when a load of any seq between it and the
head still replays no more than the policy's bound without it, in events and in bytes
(the snapshot before it, or the start of a whole stream, is near enough), and it is not
the stream's base (the engine refuses that in the removal's own step: another process
may have compacted the stream to it meanwhile; then both rows stay). So settling every turn of
a chat keeps one whole state per ~``snapshot_every`` events, not one per turn. A crash
between the two writes leaves both rows (bytes, nothing wrong); a crash before the
first leaves today's chain.

An engine with ``Backend.replaces_snapshots`` (SQLite) stores the row and removes the
one it replaces in one commit (``Backend.replace_snapshot``), checked at the head's
identity in that commit: a settle is then one commit, and a stream moved since the last
look gets nothing. The removal is decided before it, by the same rule. PostgreSQL, Redis
(not a cluster) and memory store the row alone checked the same way (an
``append_together`` change at the head's seq and its event's checksum:
:func:`settles_checked`), the removal in a second commit checked at the head too. Was:
``save_snapshot`` there, which takes no head — another process deleting the agent and
making it again past that seq between the last look and the write got the old stream's
state over its own row (an upsert): its compacted base replaced, its history unloadable
(tests/store/test_settle_remade_race.py). S3, tiered and a Redis Cluster still store it
so (:func:`_same_stream` names that window).

Settled only where it is one whole row and its removal is a plain engine op: a store
with ``full_snapshot_every=1`` on an engine with ``PRUNE``, not governed (a governed
store's snapshots and removals carry audit entries of their own: there ``settle``
stores nothing and says so with None).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ..backends.base import Backend, Capability
from ..errors import (
    AgentNotFound,
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
    IntegrityError,
)
from ..records import RawSnapshot, StreamChange
from .body import SNAPSHOT_TYPE, snapshot_body
from .compaction import marked
from .conditional import prune_at
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
        together = backend.replaces_snapshots
        checked = settles_checked(backend)
        checksum = record.checksum
        if checked and checksum is None:
            # (a record folded from a snapshot at the head: its event's checksum read
            # here, before the look below — a commit checked at the seq alone would
            # store this stream's state in one made again up to it meanwhile)
            checksum = await _checksum_at(writes, agent_id, head)
            if checksum is None:
                return None
        if not await _same_stream(writes, record):
            return None  # (written, or deleted and made again, by another process)
        drop = None
        if together and below is not None and await _replaceable(writes, agent_id, below.seq, head):
            drop = below.seq
        try:
            await policy.prepare(record)
            policy.next_tail = False  # (whole: full_every is 1, no tail)
            raw, marks = policy.encode(record)
            if checked:  # at the head's identity, in the commit
                try:
                    if together:  # the row and the removal in one commit
                        await backend.replace_snapshot(agent_id, raw, drop, head, checksum)
                    else:  # the row alone (its removal: the second commit below)
                        await backend.append_together((), [_at_head(agent_id, raw, checksum)])
                except ConflictError:
                    reads.cache.discard(agent_id)
                    return None  # (moved since the last look: nothing written)
            else:
                await backend.save_snapshot(agent_id, raw)
        except BaseException:
            reads.cache.discard(agent_id)
            raise
        mark_snapshot(record, marks)
        writes.snapshots_written += 1
        if (
            not checked
            and record.link is not None
            and (await backend.stream_bases([agent_id]))[0] == head
        ):
            # compacted to this very seq by another process since the last look: the row
            # just stored replaced the compaction's base, the one row carrying its mark
            # (without it a load below the base is "history deleted", not compacted).
            # Not after a checked row: stored while the head was this seq, it replaced no
            # compaction's base (a base is below the head it is made at); a base at this
            # seq now is one made since — a stream deleted and made again and compacted
            # to it, whose only state there this unchecked write would replace
            await backend.save_snapshot(agent_id, _compaction_base(writes, record, record.link))
            return head
        if (
            not together
            and below is not None
            and await _replaceable(writes, agent_id, below.seq, head)
            and await _same_stream(writes, record)
        ):
            # at the head read: a remake since the last look removes nothing (both rows
            # kept: bytes, nothing wrong), nor does an engine whose prune takes no head
            try:
                with contextlib.suppress(ConflictError, CapabilityUnsupported):
                    await prune_at(backend, agent_id, 0, (below.seq,), head, record.checksum)
            except ConfigurationError:
                # compacted to that row since the last look (another process's
                # retention): the stream's base now, which the engine refuses to drop in
                # the prune's own commit — both rows kept
                if (await backend.stream_bases([agent_id]))[0] != below.seq:
                    raise
        return head


def settles_checked(backend: Backend) -> bool:
    """``backend`` commits a settle's row only while the head is the one settled (its
    seq and its event's stored checksum): in one commit with the removal
    (``replace_snapshot``: SQLite), or alone (``append_together`` of a
    :func:`_at_head` change: PostgreSQL, Redis but a cluster, memory). Elsewhere (S3,
    tiered, a Redis Cluster) ``save_snapshot`` takes no head: module doc."""
    return backend.replaces_snapshots or (
        backend.appends_together
        and backend.changes_alone_together
        and backend.prunes_together_at_head
    )


def _at_head(agent_id: str, raw: RawSnapshot, checksum: bytes | None) -> StreamChange:
    """``raw`` (the head's row) stored only while the head is still its seq and its
    event's stored checksum ``checksum``: a prune of nothing, at that identity."""
    return StreamChange(
        agent_id, snapshot=raw, prune_to=0, prune_head=raw.seq, prune_checksum=checksum
    )


def _compaction_base(writes: WritePipeline, record: AgentRecord, link: bytes) -> RawSnapshot:
    """``record`` (the head) as a compaction stores its base: whole, marked
    (:func:`~.compaction.marked`), sealed on the head's ``link``."""
    codec = writes.codec
    plaintext = codec.serialize(marked(snapshot_body(record, None)), "state")
    sealed = codec.seal(
        record.agent_id, record.seq, SNAPSHOT_TYPE, record.updated_at, plaintext, link
    )
    return RawSnapshot(record.seq, record.updated_at, sealed.payload, sealed.checksum)


async def _same_stream(writes: WritePipeline, record: AgentRecord) -> bool:
    """The stored head is still ``record``'s: the same seq, its tag over ``record``'s link.
    Read again just before each write: another process (whose saves this store's lock
    does not hold back) may have written the agent since, or deleted it and made it
    again — then the row at ``record.seq`` would be the old stream's state put in the
    new one (over the new one's own row there), and the prune by seq would remove the
    new one's snapshot (its compacted base: its history gone). The prune is checked at
    the head again in its own commit (:func:`~.conditional.prune_at`); on an engine that
    checks the row (:func:`settles_checked`) the row too: a stream written or remade
    since is left alone. Elsewhere (S3, tiered, a Redis Cluster) a change between this read and
    ``save_snapshot`` is not seen (it takes no head to check; a stream without head tags
    is not told apart either). Appends and a compaction past ``record.seq`` there leave
    the row below the stream's base: a load below the base raises HistoryCompacted as
    for any such seq (:meth:`~.reads.ReadPath.catch_up`), and a later compaction drops
    the row with the snapshots below its new base. A compaction to ``record.seq`` itself
    there has its base row replaced by this one: :func:`settle` finds the base at its
    seq after the write and stores the row marked again — or, the write landing between
    the compaction's base and its prune (the base not moved yet at that look), the
    compaction stores its base again after the prune
    (:func:`~statekeeper.governance.retention_idle.prune_planned`). A process killed in
    between leaves it unmarked: loads below the base raise IntegrityError naming
    ``statekeeper retention adopt-compactions``, which marks it (checked by hand: a
    settle killed there on SQLite, ``adopt-compactions --keyless`` adopted it, loads
    below raised HistoryCompacted again, verify ok)."""
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
