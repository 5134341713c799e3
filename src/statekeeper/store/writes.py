"""The write pipeline: one save in, one append out.

A write goes through three steps, each in one place:

1. :meth:`WritePipeline.write` finds the state the write is made on — the cached
   record whose stored head tag is known, trusted without a read (the append's
   compare-and-set is the check) — and handles conflicts, retries and idempotency;
2. :meth:`WritePipeline.build` encodes the event (and a snapshot when one is due) into
   an :class:`~statekeeper.records.AppendRequest` and computes the state after it;
3. :meth:`WritePipeline.submit` hands the request to the backend: directly, through
   the group committer (``durability="group"``) or the write-behind buffer
   (``"async"``).

Nothing is written to the cache before the backend acknowledged the append
(copy-on-write: the record the write was built on stays untouched until then).

Over 600 lines because the three steps share one hot path whose cost is counted in
instructions per save: splitting them across modules adds calls and attribute loads
on every save (docs/benchmarks.md, "Hot path"); the observer's timing marks live here
for the same reason (one clock pair shared with the engine append).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from typing import Any, Protocol

import orjson

from .. import patch
from ..arguments import check_mapping, check_name, check_new_agent_id, check_optional_name
from ..backends.base import Backend, Capability, NextRow, StoreRequest, check_fence
from ..codec import ZERO_LINK, Codec, TypeRegistry
from ..codec.depth import check_ops_depth
from ..codec.formats import JSON
from ..codec.pipeline import BLAKE3_FROM
from ..codec.types import to_plain
from ..errors import (
    AgentNotFound,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    InvalidArgument,
    SerializationError,
    StateTooLarge,
)
from ..records import (
    AppendRequest,
    AppendResult,
    EventType,
    Fence,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
)
from ..security.highwater import HighWater
from . import feed_deletes, idempotency
from .body import RESERVED, SNAPSHOT_TYPE, event_body, next_record
from .change import diff_by_key, dump_keys, kept_bytes, plain
from .durability import Durability, GroupCommitter, WriteBehind
from .flat import FlatSave, bind_flat
from .idle_settle import IdleSettler
from .lean import LeanAppend, bind_lean
from .locks import KeyedLock
from .observing import FOLD_AT, StoreObserver
from .reads import PAGE, ReadPath
from .snapshots import SnapshotPolicy, mark_snapshot
from .state import HELD_AS_BYTES, AgentRecord, document

__all__ = [
    "SAVE_CARRY",
    "SEEN",
    "Leased",
    "Make",
    "Packed",
    "Seen",
    "WritePipeline",
    "append_changes",
    "check_event_type",
    "check_write_options",
    "event_info",
    "locate",
    "save_changes",
]


class Seen:
    """What a :class:`~.agent.DurableAgent` carries through :data:`SEEN`: ``seq`` and
    ``link``, the chain link at ``seq`` of the stream it last read or wrote (None: not
    known), and ``adopted``, set by the store: the chain link of the state the call
    returned (a ``get`` / ``load`` of the latest state) or made (a write; None when not
    made or not known). The agent takes its link from there rather than from the
    store's cache, which may not hold the record (cache off, or evicted). ``tag``:
    the head tag stored with ``seq`` of that stream, when the caller knows it rather
    than the link (the LangGraph saver's compaction fence): compared the same way.
    ``adopted_tag``, set with ``adopted``: the head tag stored with that state (None:
    not known), which the saver remembers where the store's cache does not hold the
    record (``cache_size=0``, or evicted) — without it, its writes were made at the
    seq alone. ``adopted_checksum``, set by a write with ``adopted``: the stored
    checksum of the event it wrote at the head (what a delete conditional on that
    record compares: the compaction's cut-over deletes the fenced generation at it)."""

    __slots__ = ("adopted", "adopted_checksum", "adopted_tag", "link", "seq", "tag")

    def __init__(self, seq: int, link: bytes | None, tag: bytes | None = None) -> None:
        self.seq = seq
        self.link = link
        self.tag = tag
        self.adopted: bytes | None = None
        self.adopted_tag: bytes | None = None
        self.adopted_checksum: bytes | None = None


#: a :class:`Seen`, set by a :class:`~.agent.DurableAgent` around the ``StateStore``
#: call of its write or load (a context variable: the public calls take no such
#: argument, and wrapper stores pass it on unchanged). A write expecting ``seq`` on a
#: stream whose link there differs from ``link`` is a write onto a stream deleted and
#: re-created since: :meth:`WritePipeline.write` refuses it (no read of its own: the
#: link is the head's, already read or cached, that the head tag authenticates).
SEEN: ContextVar[Seen | None] = ContextVar("statekeeper_seen", default=None)

#: The document a save writes, made from the state it is written onto: set around a
#: :meth:`StateStore.save` by a typed save (``statekeeper.schema.TypedStates.save``),
#: which puts back the stored keys its model does not declare (and refuses to write
#: over a state stored by newer code that it cannot read). Called with a function
#: giving that state's document (unpacked only when called) and its schema version by
#: the save's ``make`` (:func:`save_changes`), so on the very record the write is made
#: on — the cached one, or the one the write read, again after a conflict — without a
#: read of its own. Taken by the first save that sees it (a save made inside that save
#: does not).
SAVE_CARRY: ContextVar[Callable[[Callable[[], Any], int | None], Mapping[str, Any]] | None] = (
    ContextVar("statekeeper_save_carry", default=None)
)


def recreated(agent_id: str, seq: int) -> ConflictError:
    """The conflict of a write made on ``seq`` of a stream since deleted and re-created."""
    error = ConflictError(agent_id, seq, seq)
    error.add_note(
        f"agent {agent_id!r} was deleted and re-created since this agent object read it: "
        "its head seq is the same, but it is another stream; nothing was written "
        "(call agent.refresh() to load the stored state)"
    )
    return error


_loads = orjson.loads
_perf = time.perf_counter
_dumps = orjson.dumps
PATCH = EventType.PATCH

#: what a write changes, given the state it is made on (None: no stream yet):
#: (JSON Patch ops on the data, the FSM state to store or None)
Make = Callable[[AgentRecord | None], tuple[list[dict[str, Any]], str | None]]


class Leased(Protocol):
    """What a write can be made under: anything with a ``fence`` — ``(holder, token)``
    — such as :class:`statekeeper.concurrency.Lease` or a
    :class:`~statekeeper.records.LeaseInfo`."""

    @property
    def fence(self) -> Fence:
        """``(holder, token)`` of the lease."""
        ...


class WritePipeline:
    """Builds and appends the writes of one store (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        codec: Codec,
        reads: ReadPath,
        snapshots: SnapshotPolicy,
        *,
        durability: Durability,
        clock: Callable[[], float],
        write_retries: int,
        max_event_bytes: int | None,
        max_state_bytes: int | None,
        flush_size: int,
        flush_interval: float,
        witness: HighWater | None,
    ) -> None:
        self.backend = backend
        self.codec = codec
        self.reads = reads
        self.snapshots = snapshots
        self.clock = clock
        self.write_retries = write_retries
        self.max_event_bytes = max_event_bytes
        self.max_state_bytes = max_state_bytes
        self.witness = witness
        self.appends = 0
        self.snapshots_written = 0
        #: writes made again after a conflict (the metrics' exact retry count)
        self.retries = 0
        #: the engine's conflict on an agent's stale cached head, met by an append on
        #: the cached record (:meth:`_append_trusted`) whose caller makes the write
        #: again through :meth:`write`: a retry only if :meth:`write` appends again
        #: (not when it finds ``expected_seq`` gone and raises), and the same conflict
        self.stale: dict[str, ConflictError] = {}
        # links of appends still in the write-behind buffer, for their witness marks
        self.buffered_links: dict[str, dict[int, bytes]] = {}
        self._locks = KeyedLock()
        self._submitter: Callable[[AppendRequest], Awaitable[AppendResult]] | None = None
        #: when set, a snapshot (``snapshot()``) and a delete are stored through these
        #: instead of ``backend.save_snapshot`` / ``backend.delete_agent``, under the
        #: agent's lock (a governed store writes them with their audit entry)
        self.snapshot_saver: Callable[[str, RawSnapshot], Awaitable[None]] | None = None
        self.eraser: Callable[[str], Awaitable[bool]] | None = None
        self._observer: StoreObserver | None = None
        #: the idle settles' queue (``settle_after``: :mod:`.idle_settle`), told of
        #: every stored save; None: no trigger
        self.idle: IdleSettler | None = None
        #: agents whose last buffered write (``durability="async"``) was unfenced: the
        #: idle trigger queues them once the buffer has stored it (:meth:`settled`)
        self.behind_unfenced: set[str] = set()
        self.group = GroupCommitter(backend) if durability == "group" else None
        # writes trust the cache (see write) where the backend's compare-and-set can
        # tell a re-created stream from the cached one
        self.trust_cache = backend.compares_head_tag and durability != "async"
        # every append built on a record whose head tag is known carries it to compare
        # (a buffered one too: flushed onto a re-created stream, it is refused)
        self.tags_compared = backend.compares_head_tag
        # a store the backend created at open: an agent it never wrote, read nor lost
        # from its cache is created without a read first (see _unseen)
        self.opened_new = backend.opened_new and self.trust_cache
        self.behind = (
            WriteBehind(
                backend,
                flush_size=flush_size,
                flush_interval=flush_interval,
                on_stale=reads.forget,
                on_flushed=self.settled,
                confirm=self.confirm_request,
            )
            if durability == "async"
            else None
        )
        # the engine's own count of commits at open, when it shares one commit among
        # the appends of concurrent saves by itself (SQLite's commit queue)
        self._engine = backend
        self._engine_commits: int | None = (
            getattr(backend, "append_commits", None) if backend.groups_appends else None
        )
        #: the common save may take :meth:`save_fast` (see :meth:`decide_fast`)
        self.fast = False
        #: the flat save of a cached agent (see :mod:`.flat`), None when ruled out
        self.flat: FlatSave | None = None
        self.lean: LeanAppend | None = None
        self.decide_fast()

    @property
    def commits(self) -> int:
        """Commits made so far, a shared commit counted once: the group committer's
        (``group``), the write-behind flushes (``async``), the engine's own count when
        it commits concurrent appends together (SQLite's commit queue: every store on
        the engine included, as for the group committer), else one per append."""
        if self.group is not None:
            return self.group.commits
        if self.behind is not None:
            return self.behind.flushes
        base = self._engine_commits
        if base is None:
            return self.appends
        now: int = getattr(self._engine, "append_commits", base)
        return now - base

    # -- what is decided once, not per save ----------------------------------------------

    def decide_fast(self) -> None:
        """Decide whether a save may take :meth:`save_fast`, from what stays the same
        from one save to the next: no write-behind buffer, no submitter (a governed
        store's audit-together path), no observer, the cache trusted and validated,
        no size limits, a JSON codec. Made at construction and again whenever one of
        them is set (``observer`` and ``submitter`` are properties that call this), so
        the save path checks one flag instead of each of them; and binds the flat save
        (:mod:`.flat`) for those options."""
        self.fast = (
            self.behind is None
            and self._submitter is None
            and self._observer is None
            and self.trust_cache
            and self.reads.validate
            and self.max_event_bytes is None
            and self.max_state_bytes is None
            and self.codec.format.id == JSON
        )
        self.flat = bind_flat(self) if self.fast else None
        #: Codec.seal of save_fast's event (a body under BLAKE3_FROM), bound once
        self.sealer = self.codec.plain_sealer() if self.fast else None
        #: the lean keyed append of a caller's built event (see :mod:`.lean`)
        self.lean = bind_lean(self) if self.fast else None

    @property
    def submitter(self) -> Callable[[AppendRequest], Awaitable[AppendResult]] | None:
        """When set, appends go through it instead of ``backend.append`` (a governed
        store commits each write together with its audit entry: store/governed_writes.py)."""
        return self._submitter

    @submitter.setter
    def submitter(self, value: Callable[[AppendRequest], Awaitable[AppendResult]] | None) -> None:
        self._submitter = value
        self.decide_fast()

    @property
    def observer(self) -> StoreObserver | None:
        """Times the engine's append of a direct write (see :mod:`.observing`)."""
        return self._observer

    @observer.setter
    def observer(self, value: StoreObserver | None) -> None:
        self._observer = value
        self.decide_fast()

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

    # -- 1. the state a write is made on -------------------------------------------

    async def write(
        self,
        agent_id: str,
        event_type: str,
        info: dict[str, Any],
        *,
        expected_seq: int | None,
        make: Make,
        idempotency_key: str | None = None,
        actor: str | None = None,
        schema_version: int | None = None,
        create_type: str | None = None,
        lease: Leased | None = None,
        dumped: Packed | None = None,
        started: Any = None,
    ) -> AppendResult:
        """Append one event of ``event_type`` whose changes ``make`` computes from the state
        it is made on; ``dumped`` receives what ``make`` serialized of the new data.

        ``started`` is an observed save's mark (an untraced one's is its clock reading
        at the start, a float): when the engine's ``append`` is timed here, the save's latency is
        observed here too, ending at the append's end (one clock reading for both), and
        the observer's ``timed`` is set to ``started`` to tell the save so."""
        reads = self.reads
        fence = None
        if lease is not None:
            check_lease_agent(agent_id, lease)
            fence = lease.fence
        locks = self._locks
        if not locks.try_acquire(agent_id):
            await locks.acquire(agent_id)
        try:
            # No read before a write: a cached record whose stored head tag is known is
            # trusted, the append's compare-and-set (head seq and tag) being the check;
            # a conflict drops it and the write is made again on a validated read.
            # (with validate_cache=False every attempt trusts the cache, and counts)
            trusting = self.trust_cache and reads.validate
            # a save's create on a store created at open: no read of a head that is not
            # there (see _unseen); a conflict reads it and writes again, as a stale
            # cached head does
            unread = (
                self.opened_new
                and trusting
                and create_type is not None
                and expected_seq is None
                and idempotency_key is None
                and fence is None
                and self.behind is None
                and self._unseen(agent_id)
            )
            attempt = 0
            # the engine's conflict on a stale cached head, not counted yet: the write
            # made again is a retry; a conflict raised instead is this one, met again
            stale = self.stale.pop(agent_id, None) if self.stale else None
            while True:
                record = reads.trusted(agent_id) if trusting else None
                if record is None and unread:
                    unread = False  # (once: after a conflict, the head is read)
                elif record is None:
                    trusting = False
                    # (write-behind: on the cached state as it is; a stale one fails at
                    # the flush, reported there, as documented for the mode)
                    record = await reads.current(agent_id, cached=self.behind is not None)
                base = record.seq if record is not None else 0
                if trusting and expected_seq is not None and expected_seq != base:
                    trusting = False  # the cache may be stale: ask the backend
                    continue
                if fence is not None and expected_seq is not None and expected_seq != base:
                    # a stale view under a lease: a lost lease is the news, not the
                    # conflict (the backend also checks the fence first)
                    check_fence(agent_id, fence, await self.backend.get_lease(agent_id))
                if idempotency_key is not None and (
                    self.behind is not None
                    or (expected_seq is not None and expected_seq != base)
                    or idempotency.rotating(self.codec)  # recorded under an older key?
                ):
                    # a retry of an append that landed? (the backend checks keys itself
                    # on append, but not before a conflict, nor a write-behind buffer)
                    earlier = await self.earlier_append(agent_id, idempotency_key)
                    if earlier is not None:
                        return earlier
                if expected_seq is not None and expected_seq != base:
                    raise ConflictError(agent_id, expected_seq, base) from stale
                if expected_seq is not None and record is not None:
                    seen = SEEN.get()
                    if (
                        seen is not None
                        and seen.seq == expected_seq
                        and (
                            (
                                seen.link is not None
                                and record.link is not None
                                and record.link != seen.link
                            )
                            # (the tag is the engine's: the append below sends the
                            # record's as its expected tag, compared in its commit)
                            or (
                                seen.tag is not None and record.tag_known and record.tag != seen.tag
                            )
                        )
                    ):
                        if trusting:  # the cache may be stale: ask the backend
                            trusting = False
                            continue
                        raise recreated(agent_id, expected_seq) from stale
                if dumped is not None:
                    dumped.packed, dumped.plain = None, False
                try:
                    ops, fsm = make(record)
                except RecursionError:  # deeper than the diff can walk: no codec stores it
                    raise SerializationError(
                        "cannot serialize: the document is nested too deeply", "data"
                    ) from None
                written_type = create_type if (record is None and create_type) else event_type
                if record is not None and self.snapshots.needs_prepare(record):
                    await self.snapshots.prepare(record)  # rare: a link or a delta base
                request, new_record = self.build(
                    agent_id,
                    written_type,
                    info,
                    record,
                    ops,
                    fsm,
                    idempotency_key,
                    actor,
                    schema_version,
                    fence,
                    dumped.packed if dumped is not None else None,
                    dumped is not None and dumped.plain,
                )
                if stale is not None:  # written again after the engine's conflict
                    self.retries += 1
                    stale = None
                if self.behind is not None:
                    reads.pinned[agent_id] = new_record
                    reads.cache.put(agent_id, new_record)
                    # (counted once stored: WriteBehind.stored, or lost: .lost)
                    if (seen := SEEN.get()) is not None:
                        seen.adopted, seen.adopted_tag = new_record.link, new_record.tag
                        seen.adopted_checksum = new_record.checksum
                    if self.witness is not None and new_record.link is not None:
                        self.buffered_links.setdefault(agent_id, {})[base + 1] = new_record.link
                    await self.behind.add(request)  # waits when the buffer is full
                    if (idle := self.idle) is not None:
                        # (left to the buffer's own flush: queued once stored, by
                        # settled(); a settle now would flush it before flush_interval)
                        idle.fenced(agent_id)
                        if fence is None:
                            self.behind_unfenced.add(agent_id)
                        else:
                            self.behind_unfenced.discard(agent_id)
                    return AppendResult(agent_id, base + 1, base + 1)
                try:  # (submit, without its coroutine: this runs on every write)
                    group, submitter = self.group, self._submitter
                    if group is not None:
                        result = await group.submit(request)
                    elif submitter is not None:  # a governed store: with its audit entry
                        result = await submitter(request)
                    elif (obs := self._observer) is None:
                        result = await self.backend.append(request)
                    elif obs.untraced:  # timed here: no wrapper's frame, no call
                        mark = _perf()
                        try:
                            result = await obs.engine.append(request)
                        except BaseException as exc:
                            obs.append_failed(request, mark, exc)
                            raise
                        end = _perf()
                        times = obs.append_times
                        times.append(end - mark)
                        if started.__class__ is float and not result.duplicate:
                            # the save's end is the append's: nothing after it but
                            # bookkeeping (no await), and the clock is read once less
                            obs.save_times.append(end - started)
                            obs.timed = started
                        if len(times) >= FOLD_AT:  # (folds save_times too)
                            obs.fold()
                        if request.snapshot is not None:
                            obs.appended_snapshot(request)
                    else:
                        result = await self.submit(request)
                except ConflictError as exc:
                    reads.cache.discard(agent_id)
                    if trusting:  # the cached head was stale: not an attempt of its own
                        trusting = False
                        stale = exc  # (a retry once written again, see above)
                        continue
                    if expected_seq is not None or attempt == self.write_retries:
                        raise
                    attempt += 1
                    self.retries += 1
                    continue
                except BaseException:
                    reads.cache.discard(agent_id)
                    raise
                if result.duplicate:  # (stored before: not an append of its own)
                    reads.cache.discard(agent_id)
                    if request.idempotency_key is not None:  # never trust the record alone
                        return await self.confirm_key(agent_id, request.idempotency_key, result)
                else:
                    self.appends += 1
                    if (idle := self.idle) is not None:
                        idle.saved(agent_id) if fence is None else idle.fenced(agent_id)
                    if request.snapshot is not None:
                        self.snapshots_written += 1
                    reads.cache.put(agent_id, new_record)
                    if self.witness is not None and new_record.link is not None:
                        self.witness.acked(
                            agent_id, result.last_seq, new_record.link, new_record.created_at
                        )
                    if (seen := SEEN.get()) is not None:  # (an agent's write: its link)
                        seen.adopted, seen.adopted_tag = new_record.link, new_record.tag
                        seen.adopted_checksum = new_record.checksum
                return result
        finally:
            locks.release(agent_id)

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

    # -- 1b. the common save, in one call ---------------------------------------------

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

    # -- 2. where a save is built ------------------------------------------------------

    def build(
        self,
        agent_id: str,
        event_type: str,
        info: dict[str, Any],
        record: AgentRecord | None,
        ops: list[dict[str, Any]],
        fsm: str | None,
        idempotency_key: str | None,
        actor: str | None,
        schema_version: int | None,
        fence: Fence | None = None,
        packed: dict[str, bytes] | None = None,
        plain_ops: bool = False,
        after: Any = None,
    ) -> tuple[AppendRequest, AgentRecord]:
        """Encode one event (and a snapshot when due); compute the state after it.

        ``packed``: the packed bytes of each top-level value of the data after the
        event, when the caller made them (a save's change detection): the new state is
        then held as those bytes, nothing decoded or applied. Otherwise the event's ops
        are applied to a copy-on-write of the data, their values decoded from the
        event's bytes (so that the state shares nothing with the caller's objects).

        ``plain_ops``: the values the ops carry are known to be plain JSON without
        floats or tags (:func:`.change.plain`): with no caller ``info``, the
        event is then serialised without walking it for typed values first.

        ``after``: the data after the ops, made by the caller and handed over (see
        :meth:`append_applied`): kept as the new state when the event is plain JSON,
        instead of applying the ops to a copy of the data again."""
        if record is None:  # an agent created: its id must be a normal one
            check_new_agent_id(agent_id)
        if ops:
            moves = any(op.get("op") in ("move", "copy") for op in ops) and record is not None
            check_ops_depth(agent_id, ops, document(record) if moves and record else None)
        base = record.seq if record is not None else 0
        seq = base + 1
        now = self.clock()
        if record is not None and now < record.updated_at:
            # A stream's times never go back: a wall clock stepped back (NTP, a resumed
            # VM, another writer's clock behind) stamps the event with its head's time,
            # so time travel never shows a state after an event stamped later, nor a
            # TTL purge take an agent written just now for one idle since then.
            now = record.updated_at
        codec = self.codec
        body = event_body(
            info, ops, fsm=fsm, schema_version=schema_version, actor=actor, key=idempotency_key
        )
        body_bytes = None
        if plain_ops and not info and codec.format.id == JSON:
            try:
                body_bytes = _dumps(body)  # what Format.dumps makes of a plain document
            except TypeError:  # (a key that is not a str...): the codec says what is wrong
                body_bytes = None
        if body_bytes is None:
            body_bytes = codec.serialize(body, "event")
        if self.max_event_bytes is not None and len(body_bytes) > self.max_event_bytes:
            raise StateTooLarge(agent_id, "event", len(body_bytes), self.max_event_bytes)
        prev = record.link if record is not None else ZERO_LINK
        if prev is None:  # pragma: no cover - prepare() found it
            raise IntegrityError(agent_id, base, "the chain link of the head is unknown")
        if (sealer := self.sealer) is not None and len(body_bytes) < BLAKE3_FROM:
            # (the plain codec's seal bound once, as save_fast seals: the same bytes
            # without seal's checks of its arguments, ~60 bytecodes of a new agent's
            # first save)
            payload, link = sealer(agent_id, seq, event_type, now, body_bytes, prev)
            checksum = link
        else:  # (Sealed is a NamedTuple: unpacked in one step)
            payload, checksum, link = codec.seal(agent_id, seq, event_type, now, body_bytes, prev)
        raw = RawEvent(seq, event_type, now, payload, checksum)
        # Copy-on-write: ``record`` stays untouched until the append is acknowledged.
        if record is None:
            new = AgentRecord(agent_id, 0, None, {}, 1, now, now)
        else:
            new = next_record(record)
        new.link = link
        new.checksum = checksum
        new.replay_bytes = (record.replay_bytes if record is not None else 0) + len(payload)
        plain = codec.format.id == JSON and not (0x24 in body_bytes and b'"$t"' in body_bytes)
        if ops and packed is not None and plain and not new.rich:
            new.data, new.dumped, new.blob = HELD_AS_BYTES, packed, None
        elif ops and after is not None and plain and not new.rich:
            new.data, new.dumped, new.blob, new.shared = after, None, None, True
        elif ops:
            # the document before the patch, read while ``rich`` still says how its
            # bytes were written (a plain document held as JSON bytes only)
            before = document(new)
            if plain:
                decoded = _loads(body_bytes)  # plain JSON: no typed values to rebuild
            else:
                decoded = codec.deserialize(body_bytes, agent_id, seq)
                new.rich = True
            new.data = patch.apply(before, decoded["ops"])
            new.dumped, new.blob = None, None
        elif packed is not None and not new.rich:  # data unchanged: its bytes, for next time
            new.dumped = packed
        if fsm is not None:
            new.fsm_state = fsm
            new.fsm_entered_at = now
        if schema_version is not None:
            new.schema_version = schema_version
        new.seq = seq
        new.updated_at = now
        if self.max_state_bytes is not None:
            if new.blob is None:
                new.blob = codec.copy_dumps(document(new))
            if len(new.blob) > self.max_state_bytes:
                raise StateTooLarge(agent_id, "state", len(new.blob), self.max_state_bytes)
        snapshot = None
        if self.snapshots.due(new, seq):
            snapshot, marks = self.snapshots.encode_timed(new)
            mark_snapshot(new, marks)
        request = StoreRequest(
            agent_id,
            base,
            (raw,),
            snapshot,
            None
            if idempotency_key is None
            else idempotency.stored_key(codec, agent_id, idempotency_key),
            fence,
            head_tag=codec.head_tag(agent_id, seq, link),
            expected_tag=record.tag if record is not None else None,
            check_tag=self.tags_compared and record is not None and record.tag_known,
        )
        new.tag, new.tag_known = request.head_tag, True
        return request, new

    # -- 3. where a save is appended -----------------------------------------------------

    async def submit(self, request: AppendRequest) -> AppendResult:
        """Append ``request`` now (through the group committer in ``group`` mode)."""
        if self.group is not None:
            return await self.group.submit(request)
        if self.submitter is not None:
            return await self.submitter(request)
        obs = self.observer
        if obs is None:
            return await self.backend.append(request)
        mark = _perf() if obs.untraced else obs.append_begin(request)
        try:
            result = await obs.engine.append(request)
        except BaseException as exc:
            obs.append_failed(request, mark, exc)
            raise
        obs.appended(request, result, mark)
        return result

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

    # -- snapshots and deletes (under the agent's write lock) ---------------------------

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

    # -- idempotency ---------------------------------------------------------------------

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


# -- the arguments every write checks ---------------------------------------------------


def event_info(info: Mapping[str, Any] | None) -> dict[str, Any]:
    """The caller's event information, refused if it would shadow what the store writes."""
    body = dict(check_mapping(info, "info", optional=True) or {})
    bad = RESERVED.intersection(body)
    if bad:
        raise ConfigurationError(f"event info may not use reserved keys {sorted(bad)}")
    return body


def locate(
    exc: SerializationError, types: TypeRegistry | None = None, /, **values: Any
) -> SerializationError:
    """Point a serialization error at the caller's own argument (``data.messages[3]``)
    rather than at the encoded event (``event.ops[0].value…``); ``types`` are the
    codec's registered types."""
    for root, value in values.items():
        try:
            to_plain(value, types, root)
        except SerializationError as found:
            return found
        except RecursionError:
            return exc
    return exc


def check_event_type(event_type: object) -> None:
    """An event type the caller may use: the snapshot's is reserved, and so is a delete's
    tombstone's (an agent's own event of that type was handed to feed consumers with the
    type docs/feed.md tells them a delete has)."""
    check_name(event_type, "event_type")
    if event_type == SNAPSHOT_TYPE or event_type == feed_deletes.AGENT_DELETED:
        raise InvalidArgument("event_type", f"event_type {event_type!r} is reserved")


def check_write_options(idempotency_key: object, actor: object, lease: object) -> None:
    """The options every write takes: an idempotency key, an actor, a lease."""
    check_optional_name(idempotency_key, "idempotency_key")
    check_optional_name(actor, "actor")
    if lease is not None:
        fence = getattr(lease, "fence", None)
        if not (
            isinstance(fence, tuple)
            and len(fence) == 2
            and isinstance(fence[0], str)
            and type(fence[1]) is int
        ):
            raise InvalidArgument(
                "lease",
                "lease must be a Lease (or anything with a fence (holder, token)), "
                f"not {type(lease).__name__}",
            )


def lease_agent(lease: object) -> str | None:
    """The stored id of the agent ``lease`` was granted on: a
    :class:`~statekeeper.concurrency.Lease`'s ``stored_id``, a
    :class:`~statekeeper.records.LeaseInfo`'s ``agent_id`` (None: it does not say)."""
    leased = getattr(lease, "stored_id", None)
    if leased is None and isinstance(lease, LeaseInfo):
        leased = lease.agent_id
    return leased if isinstance(leased, str) else None


def check_lease_agent(
    agent_id: str, lease: object, name: Callable[[str], str] | None = None
) -> None:
    """Refuse a write to ``agent_id`` (the stored id) under a lease granted on another
    agent, before anything is written. Fencing tokens count per agent (each agent's
    first lease is token 1), so the backend's token check alone would take the lease of
    one agent for the lease of another. ``name`` gives the ids as the caller names
    them (a namespaced store's relative ids); the error's ``agent_ids`` are
    ``[agent_id, the lease's agent]``."""
    leased = lease_agent(lease)
    if leased is None or leased == agent_id:
        return
    shown = name or str
    error = InvalidArgument(
        "lease",
        f"the lease given was granted on agent {shown(leased)!r}, not on agent "
        f"{shown(agent_id)!r}: a lease fences writes of its own agent only (acquire one "
        f"on {shown(agent_id)!r}); nothing was written",
    )
    error.agent_ids = [agent_id, leased]  # type: ignore[attr-defined]
    raise error


class Packed:
    """What a save's change detection packed of the new data (see :mod:`.change`):
    the bytes of each top-level value (None: not made), and whether the values its
    ops carry are plain JSON (:func:`.change.plain`)."""

    __slots__ = ("packed", "plain")

    def __init__(self) -> None:
        self.packed: dict[str, bytes] | None = None
        self.plain = False


def save_changes(new: Mapping[str, Any], fsm_state: str | None) -> tuple[Make, Packed]:
    """What :meth:`StateStore.save` of the document ``new`` changes on the state it is made on,
    and where the bytes serialized to find that out are left (see :mod:`.change`)."""
    out = Packed()
    carry = SAVE_CARRY.get()
    if carry is not None:
        SAVE_CARRY.set(None)  # (this save's, not that of a save made inside it)

    def make(rec: AgentRecord | None) -> tuple[list[dict[str, Any]], str | None]:
        if rec is None:  # created by this save
            out.packed = dump_keys(new) if type(new) is dict else None
            out.plain = out.packed is not None and plain(list(out.packed.values()))
            return [{"op": "replace", "path": "", "value": new}], fsm_state
        fsm = fsm_state if fsm_state != rec.fsm_state else None
        doc = new if carry is None else carry(lambda: document(rec), rec.schema_version)
        if rec.rich:  # typed values: the plain diff (their JSON bytes are not them)
            return patch.diff(document(rec), doc), fsm
        old = rec.data if rec.dumped is not None else document(rec)
        carried: list[bytes] = []
        ops, out.packed = diff_by_key(old, doc, rec.dumped, carried)
        out.plain = plain(carried)
        return ops, fsm

    return make, out


def append_changes(agent_id: str, ops: list[dict[str, Any]], fsm_state: str | None) -> Make:
    """What :meth:`StateStore.append` changes: ``ops`` on an existing agent."""

    def make(rec: AgentRecord | None) -> tuple[list[dict[str, Any]], str | None]:
        if rec is None:
            raise AgentNotFound(agent_id)
        return ops, fsm_state

    return make
