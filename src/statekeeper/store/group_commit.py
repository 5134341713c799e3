"""The group committer (``group`` durability): concurrent appends share commits.

Part of :mod:`statekeeper.store.durability` (which re-exports :class:`GroupCommitter`
and :class:`BatchAuditor`; see it for what each durability mode guarantees).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Sequence
from typing import Any, Protocol

from ..backends.base import Backend, NextRow, next_request
from ..errors import BackendError
from ..records import AppendRequest, AppendResult


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
