"""Durability modes: how an append travels from ``save()`` to the backend.

Over 600 lines because the write-behind buffer's flush, its guard and its loop
hand-overs share its state (split: coalescing.py, unflushed.py).

``sync``
    Each append is committed on its own before the call returns. RPO = 0.
``group``
    Appends that arrive while a commit is in flight wait and then share the next
    commit (one ``append_batch``). Each call still returns only after *its* commit,
    so RPO = 0; throughput rises with concurrency because one fsync serves many.
``async``
    Write-behind: the call returns once the append is buffered in memory; the buffer
    is flushed when it holds ``flush_size`` appends or ``flush_interval`` seconds after
    the oldest buffered append, whichever comes first; the write that fills the
    buffer waits for that flush (back-pressure). A crash loses at most the unflushed
    buffer: fewer than ``flush_size`` appends, none older than ``flush_interval``
    seconds (plus the time one flush takes) unless the event loop is blocked. Flush
    failures are kept and raised as :class:`~statekeeper.errors.WriteBufferError` by
    the next :meth:`WriteBehind.flush` (and so by ``StateStore.flush()``/``close()``);
    the failed agent's later buffered appends are dropped with it, never stored on
    top of a state they were not computed from. A store left unclosed when
    ``asyncio.run`` ends flushes its buffer then (see :meth:`WriteBehind._guard_run`);
    one collected with appends still buffered warns
    (:class:`~statekeeper.errors.UnflushedWritesWarning`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, Literal, Protocol

from ..backends.base import Backend, NextRow, next_request
from ..errors import BackendError, ConfigurationError, WriteBufferError
from ..records import AppendRequest, AppendResult
from . import unflushed
from .coalescing import merge, mergeable

__all__ = [
    "GUARD",
    "BatchAuditor",
    "Durability",
    "GroupCommitter",
    "WriteBehind",
    "check_durability",
]

logger = logging.getLogger("statekeeper.store")

Durability = Literal["sync", "group", "async"]


def check_durability(mode: str) -> Durability:
    """Validate a durability mode name."""
    if mode not in ("sync", "group", "async"):
        raise ConfigurationError(f"durability must be 'sync', 'group' or 'async', not {mode!r}")
    return mode  # type: ignore[return-value]


class BatchAuditor(Protocol):
    """Commits a batch of appends with their audit entries (a governed store,
    :mod:`.governed`): the group committer's batches and the write-behind flushes go
    through it, so each batch's entries are in the batch's commit."""

    def label(self, request: AppendRequest) -> list[Any] | None:
        """The entries of ``request``, taken when it is queued (None: it has none)."""

    async def commit(
        self, requests: Sequence[AppendRequest], labels: Sequence[Sequence[Any]]
    ) -> list[AppendResult | BaseException]:
        """Like ``Backend.append_batch``, each request with the entries ``labels[i]``."""


class _Done:
    """An awaitable already done, giving None (an append committed before it was
    awaited): awaiting it does not suspend the task."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # (a generator that ends at once: ``await`` gets None without suspending)


_DONE = _Done()

#: the name of a write-behind buffer's guard task (see ``WriteBehind._guard_run``): it
#: only waits — for the buffer's flush, or its loop's shutdown — and needs no one to
#: run the loop for it (``integrations.langgraph.loop`` does not poll for it)
GUARD = "statekeeper-write-behind"

#: the longest a loop's shutdown waits for the tasks its flush of the buffer started
_SHUTDOWN_WAIT = 10.0

#: an append waiting for a group commit: the request, its audit entries, its caller's future
_Queued = tuple[AppendRequest, list[Any] | None, "asyncio.Future[AppendResult]"]


