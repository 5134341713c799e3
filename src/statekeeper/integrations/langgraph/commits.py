"""The write queue: a write's plan is built on the thread's cached document and
committed with compare-and-append; writes queued meanwhile share one commit; the
saver's adaptive snapshots."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import math
import threading
from typing import Any

import orjson
import zstandard

from ...errors import AgentNotFound, ConflictError, SerializationError
from ...records import AppendResult
from ...store.writes import SEEN, Seen
from . import mapping as m
from .stream import Op, Plan, _Pending, _Stream, _update_heads
from .streams import _SaverStreams

_log = logging.getLogger(__name__)


def _take_batch(
    queue: builtins.list[_Pending],
) -> tuple[builtins.list[_Pending], builtins.list[_Pending]]:
    """Split the queue: a batch with at most one checkpoint put, and the rest."""
    batch: builtins.list[_Pending] = []
    for i, pending in enumerate(queue):
        if pending.event_type == m.EV_CHECKPOINT and any(
            p.event_type == m.EV_CHECKPOINT for p in batch
        ):
            return batch, queue[i:]
        batch.append(pending)
    return batch, []


def _plain_claims(ops: builtins.list[Op]) -> bool:
    """Whether the run claims among ``ops`` are plain JSON: a claim's expiry is a float,
    finite (``check_saver_options`` refuses a non-finite ``run_lease``; checked here
    all the same: orjson would store an infinity as ``null``). Such a write was
    serialised the long way, walked for typed values first: the first write of every
    chat turn, which carries the turn's new messages (its claim rides on it), and every
    run's release (a ``null``)."""
    for op in ops:
        if op["path"] == "/run":
            value = op.get("value")
            if value is not None and not (
                type(value) is dict
                and all(type(x) is not float or math.isfinite(x) for x in value.values())
            ):
                return False
    return True


#: a batch's plans built: the plans still in it (one whose build raised is settled
#: with its error and left out) and its event (type, ops, key), None when it has no ops
_Built = tuple[builtins.list[_Pending], tuple[str, builtins.list[Op], str | None] | None]


def _build_one(st: _Stream, live: builtins.list[_Pending]) -> _Built:
    """:func:`_build` of a batch of one (a lone write, the usual case): its plan as it
    is, applied once by the append (no lists of event types and ops)."""
    pending = live[0]
    try:
        plan = pending.build(st)
    except BaseException as exc:  # e.g. CheckpointForkError: that call fails alone
        _settle(pending, exc)
        return [], None
    return live, (plan if plan is not None and plan[1] else None)


def _build(st: _Stream, live: builtins.list[_Pending]) -> _Built:
    """Build several plans, each against the document as the one before leaves it
    (applied to ``st.doc`` copy-on-write as it is built), into one event."""
    ops: builtins.list[Op] = []
    event_types: builtins.list[str] = []
    key: str | None = None  # a checkpoint's (see history.checkpoint_key)
    included: builtins.list[_Pending] = []
    for pending in live:
        try:
            plan = pending.build(st)
        except BaseException as exc:  # e.g. CheckpointForkError: that call fails alone
            _settle(pending, exc)
            continue
        included.append(pending)
        made, st.made = st.made, None
        if plan is None:
            continue
        event_type, plan_ops, plan_key = plan
        key = plan_key or key
        event_types.append(event_type)
        ops.extend(plan_ops)
        if made is not None and made[0] is plan_ops:  # (see .made)
            st.doc = made[1]
            if made[2] is not None:
                st.heads[made[2]] = made[3]
        else:
            st.doc = m.apply_once(st.doc, plan_ops)  # (copy-on-write)
            _update_heads(st, plan_ops)
    if not ops:
        return included, None
    event_type = event_types[0] if len(set(event_types)) == 1 else m.EV_BATCH
    return included, (event_type, ops, key)


def _settle(pending: _Pending, exc: BaseException | None = None) -> None:
    """Settle a plan's future (once) and wake its caller when it waits off the loop."""
    if not pending.future.done():
        if exc is None:
            pending.future.set_result(None)
        else:
            pending.future.set_exception(exc)
    parked = pending.parked
    if parked is not None and parked.locked():  # (settled on the loop's thread only)
        parked.release()


