"""The writes that skip :meth:`~.writes.WritePipeline.write`'s general path: the common
save of a cached agent (:meth:`WriteFast.save_fast`, one coroutine), and the appends of
an event a caller built on the state it holds (:meth:`WriteFast.append_made`,
:meth:`WriteFast.append_applied`: the LangGraph saver's).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..codec.depth import check_ops_depth
from ..codec.pipeline import BLAKE3_FROM
from ..errors import ConflictError
from ..records import AppendResult, EventType
from . import idempotency
from .body import next_record
from .change import diff_by_key, kept_bytes, plain
from .snapshots import mark_snapshot
from .state import HELD_AS_BYTES
from .write_build import WriteBuild

__all__ = ["WriteFast"]

_dumps = orjson.dumps
PATCH = EventType.PATCH


class WriteFast(WriteBuild):
    """The direct saves and appends (see the module docstring)."""

    def _unseen(self, agent_id: str) -> bool:
        """True when ``agent_id`` is taken for new: on a store the backend created at
        open (:attr:`Backend.opened_new`), every agent this store wrote or read is cached
        until the cache first evicts or drops one (a stale head, a failed write, a
        delete), so one that is not there was not written by this store. An agent that
        does exist (another writer's) costs one refused create (its compare-and-set) and
        is written again on a read of its head: correct whatever this answers, only the
        read saved depends on it."""
        reads = self.reads
        cache = reads.cache
        return (
            cache.evictions == 0
            and not cache.dropped
            and cache.max_size > 0
            and agent_id not in cache._data
            and agent_id not in reads.pinned
        )

    async def save_fast(
        self, agent_id: str, new: dict[str, Any], fsm_state: str | None
    ) -> AppendResult | None:
        """:meth:`write` + :meth:`build` + :meth:`submit` of ``StateStore.save(agent_id,
        new)`` with every option at its default, written out as one function: the
        steps of a save on a cached, trusted record of plain JSON whose bytes were kept
        (:mod:`.change`) — change detection against those bytes, encode once, seal,
        one append, head and cache updated. Only when :attr:`fast` (decided once, see
        :meth:`decide_fast`).

        None, with nothing done, when this save is not that case (no trusted record,
        a record with typed values or no bytes kept, a link or delta base to fetch,
        the agent's lock held by another write, a conflict on the cached head): the
        caller then makes it through :meth:`write`, which handles each of them. The
        result and what is stored are the same either way (tested against
        :meth:`write` in ``tests/store/test_save_fast.py``). Measured reason for a
        second copy of the steps: docs/benchmarks.md, "The common save in one call"."""
        reads = self.reads
        held = self._locks._held  # (KeyedLock.try_acquire / release, written out)
        if agent_id in held:
            return None  # another write of this agent: wait for it in write()
        cache = reads.cache
        cached = cache._data  # (LRUCache.get and put, written out: this runs on every save)
        record = cached.get(agent_id)
        if (
            record is None
            or not record.tag_known
            or record.rich
            or record.link is None
            or (self.snapshots.full_every > 1 and record.full_data is None)
            # (a state folded from storage: its bytes made now, see change.kept_bytes)
            or (record.dumped is None and kept_bytes(record) is None)
        ):
            return None
        cached.move_to_end(agent_id)
        cache.hits += 1
        held[agent_id] = None
        try:
            carried: list[bytes] = []
            ops, packed = diff_by_key(record.data, new, record.dumped, carried)
            if ops:
                check_ops_depth(agent_id, ops)
            fsm = fsm_state if fsm_state != record.fsm_state else None
            base = record.seq
            seq = base + 1
            now = self.clock()
            if now < record.updated_at:  # the clock stepped back: see build()
                now = record.updated_at
            codec = self.codec
            body: dict[str, Any] = {}
            if ops:
                body["ops"] = ops
            if fsm is not None:
                body["fsm"] = fsm
            body_bytes = None
            if plain(carried):
                try:
                    body_bytes = _dumps(body)  # what Format.dumps makes of a plain document
                except TypeError:
                    body_bytes = None
            if body_bytes is None:
                body_bytes = codec.serialize(body, "event")
            if (sealer := self.sealer) is not None and len(body_bytes) < BLAKE3_FROM:
                payload, link = sealer(agent_id, seq, PATCH, now, body_bytes, record.link)
                checksum = link
            else:  # (Sealed is a NamedTuple: unpacked in one step, not three attribute loads)
                payload, checksum, link = codec.seal(
                    agent_id, seq, PATCH, now, body_bytes, record.link
                )
            # (0x24, "$", as an int: one memchr; see change.plain)
            if ops and (packed is None or (0x24 in body_bytes and b'"$t"' in body_bytes)):
                return None  # typed values in the ops: build() applies them, as write() does
            # The state after the event is made on ``record`` itself once the append is
            # acknowledged (a dozen attribute stores, where a copy-on-write record
            # costs its 23-argument constructor): until then nothing of the record
            # changes but ``replay_bytes``, which only the snapshot policy reads, and a
            # failed append drops the record from the cache. A save that writes a
            # snapshot is built on a copy (its encoding needs the new state).
            replay = record.replay_bytes
            record.replay_bytes = replay + len(payload)
            snapshot = None
            if self.snapshots.due(record, seq):
                record.replay_bytes = replay
                copy = next_record(record)
                copy.link, copy.checksum = link, checksum
                copy.replay_bytes = replay + len(payload)
                if ops:
                    copy.data, copy.dumped, copy.blob = HELD_AS_BYTES, packed, None
                elif packed is not None:
                    copy.dumped = packed
                if fsm is not None:
                    copy.fsm_state, copy.fsm_entered_at = fsm, now
                copy.seq, copy.updated_at = seq, now
                snapshot, marks = self.snapshots.encode_timed(copy)
                mark_snapshot(copy, marks)
            else:
                copy = None
            tag = codec.head_tag(agent_id, seq, link)
            row = (agent_id, seq, now, payload, checksum, tag, record.tag, snapshot)
            try:  # (_append_trusted of the row, written out: the engine commits it now)
                if (group := self.group) is not None:  # (_append_next, written out: no
                    refused = await group.join_next(row)  # coroutine of its own a save)
                    if refused is not None:
                        raise refused
                elif not self.backend.commit_next(row):
                    await self.backend.append_next(*row)
            except ConflictError:  # the cached head was stale: write() makes it again
                cache.discard(agent_id)
                self.retries += 1
                return None
            except BaseException:
                cache.discard(agent_id)
                raise
            self.appends += 1
            if (idle := self.idle) is not None:
                idle.saved(agent_id)
            result = AppendResult(agent_id, seq, seq)
            if copy is not None:
                self.snapshots_written += 1
                copy.tag, copy.tag_known = tag, True
                cache.put(agent_id, copy)
            else:
                record.fresh = False  # its data may be shared (as next_record says)
                if ops:
                    record.data, record.dumped, record.blob = HELD_AS_BYTES, packed, None
                elif packed is not None:
                    record.dumped = packed
                if fsm is not None:
                    record.fsm_state, record.fsm_entered_at = fsm, now
                record.seq, record.updated_at = seq, now
                record.link, record.checksum, record.tag = link, checksum, tag
                if cached.get(agent_id) is not record:  # evicted or replaced meanwhile
                    cache.put(agent_id, record)
            if self.witness is not None:
                self.witness.acked(agent_id, seq, link, record.created_at)
            return result
        finally:
            waiters = held[agent_id]
            if waiters:
                self._locks.release(agent_id)
            else:
                del held[agent_id]

    async def append_made(
        self, agent_id: str, ops: list[dict[str, Any]], expected_seq: int, link: bytes | None
    ) -> AppendResult | None:
        """``StateStore.append(agent_id, PATCH, {}, ops=ops, expected_seq=expected_seq)``
        — the save of a :class:`~.agent.DurableAgent` whose changes its tracker or its
        change detection already found — in one call: :meth:`build` and one append on
        the cached, trusted record at ``expected_seq`` (whose chain link there is ``link``,
        when known: else the stream was re-created), without the argument checks (the
        ops were made by the agent) nor the retry loop of :meth:`write`. Only when
        :attr:`fast`.

        None, with nothing done, when this save is not that case (no trusted record at
        ``expected_seq``, a link or delta base to fetch, the agent's lock held by
        another write, a conflict on the cached head): the caller then makes it
        through ``StateStore.append``, which handles each of them (and raises the
        conflict). :meth:`build` is called with what :meth:`write` passes it, so what
        is stored is the same either way (tested in ``tests/store/test_save_fast.py``)."""
        held = self._locks._held  # (KeyedLock.try_acquire / release, written out)
        if agent_id in held:
            return None
        reads = self.reads
        record = reads.trusted(agent_id)
        if (
            record is None
            or record.seq != expected_seq
            or (link is not None and record.link != link)  # re-created? (write() says)
            or self.snapshots.needs_prepare(record)
        ):
            return None
        held[agent_id] = None
        try:
            request, new_record = self.build(
                agent_id, EventType.PATCH, {}, record, ops, None, None, None, None
            )
            return await self._land(agent_id, request, new_record)
        finally:
            self._let_go(agent_id)

    async def append_applied(
        self,
        agent_id: str,
        event_type: str,
        ops: list[dict[str, Any]],
        expected_seq: int,
        key: str | None,
        after: Any,
        plain_ops: bool,
    ) -> AppendResult | None:
        """:meth:`append_made` for a caller that applied ``ops`` itself (the LangGraph
        saver): ``after`` is the document they make of the state at ``expected_seq``,
        handed over — the caller never changes it again — and kept as the new record's
        data instead of applying ``ops`` a second time; ``key`` the idempotency key;
        ``plain_ops`` as :meth:`build` takes it. None, with nothing done, in the cases
        :meth:`append_made` names and while keys rotate (the caller then makes the
        write through ``StateStore.append``)."""
        held = self._locks._held
        if agent_id in held or (key is not None and idempotency.rotating(self.codec)):
            return None
        reads = self.reads
        record = reads.trusted(agent_id)
        if record is None or record.seq != expected_seq or self.snapshots.needs_prepare(record):
            return None
        held[agent_id] = None
        try:
            request, new_record = self.build(
                agent_id, event_type, {}, record, ops, None, key, None, None,
                plain_ops=plain_ops, after=after,
            )  # fmt: skip
            return await self._land(agent_id, request, new_record)
        finally:
            self._let_go(agent_id)
