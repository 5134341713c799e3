"""The write pipeline's state and what it does once an append is built: the lock every
write of an agent takes, landing an append (the engine's, on the cached record, and
what its acknowledgement changes), a buffered append settled, snapshots and deletes
under that lock, and the idempotency checks of a key's earlier append.

:class:`WriteBase` declares the attributes :class:`~.writes.WritePipeline` sets (its
``__init__`` and ``decide_fast``); the parts of the pipeline are classes over it, one
per job: :class:`~.write_build.WriteBuild` (the record an append stores),
:class:`~.write_fast.WriteFast` (the direct saves and appends), and
:class:`~.writes.WritePipeline` (its options, the write and the submit).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from ..backends.base import Backend, Capability, NextRow
from ..codec import Codec
from ..errors import AgentNotFound, ConflictError
from ..records import AppendRequest, AppendResult, RawEvent, RawSnapshot
from ..security.highwater import HighWater
from . import feed_deletes, idempotency
from .durability import GroupCommitter, WriteBehind
from .idle_settle import IdleSettler
from .locks import KeyedLock
from .reads import PAGE, ReadPath
from .snapshots import SnapshotPolicy, mark_snapshot
from .state import AgentRecord

__all__ = ["WriteBase"]


class WriteBase:
    """The write pipeline's state and its steps after the build (see the module docstring)."""

    # the attributes WritePipeline sets (its __init__ and decide_fast, in writes.py)
    backend: Backend
    codec: Codec
    reads: ReadPath
    snapshots: SnapshotPolicy
    clock: Callable[[], float]
    write_retries: int
    max_event_bytes: int | None
    max_state_bytes: int | None
    witness: HighWater | None
    appends: int
    snapshots_written: int
    retries: int
    stale: dict[str, ConflictError]
    buffered_links: dict[str, dict[int, bytes]]
    _locks: KeyedLock
    snapshot_saver: Callable[[str, RawSnapshot], Awaitable[None]] | None
    eraser: Callable[[str], Awaitable[bool]] | None
    idle: IdleSettler | None
    behind_unfenced: set[str]
    group: GroupCommitter | None
    trust_cache: bool
    tags_compared: bool
    opened_new: bool
    behind: WriteBehind | None
    sealer: Callable[[str, int, str, float, bytes, bytes], tuple[bytes, bytes]] | None

    def locked(self, agent_id: str) -> bool:
        """A write of ``agent_id`` in this store holds its lock now."""
        return self._locks.locked(agent_id)

    def lock(self, agent_id: str) -> AbstractAsyncContextManager[None]:
        """The lock every write of ``agent_id`` in this store takes (``async with``)."""
        return self._locks.hold(agent_id)

    async def flush(self, *, report: bool = True) -> None:
        """Wait until every acknowledged write is durable (``report``: see
        :meth:`WriteBehind.flush`)."""
        if self.group is not None:
            await self.group.drain()
        if self.behind is not None:
            await self.behind.flush(report=report)

    async def _land(
        self, agent_id: str, request: AppendRequest, new_record: AgentRecord
    ) -> AppendResult | None:
        """Append a request :meth:`build` made on the trusted record and keep the record
        it makes (:meth:`append_made`, :meth:`append_applied`); None on a conflict."""
        result = await self._append_trusted(agent_id, request)
        if result is None:  # made again by StateStore.append on a validated read
            return None
        if result.duplicate:  # (as write() does: never trust the record alone)
            self.reads.cache.discard(agent_id)
            assert request.idempotency_key is not None
            return await self.confirm_key(agent_id, request.idempotency_key, result)
        self.appends += 1  # (a duplicate, stored before, is not an append of its own)
        if (idle := self.idle) is not None:
            idle.saved(agent_id)
        if request.snapshot is not None:
            self.snapshots_written += 1
        self.reads.cache.put(agent_id, new_record)
        if self.witness is not None and new_record.link is not None:
            self.witness.acked(agent_id, result.last_seq, new_record.link, new_record.created_at)
        return result

    def _let_go(self, agent_id: str) -> None:
        """Release the agent's lock taken by hand (``held[agent_id] = None``)."""
        held = self._locks._held
        if held[agent_id]:
            self._locks.release(agent_id)
        else:
            del held[agent_id]

    async def _append_trusted(
        self, agent_id: str, request: AppendRequest | None, row: NextRow | None = None
    ) -> AppendResult | None:
        """The append of a save built on the cached record without reading it first
        (:meth:`save_fast`, :meth:`append_made`), alone or through the group committer:
        its result, or None on a conflict (the record was stale: dropped from the cache
        and the conflict kept in :attr:`stale`, for the caller's general path to make
        it again — a retry — or raise it).
        Any other failure drops the record too and is raised.

        ``row``, instead of a request: the arguments of ``Backend.append_next`` (one
        patch event on the cached head, :meth:`save_fast`): no request object is
        made on the way to an engine that takes them as they are."""
        try:
            group = self.group
            if request is None:
                assert row is not None
                await self._append_next(row)
                result = AppendResult(agent_id, row[1], row[1])
            elif group is None:
                result = await self.backend.append(request)
            else:
                result = await group.submit(request)
        except ConflictError as exc:
            self.reads.cache.discard(agent_id)
            self.stale[agent_id] = exc
            return None
        except BaseException:
            self.reads.cache.discard(agent_id)
            raise
        return result  # (counted in self.appends by _land, unless a duplicate)

    async def _append_next(self, row: NextRow) -> None:
        """``Backend.append_next`` of ``row``, through the group committer when there
        is one (its refusal raised)."""
        group = self.group
        if group is None:
            await self.backend.append_next(*row)
        else:
            refused = await group.join_next(row)
            if refused is not None:
                raise refused

    def settled(self, agent_id: str, seq: int) -> None:
        """A buffered append reached the backend: unpin the agent once all of it has."""
        pinned = self.reads.pinned
        record = pinned.get(agent_id)
        if record is not None and record.seq <= seq:
            del pinned[agent_id]
            if (idle := self.idle) is not None and agent_id in self.behind_unfenced:
                self.behind_unfenced.discard(agent_id)
                idle.saved(agent_id)  # (all of it stored: idle from now)
        links = self.buffered_links.get(agent_id)
        if links is not None and self.witness is not None:
            link = links.pop(seq, None)
            begun = links.get(1) if seq > 1 else None  # (seq 1 flushed with it: begun)
            for older in [s for s in links if s < seq]:
                del links[older]
            if not links:
                del self.buffered_links[agent_id]
            if link is not None:  # (its incarnation: the record pinned, when still)
                created = record.created_at if record is not None else None
                if begun is not None:  # the stream's begin is a reset (.incarnation)
                    self.witness.acked(agent_id, 1, begun, created)
                self.witness.acked(agent_id, seq, link, created)

    async def snapshot(self, agent_id: str) -> int:
        """Store a snapshot of the latest state of ``agent_id`` now; returns its seq."""
        reads = self.reads
        async with self.lock(agent_id):
            record = await reads.current(agent_id)
            if record is None:
                raise AgentNotFound(agent_id)
            record.snapshot_seq = 0  # a snapshot is due now: prepare() loads a delta's base
            try:
                await self.snapshots.prepare(record)
                raw, marks = self.snapshots.encode(record)
                await (self.snapshot_saver or self.backend.save_snapshot)(agent_id, raw)
            except BaseException:
                reads.cache.discard(agent_id)
                raise
            mark_snapshot(record, marks)
            self.snapshots_written += 1
            return record.seq

    async def delete(self, agent_id: str) -> bool:
        """Delete the stream and snapshots of ``agent_id``; True if it existed."""
        async with self.lock(agent_id):
            self.reads.forget(agent_id)
            if self.idle is not None:
                self.idle.forget(agent_id)
            # (conditional on the head a retention purge saw: store/conditional.py)
            # with its tombstone in the feed (one commit where the engine has one:
            # store/feed_deletes.py); a governed store's delete commits with its audit
            # entry and its tombstone (store/governed_changes.py)
            erase = self._erase_governed if self.eraser else self._erase
            if self.witness is None:
                return await erase(agent_id)
            self.buffered_links.pop(agent_id, None)
            await self.witness.deleting(agent_id)
            existed = await erase(agent_id)
            self.witness.deleted(agent_id)
            return existed

    async def _erase(self, agent_id: str) -> bool:
        return await feed_deletes.erase(self.backend, self.codec, agent_id)

    async def _erase_governed(self, agent_id: str) -> bool:
        assert self.eraser is not None  # (it writes the feed tombstone too: see governed)
        return await self.eraser(agent_id)

    async def earlier_append(self, agent_id: str, key: str) -> AppendResult | None:
        """The append of ``agent_id`` that used idempotency ``key`` (buffered or stored);
        a stored record is confirmed against its event (see :mod:`.idempotency`)."""
        stored_forms = idempotency.stored_keys(self.codec, agent_id, key)
        if self.behind is not None:
            buffered = self.behind.find_key(agent_id, stored_forms[0])
            if buffered is not None:
                return buffered
        for stored in stored_forms:
            found = await self.backend.lookup_key(agent_id, stored)
            if found is not None:
                return await self.confirm_key(agent_id, stored, found)
        return None

    async def confirm_request(self, request: AppendRequest, result: AppendResult) -> None:
        """A buffered append the backend reported as a duplicate: check its record."""
        if request.idempotency_key is not None:
            await self.confirm_key(request.agent_id, request.idempotency_key, result)

    async def confirm_key(self, agent_id: str, stored: str, found: AppendResult) -> AppendResult:
        """``found`` if the events it points at carry the key stored as ``stored``; else
        :class:`IntegrityError` (a forged or damaged idempotency record)."""
        first, last = found.first_seq, found.last_seq
        events: list[RawEvent] = []
        if 1 <= first <= last and last - first < PAGE * 10:
            events = await self.backend.read(agent_id, first - 1, last)
            if (not events or events[0].seq != first) and self.backend.supports(Capability.PRUNE):
                # a compaction removed the start of its events (the record stays): what
                # is below the base cannot be checked, the rest is
                base = (await self.backend.stream_bases([agent_id]))[0]
                if first <= base:
                    if last <= base:
                        idempotency.check_pruned(self.codec, agent_id, stored, first)
                        return found
                    first = base + 1
        bodies = [(raw.seq, self.reads.decode_event(agent_id, raw).get("key")) for raw in events]
        idempotency.check_body_keys(self.codec, agent_id, stored, first, last, bodies)
        return found
