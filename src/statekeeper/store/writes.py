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

The pipeline is one class made of one part per job, each a class over the one before
it: :class:`~.write_base.WriteBase` (its state, and what happens once an append is
built: landing it, snapshots, deletes, idempotency checks),
:class:`~.write_build.WriteBuild` (step 2), :class:`~.write_fast.WriteFast` (the
direct saves and appends of a cached agent), and :class:`WritePipeline` here: its
options, decided once, and steps 1 and 3. A save's cost is counted in instructions
(docs/benchmarks.md, "Hot path"): the split adds no call and no attribute load — every
method's bytecode is what it was in the one class — and the observer's timing marks
stay with :meth:`WritePipeline.write` and :meth:`WritePipeline.submit` (one clock pair
shared with the engine append). What a write is given and what it makes of it (the
argument checks, :func:`save_changes`, :data:`SEEN`) is :mod:`.write_args`, re-exported
here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..backends.base import Backend, check_fence
from ..codec import Codec
from ..codec.formats import JSON
from ..errors import ConflictError, SerializationError
from ..records import AppendRequest, AppendResult, RawSnapshot
from ..security.highwater import HighWater
from . import idempotency, write_args
from .durability import Durability, GroupCommitter, WriteBehind
from .flat import FlatSave, bind_flat
from .idle_settle import IdleSettler
from .lean import LeanAppend, bind_lean
from .locks import KeyedLock
from .observing import FOLD_AT, StoreObserver
from .reads import ReadPath
from .snapshots import SnapshotPolicy
from .write_args import (
    SAVE_CARRY,
    Leased,
    Make,
    Packed,
    Seen,
    append_changes,
    check_event_type,
    check_lease_agent,
    check_write_options,
    event_info,
    locate,
    recreated,
    save_changes,
)
from .write_fast import WriteFast

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
    "check_lease_agent",
    "check_write_options",
    "event_info",
    "locate",
    "save_changes",
]

_perf = time.perf_counter

#: (bound by an assignment, not imported: CPython 3.11 calls a method of a name an
#: import bound, ``SEEN.get()`` in :meth:`WritePipeline.write`, with LOAD_ATTR and a
#: bound-method object instead of LOAD_METHOD)
SEEN = write_args.SEEN


class WritePipeline(WriteFast):
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

    # -- 1b. the common save, in one call ---------------------------------------------

    # -- 2. where a save is built ------------------------------------------------------

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


# -- the arguments every write checks ---------------------------------------------------