#: idle estimating compressors: one is taken for a ``compress`` and put back after it
_ESTIMATORS: list[Any] = []


def _estimate(blob: bytes) -> int:
    """The size of ``blob`` compressed with plain zstd at level 1.

    Plain zstd, also for a "zstd-dict" codec: the snapshot cadence (and so a cold
    read's replay) stays what it was; estimated with the dictionary, events ~2x
    smaller, a 200-turn chat was snapshotted every ~72 events instead of ~47
    (749,568 vs 856,064 bytes): a read-side trade, not made here. A zstandard
    compressor must not be used by two threads at once, and savers on different loops
    (or a sync saver run on its caller's thread) estimate at once (h/lgwrite2's
    finding): a caller takes an idle one from the list (``pop``, atomic under the GIL)
    and puts it back after. It was one a thread (a ``threading.local``), a new one on
    each of the threads LangGraph makes per ``invoke`` (docs/benchmarks.md, "lgturn")."""
    try:
        compressor = _ESTIMATORS.pop()
    except IndexError:  # none idle
        compressor = zstandard.ZstdCompressor(level=1)
    size = len(compressor.compress(blob))
    _ESTIMATORS.append(compressor)
    return size


#: snapshots may store up to this many times the bytes of the events between them: a
#: cold read replays half as many events as at 1, for more bytes (measured in
#: docs/benchmarks.md, "Cold reads after the snapshot and build changes")
_SNAPSHOT_SHARE = 2

#: a write's stored bytes are compressed for the estimate once every this many writes
#: of its kind on a thread (see ``_SaverCommits._event_cost``)
_RATIO_EVERY = 16


