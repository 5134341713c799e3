"""Durability modes: how an append travels from ``save()`` to the backend.

``sync``
    Each append is committed on its own before the call returns. RPO = 0.
``group``
    Appends that arrive while a commit is in flight wait and then share the next
    commit (one ``append_batch``). Each call still returns only after *its* commit,
    so RPO = 0; throughput rises with concurrency because one fsync serves many.
``async``
    Write-behind: the call returns once the append is buffered in memory; the buffer
    is flushed when it holds ``flush_size`` appends or ``flush_interval`` seconds after
    the oldest buffered append, whichever comes first. A crash loses at most the
    unflushed buffer: at most ``flush_size`` appends, none older than
    ``flush_interval`` seconds (plus the time one flush takes). Flush failures are
    kept and raised as :class:`~statekeeper.errors.WriteBufferError` by the next
    :meth:`WriteBehind.flush` (and so by ``StateStore.flush()``/``close()``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal

from ..backends.base import Backend
from ..errors import ConfigurationError, WriteBufferError
from ..records import AppendRequest, AppendResult

__all__ = ["Durability", "GroupCommitter", "WriteBehind", "check_durability"]

logger = logging.getLogger("statekeeper.store")

Durability = Literal["sync", "group", "async"]


def check_durability(mode: str) -> Durability:
    """Validate a durability mode name."""
    if mode not in ("sync", "group", "async"):
        raise ConfigurationError(f"durability must be 'sync', 'group' or 'async', not {mode!r}")
    return mode  # type: ignore[return-value]


class GroupCommitter:
    """Batches concurrent appends into shared commits (``group`` mode)."""

    def __init__(self, backend: Backend, max_batch: int = 512) -> None:
        self._backend = backend
        self._max_batch = max_batch
        self._pending: list[tuple[AppendRequest, asyncio.Future[AppendResult]]] = []
        self._runner: asyncio.Task[None] | None = None
        self.commits = 0
        self.appends = 0

    async def submit(self, request: AppendRequest) -> AppendResult:
        """Append ``request`` in the next shared commit and wait for that commit."""
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            try:
                results = await self._backend.append_batch([req for req, _ in batch])
            except BaseException as exc:  # the whole commit failed: every caller learns it
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            self.commits += 1
            self.appends += len(batch)
            for (_, fut), result in zip(batch, results, strict=True):
                if fut.done():  # caller was cancelled; the append itself stands
                    continue
                if isinstance(result, BaseException):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)

    async def drain(self) -> None:
        """Wait until every submitted append has been committed or failed."""
        while self._runner is not None and not self._runner.done():
            await asyncio.shield(self._runner)


class WriteBehind:
    """Buffers appends and flushes them by size and by interval (``async`` mode).

    ``on_stale(agent_id)`` is called when a buffered append could not be stored, or
    turned out to be a duplicate, so the store drops its now-wrong cached state.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        flush_size: int,
        flush_interval: float,
        on_stale: Callable[[str], None],
    ) -> None:
        if flush_size < 1 or flush_interval <= 0:
            raise ConfigurationError("flush_size must be >= 1 and flush_interval > 0")
        self._backend = backend
        self.flush_size = flush_size
        self.flush_interval = flush_interval
        self._on_stale = on_stale
        self._buffer: list[AppendRequest] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._failures: dict[str, BaseException] = {}
        self.flushes = 0
        self.flushed = 0

    def __len__(self) -> int:
        return len(self._buffer)

    def add(self, request: AppendRequest) -> None:
        """Buffer one append; schedules or triggers a flush as needed."""
        self._buffer.append(request)
        if len(self._buffer) >= self.flush_size:
            self._start_flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.flush_interval, self._start_flush)

    def _start_flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush_all())

    async def _flush_all(self) -> None:
        while self._buffer:
            batch, self._buffer = self._buffer, []
            await self._write(batch)

    async def _write(self, batch: list[AppendRequest]) -> None:
        failed: set[str] = set()
        try:
            results: list[AppendResult | BaseException] = await self._backend.append_batch(batch)
        except Exception as exc:
            results = [exc] * len(batch)
        self.flushes += 1
        for request, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                agent_id = request.agent_id
                if agent_id not in failed:  # later appends of that agent fail as a consequence
                    logger.error(
                        "write-behind flush failed for agent %r at seq %d: %s",
                        agent_id,
                        request.expected_seq + 1,
                        result,
                    )
                    self._failures.setdefault(agent_id, result)
                    self._on_stale(agent_id)
                failed.add(agent_id)
            else:
                self.flushed += 1
                if result.duplicate:
                    self._on_stale(request.agent_id)

    async def flush(self) -> None:
        """Write everything buffered now; raise ``WriteBufferError`` for failures so far."""
        self._start_flush()
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        # A flush started by the timer may have finished with new data buffered since.
        if self._buffer:
            await self._flush_all()
        if self._failures:
            failures, self._failures = self._failures, {}
            raise WriteBufferError(failures)

    def cancel_timer(self) -> None:
        """Stop the interval timer (used on close, after a final flush)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
