"""Durability modes: how an append travels from ``save()`` to the backend.

The group committer is in group_commit.py, the write-behind buffer's coalescing and
unflushed warning in coalescing.py and unflushed.py.

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
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ..backends.base import Backend
from ..errors import ConfigurationError, WriteBufferError
from ..records import AppendRequest, AppendResult
from . import unflushed
from .coalescing import merge, mergeable
from .group_commit import BatchAuditor, GroupCommitter

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


#: the name of a write-behind buffer's guard task (see ``WriteBehind._guard_run``): it
#: only waits — for the buffer's flush, or its loop's shutdown — and needs no one to
#: run the loop for it (``store.shared_loop`` does not poll for it)
GUARD = "statekeeper-write-behind"

#: the longest a loop's shutdown waits for the tasks its flush of the buffer started
_SHUTDOWN_WAIT = 10.0


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