class GroupCommitter:
    """Batches concurrent appends into shared commits (``group`` mode).

    An engine that batches concurrent appends by itself (``groups_appends``: SQLite's
    commit queue, one commit in flight and the next one filling up) is handed each
    append directly — a second queue in front of it would only add a future, a task
    switch and a batch call per save; its commits are then counted by the engine
    (``append_commits``, every store on it included)."""

    def __init__(
        self, backend: Backend, max_batch: int = 512, in_flight: int | None = None
    ) -> None:
        self._backend = backend
        self._max_batch = max_batch
        #: how many batches may be committing at once (``Backend.batches_in_flight``
        #: unless given): more than one lets an engine whose commits run on separate
        #: connections (PostgreSQL's pool) overlap one batch's WAL flush with the next
        #: batch's statements instead of queueing every save behind the flush in flight
        self.in_flight = max(1, in_flight if in_flight is not None else backend.batches_in_flight)
        self._pending: list[_Queued] = []
        #: a governed store: each batch is committed with its audit entries
        self.auditor: BatchAuditor | None = None
        self._batches: dict[asyncio.Task[None], int] = {}  # in flight: their sizes
        #: the fewest appends a batch started beside one in flight holds
        self.min_beside = 2
        # agents with an append in a batch in flight: their next append waits for that
        # batch (a later save of an agent never commits before, or beside, an earlier one)
        self._busy: set[str] = set()
        self._commits = 0
        self._engine_base: int = getattr(backend, "append_commits", 0)
        self.appends = 0
        #: the most batches that were committing at once (a counter for tests, benchmarks)
        self.most_in_flight = 0

    @property
    def commits(self) -> int:
        """Shared commits made so far (a batch that stored nothing is none)."""
        engine: int | None = getattr(self._backend, "append_commits", None)
        if engine is None or not self._backend.groups_appends or self.auditor is not None:
            return self._commits
        return self._commits + engine - self._engine_base

    async def submit(self, request: AppendRequest) -> AppendResult:
        """Append ``request`` in the next shared commit and wait for that commit."""
        backend = self._backend
        auditor = self.auditor
        label = None
        if auditor is not None:
            label = auditor.label(request)  # the engine's queue would not take entries
        elif backend.groups_appends:
            self.appends += 1
            return await backend.append(request)
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._pending.append((request, label, future))
        self._start_batches()
        return await future

    def join_next(self, row: NextRow) -> Awaitable[BaseException | None]:
        """:meth:`submit_next` as a plain call: the awaitable of the append's commit,
        which gives None or the refusal to raise (see :meth:`Backend.join_next`). An
        engine that batches appends by itself and has a commit open is handed ``row``
        there without a coroutine (16 agents: the common case). With no commit open,
        such an engine is asked to commit ``row`` alone now (``Backend.commit_next``,
        as a ``sync`` save is: no other task ready, nothing in flight — nobody to share
        the commit with); then the awaitable is already done, and a refusal is raised
        here. Only when neither, the append goes through :meth:`submit_next`.

        Why: a group of one is the lone commit either way, but it was reached through
        the coroutines of :meth:`submit_next`, ``append_next`` and ``_open_commit``
        (docs/benchmarks.md, "group: issue 11 (and 12)")."""
        backend = self._backend
        if self.auditor is None and backend.groups_appends:
            joined = backend.join_next(row)
            if joined is not None:
                self.appends += 1
                return joined
            if backend.commit_next(row):
                self.appends += 1
                return _DONE
        return self._submitted(row)

    async def _submitted(self, row: NextRow) -> None:
        await self.submit_next(row)

    async def submit_next(self, row: NextRow) -> None:
        """:meth:`submit` of ``Backend.append_next``'s arguments (one patch event on the
        head at ``seq - 1``): handed as they are to an engine that batches appends by
        itself, else as a request in the next shared commit."""
        backend = self._backend
        if self.auditor is None and backend.groups_appends:
            self.appends += 1
            await backend.append_next(*row)
            return
        await self.submit(next_request(row))

    def _start_batches(self) -> None:
        """Start batches of the pending appends while fewer than :attr:`in_flight` are
        committing. An append of an agent that has one in a batch in flight stays
        pending (and so do the agent's later ones: order is kept per agent) until that
        batch is settled; two appends of one agent still share a batch when they are
        pending together, in their order, as with one batch in flight."""
        while self._pending and len(self._batches) < self.in_flight:
            busy = self._busy
            batch: list[_Queued] = []
            rest: list[_Queued] = []
            held: set[str] = set()
            for item in self._pending:
                if item[2].done():  # its caller was cancelled before it was sent: dropped
                    continue
                agent_id = item[0].agent_id
                if len(batch) >= self._max_batch or agent_id in busy or agent_id in held:
                    held.add(agent_id)
                    rest.append(item)
                else:
                    batch.append(item)
            if not batch:
                self._pending = rest
                return  # every pending append waits for its agent's batch in flight
            if self._batches and len(batch) < max(self.min_beside, min(self._batches.values())):
                # a batch beside one in flight only once it is as full as that one: a
                # commit per arrival would cost more statements (and CPU) than it saves
                return
            self._pending = rest
            busy.update(item[0].agent_id for item in batch)
            task = asyncio.get_running_loop().create_task(self._commit(batch))
            self._batches[task] = len(batch)
            self.most_in_flight = max(self.most_in_flight, len(self._batches))

    async def _commit(self, batch: list[_Queued]) -> None:
        task = asyncio.current_task()  # (taken now: a task closed unfinished has no loop)
        try:
            await self._commit_batch(batch)
        finally:
            self._busy.difference_update(item[0].agent_id for item in batch)
            self._batches.pop(task, None)  # type: ignore[arg-type]
            # also after a cancellation: the appends pending behind this batch (its
            # agents' next ones, or any beyond ``in_flight``) have callers waiting, and
            # nobody else would start them until the next submit
            self._start_batches()

    async def _commit_batch(self, batch: list[_Queued]) -> None:
        try:
            requests = [req for req, _, _ in batch]
            auditor = self.auditor
            if auditor is not None and any(label for _, label, _ in batch):
                results = await auditor.commit(requests, [label or [] for _, label, _ in batch])
            else:
                results = await self._backend.append_batch(requests)
        except BaseException as exc:  # the whole commit failed: every caller learns it
            error: BaseException = exc
            if not isinstance(exc, Exception):
                # the commit was interrupted (this task cancelled): it may have been
                # applied. Its callers were not cancelled, so they get an error that
                # says so, not a CancelledError of their own (their stores drop the
                # agents' cached state, and a load tells what was stored)
                error = BackendError(
                    f"a group commit of {len(batch)} appends was interrupted "
                    f"({type(exc).__name__}): whether it was applied is unknown",
                    maybe_applied=True,
                )
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_exception(error)
            if error is not exc:
                raise
            return
        # counted by what the batch did, not by its call: a batch whose every append was
        # refused (or was a duplicate of one stored before) committed nothing (counted in
        # the loop that hands the results over: a second pass cost ~900 instructions a
        # save, benchmarks/bench_left2_callgrind.py)
        refused = duplicates = 0
        for (_, _, fut), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                refused += 1
                if not fut.done():  # (a caller cancelled: the append itself stands)
                    fut.set_exception(result)
                continue
            if result.duplicate:
                duplicates += 1
            if not fut.done():
                fut.set_result(result)
        answered = len(batch) - refused
        self.appends += answered
        self._commits += answered > duplicates

    async def drain(self) -> None:
        """Wait until every submitted append has been committed or failed."""
        while self._batches:
            batch = next(iter(self._batches))
            try:
                await asyncio.shield(batch)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not batch.cancelled() or (task is not None and task.cancelling()):
                    raise  # this wait was cancelled
                # the batch was interrupted (its callers were told): not this wait