class _SaverCommits(_SaverStreams):
    """The saver's write queue and commits."""

    async def _append(
        self,
        st: _Stream,
        event_type: str,
        ops: builtins.list[Op],
        key: str | None = None,
        *,
        applied: bool = False,
        plain: bool = False,
        snapshot: bool = True,
    ) -> tuple[bool, dict[str, Any] | None]:
        """Compare-and-append ``ops`` at ``st.seq``; keep ``st`` current on success.
        Returns (committed by this call, the thread's document as the append left it).
        Not committed: an earlier attempt had landed (``st`` is stale, and forgotten);
        the document is the one it made when it landed right after ``st.seq`` (this
        very compare-and-append, its reply lost: its ops applied onto ``st.doc``), else
        the thread's document as read again (None: the thread is gone).

        ``applied``: ``st.doc`` already has the ops applied (a coalesced batch).
        ``plain``: the values of ``ops`` are plain JSON (see ``_Pending.plain``).
        ``snapshot``: then snapshot the thread if one is due (else the caller does,
        with :meth:`_snapshot_if_due`, once it has told the writes' callers).

        The document is never changed in place: the ops are applied copy-on-write, and
        on a plain store the result is handed to the store as its record's data (the
        ops are then applied once, not again by the store).
        """
        made, st.made = st.made, None
        if made is not None and (applied or made[0] is not ops):
            made = None
        # a checkpoint's plan made its document with it (see :mod:`.made`)
        after = st.doc if applied else made[1] if made is not None else m.apply_once(st.doc, ops)
        store = self.store
        fast = self._fast
        result = None
        seen: Seen | None = None
        blob = None  # the ops as JSON: for the snapshot estimate (and the lean append's body)
        if (
            fast is not None
            and fast.fast
            and store._gate.ok
            and not store._closed
            and "append" not in store.__dict__  # (an append wrapped by its owner: taken)
            # the store's record at st.seq is the stream the ops were planned on (its
            # head tag), not only its seq: a read in this process (get, snapshot,
            # settle) may have cached a stream another process deleted and made again
            # up to that seq — the checked append below refuses that one
            and (st.tag is None or store._tag_at(st.agent_id, st.seq) == st.tag)
        ):
            lean = fast.lean
            if lean is not None and plain:  # one call, one statement (store/lean.py)
                try:  # (encoded once: the append's body is made around it)
                    blob = orjson.dumps(ops)
                except TypeError:  # not JSON after all (nested past orjson's limit):
                    blob = None  # the lean append declines it, the store's append says why
                done = lean(st.agent_id, event_type, ops, st.seq, key, after, blob)
                if done is not None:
                    result = done if isinstance(done, AppendResult) else await done
            if result is None:
                result = await fast.append_applied(
                    st.agent_id, event_type, ops, st.seq, key, after, plain
                )
        if result is None:
            # at the identity of the stream the ops were planned on, not its seq alone:
            # after the cached head's conflict the store reads the head again, and a
            # stream deleted and made again up to the same seq by another process
            # passed — the ops applied onto its document (a checkpoint's values then
            # named that stream's pooled values: another process's data served as this
            # one's, without an error). Its head tag differs: the store refuses it (a
            # conflict: the plan is made again on a fresh read) and the engine compares
            # the tag in the append's own commit.
            seen = Seen(st.seq, None, st.tag)  # (None: no check; told the new tag)
            token = SEEN.set(seen)
            try:
                result = await store.append(
                    st.agent_id,
                    event_type,
                    None,
                    ops=ops,
                    expected_seq=st.seq,
                    idempotency_key=key,
                )
            finally:
                SEEN.reset(token)
        if result.duplicate:  # an earlier attempt landed: our document is stale
            self._forget(st.thread_id)
            # the landed event counts towards the thread's next snapshot, and the count
            # goes on in its next view (see ``_carry_count``); before, the snapshot check
            # ran on this dropped view without it, and the count was lost with the view
            # (a thread whose replies were often lost was never snapshotted)
            with contextlib.suppress(TypeError):  # (stored: never fails for the count)
                blob = orjson.dumps(ops) if blob is None else blob
                st.bytes_since += self._event_cost(st, event_type, blob)
            self._hand_count(st)
            # (before, the document before the ops: a run's claim riding on them, stored,
            # was not seen, and the run never renewed nor released it)
            if result.first_seq == st.seq + 1:
                return False, after
            # its key found elsewhere (after events this saver never read): the document
            # is read, and cached for the next write (which would read it anyway). Was
            # None: a claim it stored was not taken, never renewed nor released (the
            # thread refused to other processes after the run). Only on this rare answer
            try:
                opened = await self._open(st.thread_id, create=False, check=False)
            except Exception as exc:
                # the write is stored (its key found): it does not fail for the read
                # (it did). Its document unknown: a run claim it carried is released
                # at the run's end on a read of its own (``Run.unsure``)
                _log.warning(
                    "reading LangGraph thread %r after its write was found stored failed "
                    "(the write stands): %s: %s",
                    st.thread_id,
                    type(exc).__name__,
                    exc,
                )
                return False, None
            return False, None if opened is None else opened.doc
        if not applied:
            st.doc = after
            if made is not None:
                if made[2] is not None:
                    st.heads[made[2]] = made[3]
            else:
                _update_heads(st, ops)
        st.seq = seq = result.last_seq
        st.tag = store._tag_at(st.agent_id, seq)  # (the record just written: no read)
        if st.tag is None and seen is not None and not result.duplicate:
            st.tag = seen.adopted_tag  # (the store's cache did not keep it)
        if blob is None:
            blob = orjson.dumps(ops)
        st.bytes_since += self._event_cost(st, event_type, blob)
        if snapshot:
            await self._snapshot_if_due(st)
        return True, st.doc

    async def _snapshot_if_due(self, st: _Stream) -> None:
        """Snapshot the thread when the events since its last snapshot call for one.

        A snapshot only shortens a later cold read's replay: the events it follows are
        already committed (and their callers told so). Its failure (a backend error, a
        value its encoding refuses, a full disk) therefore fails no write: it is logged,
        and the snapshot is tried again once another ``snapshot_min_bytes`` of events
        were appended (a backend that keeps failing costs one attempt per that many
        bytes, not one per write). Before, the error failed the write whose checkpoint
        it had just committed, and every write that had shared its commit."""
        if st.bytes_since < max(self.snapshot_min_bytes, st.snap_retry):
            return
        if not st.snap_bytes:
            st.snap_bytes = self._stored(orjson.dumps(st.doc))
        if st.bytes_since * _SNAPSHOT_SHARE < st.snap_bytes:
            return
        try:
            await self.store.snapshot(st.agent_id)
        except Exception as exc:
            st.snap_retry = st.bytes_since + self.snapshot_min_bytes
            _log.warning(
                "snapshot of LangGraph thread %r failed (its checkpoints are stored; "
                "retried later): %s: %s",
                st.thread_id,
                type(exc).__name__,
                exc,
            )
            return
        st.snap_bytes = self._stored(orjson.dumps(st.doc))
        st.bytes_since = st.snap_retry = 0

    def _event_cost(self, st: _Stream, event_type: str, blob: bytes) -> int:
        """:meth:`_stored` of a write's event, compressed (for the estimate) only every
        ``_RATIO_EVERY`` writes of its kind on the thread: the others are estimated at
        the compression ratio last measured for that kind (a thread's checkpoints,
        writes and claims are each much alike), saving a compression per write."""
        codec = self.store.codec
        size = len(blob)
        if not codec.compression or size < codec.compress_min_bytes:
            return size
        known = st.ratios.get(event_type)
        if known is not None and known[1] < _RATIO_EVERY:
            known[1] += 1
            return int(size * known[0])
        stored = _estimate(blob)
        st.ratios[event_type] = [stored / size, 1]
        return stored

    def _stored(self, blob: bytes) -> int:
        """About the bytes the store keeps of a record holding ``blob`` (JSON): compressed
        when its codec compresses records that size (estimated with zstd level 1, a
        little larger than the codec's level 3). A snapshot is taken once the events
        since the last one stored 1/``_SNAPSHOT_SHARE`` of what it did (snapshots never
        hold more than that many times the events' bytes), so the better a thread's
        state compresses against its events, the more often it is snapshotted and the
        shorter a cold read's replay."""
        codec = self.store.codec
        if codec.compression and len(blob) >= codec.compress_min_bytes:
            return _estimate(blob)
        return len(blob)

    def _wake(self, thread_id: str) -> None:
        """Let the writes held on a thread go (into the batch being formed)."""
        for waiter in self._waiting.pop(thread_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def _hold(self, thread_id: str, mine: _Pending) -> None:
        """Wait (at most ``writes_wait``) until another write on the thread — the run's
        next checkpoint, its release — is queued to take ``mine`` into its commit."""
        queued = self._queued.get(thread_id) or []
        if any(p.event_type != m.EV_WRITES for p in queued if p is not mine):
            return  # a checkpoint is already waiting: join it
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(thread_id, []).append(waiter)
        try:
            await asyncio.wait((waiter, mine.future), timeout=self.writes_wait)
        finally:
            waiting = self._waiting.get(thread_id)
            if waiting is not None and waiter in waiting:
                waiting.remove(waiter)
                if not waiting:
                    del self._waiting[thread_id]

    async def _mutate(
        self,
        thread_id: str,
        build: Plan,
        event_type: str,
        *,
        create: bool = True,
        hold: bool = False,
        plain: bool = False,
    ) -> dict[str, Any] | None:
        """Build ops from the current document and append them, retrying on conflicts;
        the thread's document as the commit left it (see ``_Pending.doc``).

        Calls on one thread that arrive while another is committing are *coalesced*:
        the next lock holder builds every queued plan, one after the other against the
        document as the previous ones leave it, and appends them as one event (one
        commit). LangGraph saves a step's writes and the next checkpoint concurrently,
        so they usually share a commit. A batch holds at most one checkpoint, so the
        document at a checkpoint's seq is still exactly that checkpoint.

        ``hold``: a task's regular writes inside a run first wait for the run's next
        write to be queued (see ``writes_wait``), so that they share its commit.
        """
        loop = asyncio.get_running_loop()
        mine = _Pending(build, loop.create_future(), event_type, create, plain)
        queue = self._queued.setdefault(thread_id, [])
        queue.append(mine)
        if event_type != m.EV_WRITES or not hold:
            self._wake(thread_id)  # held writes join this batch now
        try:
            if hold and self.writes_wait > 0 and event_type == m.EV_WRITES:
                await self._hold(thread_id, mine)
            await self._drain(thread_id, mine)
        except asyncio.CancelledError:
            waiting = self._queued.get(thread_id)
            if waiting is not None and mine in waiting:  # not taken yet: never write it
                waiting.remove(mine)
            raise
        mine.future.result()
        return mine.doc

    async def _drain(self, thread_id: str, mine: _Pending) -> None:
        """Take the thread's lock and commit its queued writes, a batch at a time,
        until ``mine`` is settled (by this or by an earlier holder of the lock)."""
        # the thread's lock taken and released by hand, not through ``hold``'s
        # context manager (a generator and five more calls per write)
        locks = self._locks
        if not locks.try_acquire(thread_id):
            await locks.acquire(thread_id)
        try:
            while not mine.future.done():
                if thread_id in self._parked:
                    self._unpark(thread_id)
                queue = self._queued.get(thread_id) or []
                # a lone write (the usual case) is a batch of one
                batch, rest = (queue, []) if len(queue) == 1 else _take_batch(queue)
                self._queued[thread_id] = rest
                try:
                    await self._commit(thread_id, batch)
                except BaseException:
                    self._requeue(thread_id, batch, mine)
                    raise
            if not self._queued.get(thread_id):
                self._queued.pop(thread_id, None)
        finally:
            locks.release(thread_id)

    # -- parked writes: a sync ``put_writes`` waiting off the loop ---------------------
    #
    # A task's held writes (see ``writes_wait``) used to wait for the run's next
    # checkpoint *on the loop*: the ``put_writes`` caller's thread took the loop and
    # ran it for up to ``writes_wait``, so the ``put`` that LangGraph's step waits for,
    # made meanwhile on another thread, was handed to that thread and waited for (a
    # wake-up of each thread, on the step's critical path, and a loop pass and a task
    # for the held write). Parked, the held write is only a plan on a list: the
    # ``put``'s caller runs the loop on its own thread, takes the plan into its commit
    # and wakes the parked caller, which LangGraph does not wait for between steps.
    # The write is durable when ``put_writes`` returns, as before.

    def _park(self, thread_id: str, build: Plan, plain: bool) -> _Pending:
        """(On the caller's thread, off the loop.) Park a held write's plan until the
        thread's next commit takes it; its ``parked`` lock, held from here, is released
        once it is settled."""
        held = threading.Lock()
        held.acquire()
        mine = _Pending(build, self._portal.new_future(), m.EV_WRITES, True, plain, held)
        with self._parking:
            self._parked.setdefault(thread_id, []).append(mine)
        return mine

    def _unpark(self, thread_id: str) -> None:
        """(On the loop.) Queue the writes parked on the thread, ahead of what is
        queued: they were made before it (a step's writes, then its checkpoint)."""
        with self._parking:
            parked = self._parked.pop(thread_id, None)
        if parked:
            queue = self._queued.setdefault(thread_id, [])
            queue[:0] = parked

    def _requeue(self, thread_id: str, batch: builtins.list[_Pending], mine: _Pending) -> None:
        """(On the loop.) A commit that failed before it settled its batch (cancelled,
        or its stream could not be opened): the other plans in it, unsettled, go back
        where they came from (their callers' calls fail only with their own errors) —
        parked writes parked again, for the next commit or their caller's own (no
        caller waits for them on the loop), the rest ahead in the queue, for their
        callers' turn (before, their ``_drain`` found them nowhere and never ended)."""
        lost = [p for p in batch if p is not mine and not p.future.done()]
        parked = [p for p in lost if p.parked is not None]
        if parked:
            with self._parking:
                self._parked.setdefault(thread_id, [])[:0] = parked
        queued = [p for p in lost if p.parked is None]
        if queued:
            self._queued.setdefault(thread_id, [])[:0] = queued

    async def _commit_parked(self, thread_id: str, mine: _Pending) -> None:
        """(On the loop.) The parked write ``mine``, which nothing took within
        ``writes_wait`` (its caller unparked it): commit it now, with whatever else is
        queued."""
        self._queued.setdefault(thread_id, []).insert(0, mine)
        await self._drain(thread_id, mine)

    def _wait_parked(self, thread_id: str, mine: _Pending) -> None:
        """(On the caller's thread.) Return once the parked write ``mine`` is durable
        (or raise its error): committed by the thread's next write within
        ``writes_wait``, else by this caller. A write taken into a commit by then is
        waited for (that commit settles it): a caller whose thread was not scheduled
        for ``writes_wait`` commits nothing twice."""
        held = mine.parked
        assert held is not None
        while not held.acquire(timeout=self.writes_wait):
            with self._parking:
                parked = self._parked.get(thread_id) or []
                still = mine in parked
                if still:
                    parked.remove(mine)
                    if not parked:
                        del self._parked[thread_id]
            if still:
                self._portal.call(self._commit_parked(thread_id, mine))
                break
        mine.future.result()

    async def _commit(self, thread_id: str, batch: builtins.list[_Pending]) -> None:
        """Append the plans of ``batch`` as one event; settle each plan's future."""
        live = [p for p in batch if not p.future.done()]
        appended: _Stream | None = None
        dropped: _Stream | None = None  # (a view a "duplicate" answer dropped)
        doc: dict[str, Any] | None = None  # (the document the batch leaves)
        for _ in range(self.max_retries):
            if not live:
                return
            # no head read first: the compare-and-append below is the check
            create = live[0].create if len(live) == 1 else any(p.create for p in live)
            st = await self._open(thread_id, create=create, check=False)
            if st is None:  # no stream, and none of the plans may create one
                doc = None
                break
            # several plans: each is applied to the document as it is built (the next
            # is built on its outcome), so the append must not apply them again, even
            # when all but one of them failed
            speculative = len(live) > 1
            live, plan = _build(st, live) if speculative else _build_one(st, live)
            if plan is None:
                doc = st.doc
                break
            event_type, ops, key = plan
            # plain JSON: the plans said so, and so is a run claim riding on them
            plain = all(p.plain for p in live) and _plain_claims(ops)
            try:
                committed, doc = await self._append(
                    st, event_type, ops, key, applied=speculative, plain=plain, snapshot=False
                )
                if committed:
                    self._wrote(st)
                    appended = st
                else:  # (a duplicate: its count goes on to the thread's next view)
                    appended = self._streams.get(thread_id)
                    if appended is None:
                        appended = dropped = st
                break
            except (ConflictError, AgentNotFound):
                # the document was stale (another writer, or the thread deleted or
                # moved meanwhile) or holds speculative changes: plan again on a read
                self._forget(thread_id)
            except SerializationError as exc:
                self._forget(thread_id)
                if len(live) > 1:
                    # one plan's value cannot be stored: commit each plan alone, so
                    # that only its call fails, not the others that shared its event
                    for pending in live:
                        await self._commit(thread_id, [pending])
                    return
                _settle(live[0], exc)
                return
            except BaseException as exc:
                self._forget(thread_id)
                for pending in live:
                    _settle(pending, exc)
                return
        else:
            error = ConflictError(m.agent_id(self.prefix, thread_id), -1, -1)
            for pending in live:
                _settle(pending, error)
            return
        for pending in live:
            pending.doc = doc
            _settle(pending)
        # committed and settled: a snapshot (or its failure, or a cancellation while it
        # is taken) can no longer fail, requeue or repeat any of these writes
        if appended is not None:
            await self._snapshot_if_due(appended)
            if dropped is not None and thread_id not in self._streams:
                self._hand_count(dropped)  # (its count as the check left it)