class WriteBehind:
    """Buffers appends and flushes them by size and by interval (``async`` mode).

    ``on_stale(agent_id)`` is called when a buffered append could not be stored, or
    turned out to be a duplicate, so the store drops its now-wrong cached state;
    ``on_flushed(agent_id, seq)`` when an append is durable. ``confirm(request,
    result)``, when given, checks an append the backend reported as a duplicate; if it
    raises, the append counts as failed.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        flush_size: int,
        flush_interval: float,
        on_stale: Callable[[str], None],
        on_flushed: Callable[[str, int], None],
        confirm: Callable[[AppendRequest, AppendResult], Awaitable[None]] | None = None,
    ) -> None:
        if flush_size < 1 or flush_interval <= 0:
            raise ConfigurationError("flush_size must be >= 1 and flush_interval > 0")
        self._backend = backend
        self.flush_size = flush_size
        self.flush_interval = flush_interval
        self._on_stale = on_stale
        self._on_flushed = on_flushed
        self._confirm = confirm
        #: called as ``on_lost(agent_id, error)`` when a buffered append of the agent
        #: could not be stored (the store tells the agent objects holding it)
        self.on_lost: Callable[[str, BaseException], None] | None = None
        self._buffer: list[AppendRequest] = []
        #: a copy of this buffer in a forked child is the parent's, which writes it
        self._pid = os.getpid()
        self._in_flight: list[AppendRequest] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._failures: dict[str, BaseException] = {}
        self._dead: list[asyncio.Task[None]] = []  # flushes a closed loop cut short
        self._cut: list[AppendRequest] = []  # their batches, maybe stored
        #: a governed store: each flush is committed with the buffered appends' audit
        #: entries (taken when they were buffered), by id of the buffered request
        self.auditor: BatchAuditor | None = None
        self._labels: dict[int, list[Any]] = {}
        self.flushes = 0  # flushes that committed (one wholly failed is none)
        self.flushed = 0
        self.stored = self.lost = 0  # buffered appends stored, and dropped by a failed flush
        #: while appends are buffered: a task that flushes them if it is cancelled —
        #: what ``asyncio.run`` does to the tasks left when its coroutine returns —
        #: and ends once the buffer is empty (see :meth:`_guard_run`)
        self._guard: asyncio.Task[None] | None = None
        #: while the buffer is written out at the loop's end: events lost, by agent
        self._lost: dict[str, int] | None = None
        self._emptied: asyncio.Future[None] | None = None
        #: awaited after the flush of a loop's shutdown (the store's witness flush)
        self.at_shutdown: Callable[[], Awaitable[None]] | None = None

    def __len__(self) -> int:
        """Appends acknowledged but not yet stored (buffered or being written)."""
        return len(self._buffer) + len(self._in_flight)

    async def add(self, request: AppendRequest) -> None:
        """Buffer one append; schedules or triggers a flush as needed.

        Back-pressure keeps the documented loss bound: once ``flush_size`` appends are
        buffered or being written, the caller waits for the flush, so fewer than
        ``flush_size`` acknowledged appends are ever not yet stored — also in a loop
        that never yields to the event loop on its own.
        """
        self._buffer.append(request)
        if self._guard is None:
            self._watch()
        elif self._guard.get_loop().is_closed():
            self._rewatch()
        if self.auditor is not None:
            label = self.auditor.label(request)
            if label:
                self._labels[id(request)] = label
        if len(self) >= self.flush_size:
            self._start_flush()
            assert self._flushing is not None
            await asyncio.shield(self._flushing)
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.flush_interval, self._start_flush)

    # -- the loop's shutdown ---------------------------------------------------------------

    def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        self._emptied = emptied = loop.create_future()
        self._guard = loop.create_task(self._guard_run(emptied), name=GUARD)

    def _rewatch(self) -> None:
        """The buffer's guard and timer are a loop's closed without ``asyncio.run``
        (a worker's loop per job): both start again on this one. Was: no flush by
        interval ever again, appends unstored until ``flush_size`` of them."""
        guard, self._guard, self._emptied = self._guard, None, None
        if guard is not None:
            guard._log_destroy_pending = False  # type: ignore[attr-defined]  # (never runs)
        self._timer = None  # (its loop is closed: it never fires)
        self._watch()

    def _settle_guard(self) -> None:
        """The buffer is empty: the guard ends (a later append starts another)."""
        guard, emptied, self._emptied, self._guard = self._guard, self._emptied, None, None
        if emptied is not None and not emptied.done():
            if not emptied.get_loop().is_closed():
                emptied.set_result(None)
            elif guard is not None:  # (flushed from another loop: the guard never runs)
                guard._log_destroy_pending = False  # type: ignore[attr-defined]

    async def _guard_run(self, emptied: asyncio.Future[None]) -> None:
        """Wait until the buffer is empty; if cancelled before, flush it first.

        ``asyncio.run`` (and ``asyncio.Runner``) cancels the tasks left when its
        coroutine returns and waits for them, before it stops the default executor and
        closes the loop: an application that never closed (or flushed) its store —
        a LangGraph saver of ``afrom_url`` it forgot to ``aclose`` — had its buffered
        appends dropped without a word. This task is one of those cancelled: it writes
        them then (and the witness's marks of them), on the loop they were made on."""
        try:
            await emptied
        except asyncio.CancelledError:
            if emptied.done() and not emptied.cancelled():
                raise  # emptied just before the cancellation: nothing to write
            with contextlib.suppress(Exception):  # failures are logged and kept
                await self._write_out()
            raise

    async def _write_out(self) -> None:
        """Flush at the loop's shutdown (see :meth:`_guard_run`), keeping the failures
        for the next :meth:`flush` to raise."""
        self.cancel_timer()
        in_flight = self._flushing
        if in_flight is not None and not in_flight.done():
            # cancelled with this task (its batch is reported by ``_write``): not this
            with contextlib.suppress(asyncio.CancelledError):
                await in_flight
        before = asyncio.all_tasks()
        lost: dict[str, int] = {}
        self._lost = lost
        try:
            while self._buffer:
                self._start_flush()
                assert self._flushing is not None
                await self._flushing
            if self.at_shutdown is not None:
                await self.at_shutdown()
        finally:
            self._lost = None
            if lost:
                unflushed.lost_at_loop_end(lost)
            # what the writes started (a PostgreSQL NOTIFY to the feed's readers) ends
            # before the loop closes: asyncio.run cancelled only the tasks it found
            started = asyncio.all_tasks() - before - {asyncio.current_task()}
            if started:
                await asyncio.wait(started, timeout=_SHUTDOWN_WAIT)

    def __del__(self) -> None:
        # a store collected (or its loop closed) with appends it acknowledged but never
        # stored: they are lost, and that is never silent
        pending = (*self._buffer, *self._in_flight, *self._cut)
        if pending and os.getpid() == self._pid:  # (a fork's copy: the parent's writes)
            unflushed.dropped(pending)

    def find_key(self, agent_id: str, key: str) -> AppendResult | None:
        """The buffered (or in-flight) append of ``agent_id`` that used ``key``, if any."""
        for request in (*self._in_flight, *self._buffer):
            if request.agent_id == agent_id and request.idempotency_key == key:
                first, last = request.events[0].seq, request.events[-1].seq
                return AppendResult(agent_id, first, last, duplicate=True)
        return None

    def _start_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        flushing = self._flushing
        if flushing is not None and not flushing.done() and flushing.get_loop().is_closed():
            # a flush its loop, closed since, never ends (awaited: 'attached to a
            # different loop' at close(), every buffered append lost): made again here
            flushing._log_destroy_pending = False  # type: ignore[attr-defined]
            if _unstarted(flushing):
                flushing.get_coro().close()  # (nothing taken from the buffer)
            else:  # its batch taken, maybe stored: checked by the flush, the rest written
                self._dead.append(flushing)  # (its 'finally' must not run: kept)
                self._cut.extend(self._in_flight)
                self._in_flight = []
            flushing = self._flushing = None
        if flushing is None or flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush_all())

    async def _flush_all(self) -> None:
        while self._buffer:
            batch, self._buffer = self._buffer, []
            self._in_flight = batch
            try:
                await self._write(batch)
            except asyncio.CancelledError:
                unflushed.interrupted(batch)
                raise
            finally:
                self._in_flight = []
        self._settle_guard()

    async def _write(self, batch: list[AppendRequest]) -> None:
        # An agent's buffered appends form a chain: each expects the seq the previous
        # one lands on. A link must never be stored after an earlier link failed — its
        # expected seq may still match the head (another writer took that seq) and its
        # patch would land on a state it was not computed from. So each chain is sent
        # link by link (one shared append_batch per round), keyless runs merged into
        # one atomic append, and a failed link drops the rest of its chain.
        chains: dict[str, list[AppendRequest]] = {}
        weights: dict[int, int] = {}  # buffered appends a merged one stands for, by id
        for request in batch:
            links = chains.setdefault(request.agent_id, [])
            if links and mergeable(links[-1], request):
                merged = merge(links[-1], request)
                weights[id(merged)] = weights.pop(id(links[-1]), 1) + weights.pop(id(request), 1)
                if self._labels:  # the merged append carries both appends' entries
                    labels = self._labels.pop(id(links[-1]), []) + self._labels.pop(id(request), [])
                    if labels:
                        self._labels[id(merged)] = labels
                links[-1] = merged
            else:
                links.append(request)
        while chains:
            heads = [links.pop(0) for links in chains.values()]
            try:
                labels = [self._labels.pop(id(r), []) for r in heads] if self._labels else []
                if self.auditor is not None and any(labels):
                    results: list[AppendResult | BaseException] = await self.auditor.commit(
                        heads, labels
                    )
                else:
                    results = await self._backend.append_batch(heads)
            except Exception as exc:
                results = [exc] * len(heads)
            if any(isinstance(r, AppendResult) for r in results):  # committed: counted
                self.flushes += 1
            if self._confirm is not None:  # a duplicate is checked like any other
                for i, (request, result) in enumerate(zip(heads, results, strict=True)):
                    if isinstance(result, AppendResult) and result.duplicate:
                        try:
                            await self._confirm(request, result)
                        except Exception as exc:
                            results[i] = exc
            for request, result in zip(heads, results, strict=True):
                agent_id = request.agent_id
                if isinstance(result, BaseException):
                    # appends of the agent buffered while this flush was in flight were
                    # built on the failed one too: they go with it
                    later = [r for r in self._buffer if r.agent_id == agent_id]
                    if later:
                        self._buffer = [r for r in self._buffer if r.agent_id != agent_id]
                    for dropped_request in (*chains[agent_id], *later):
                        self._labels.pop(id(dropped_request), None)
                    dropped = sum(len(r.events) for r in (*chains[agent_id], *later))
                    lost = (request, *chains[agent_id])
                    self.lost += len(later) + sum(weights.get(id(r), 1) for r in lost)
                    logger.error(
                        "write-behind flush failed for agent %r at seq %d (%d later "
                        "buffered appends of it dropped): %s",
                        agent_id,
                        request.expected_seq + 1,
                        dropped,
                        result,
                    )
                    self._failures.setdefault(agent_id, result)
                    if self._lost is not None:  # (the loop's end: nobody flushes again)
                        self._lost[agent_id] = (
                            self._lost.get(agent_id, 0) + dropped + len(request.events)
                        )
                    self._on_stale(agent_id)
                    if self.on_lost is not None:
                        self.on_lost(agent_id, result)
                    del chains[agent_id]
                    continue
                self.flushed += len(request.events)
                if result.duplicate:
                    self._on_stale(agent_id)
                else:
                    self.stored += weights.get(id(request), 1)
                    self._on_flushed(agent_id, result.last_seq)
            chains = {agent_id: links for agent_id, links in chains.items() if links}

    async def flush(self, *, report: bool = True) -> None:
        """Write everything buffered now; raise ``WriteBufferError`` for failures so far
        (``report=False``: kept for the next flush that reports — a background write's
        flush, whose caller is not the one who saved)."""
        while True:
            self._start_flush()
            assert self._flushing is not None
            await asyncio.shield(self._flushing)
            # more may have been buffered after that flush task took its last batch
            if not self._buffer:
                break
        if not report:
            return
        if self._cut:
            await self._check_cut()
        if self._failures:
            failures, self._failures = self._failures, {}
            raise WriteBufferError(failures)

    async def _check_cut(self) -> None:
        """The appends of a flush its closed loop cut short not stored: failures."""
        cut, self._cut = self._cut, []
        lost = []
        for request in cut:
            last = request.events[-1]
            rows = await self._backend.read(request.agent_id, last.seq - 1, last.seq)
            if not rows or rows[0].seq != last.seq or rows[0].checksum != last.checksum:
                lost.append(request)
        self._failures = {**unflushed.cut_short(lost), **self._failures} if lost else self._failures

    def cancel_timer(self) -> None:
        """Stop the interval timer (used on close, after a final flush)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _unstarted(task: asyncio.Task[None]) -> bool:
    state = inspect.getcoroutinestate(task.get_coro())  # type: ignore[arg-type]
    return state == inspect.CORO_CREATED
