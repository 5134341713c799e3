"""Riding out lost connections, for the server backends (PostgreSQL, Redis): one
implementation of retrying an operation and of settling an append whose outcome is
unknown, parameterised by what differs between the engines (their error types, what
counts as transient, how a permanent failure is reported)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import BackendError, StoreClosed
from ..records import AppendRequest, AppendResult

__all__ = ["EXIT_RETRY", "Reconnecting", "exiting", "process_exiting"]

T = TypeVar("T")

_FIRST_DELAY = 0.02  # seconds; doubled after each failed try, up to _MAX_DELAY
_MAX_DELAY = 1.0


#: the longest an operation retries once the interpreter is exiting (see :func:`exiting`)
EXIT_RETRY = 10.0

_exit = {"exiting": False}


def process_exiting() -> None:
    """The interpreter is exiting (the sync facades' exit hook says so before it
    flushes the stores left open, :mod:`statekeeper.store.sync_exit`): from now on an
    operation retries for at most :data:`EXIT_RETRY` seconds — nobody waits a whole
    ``retry_timeout`` for a process that is ending."""
    _exit["exiting"] = True


def exiting() -> bool:
    """Whether :func:`process_exiting` was called."""
    return _exit["exiting"]


async def _nothing() -> None:
    return None


def _check_cancelled(what: str, exc: BaseException) -> None:
    """Raise :class:`asyncio.CancelledError` when the running task is being cancelled
    (see :meth:`Reconnecting._final`)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError(f"{what} cancelled") from exc


@dataclass(frozen=True, slots=True)
class Reconnecting:
    """How one backend retries across lost connections.

    Only ``transient`` failures of the driver (``errors``) are retried, until
    ``timeout`` seconds have passed; any other failure is turned into the engine's own
    error by ``reject(what, exc)`` at once. Before each try ``prepare`` runs (e.g. open
    the backend), after each failed one ``before_retry`` (e.g. test the pool's idle
    connections), then a pause growing from 20 ms to 1 s. One warning is logged per
    operation, not per try.
    """

    engine: str
    timeout: Callable[[], float]
    errors: tuple[type[BaseException], ...]
    transient: Callable[[BaseException], bool]
    reason: Callable[[BaseException], str]
    reject: Callable[[str, BaseException], BaseException]
    is_closed: Callable[[], bool]
    check_open: Callable[[], None]
    logger: logging.Logger
    prepare: Callable[[], Awaitable[None]] = _nothing
    before_retry: Callable[[], Awaitable[None]] = _nothing
    #: a failure that proves the request never reached the server (a pool timeout)
    unsent: Callable[[BaseException], bool] = lambda exc: False

    def budget(self) -> float:
        """How long an operation retries: ``timeout()``, at most :data:`EXIT_RETRY`
        once the interpreter is exiting."""
        timeout = self.timeout()
        return min(timeout, EXIT_RETRY) if _exit["exiting"] else timeout

    def _final(self, what: str, exc: BaseException, during: str) -> None:
        """Raise what ends the retries of ``what`` on ``exc``: the task was cancelled,
        the backend was closed (during ``during``), or a failure that is not transient.

        A driver error met while the task is being cancelled is the cancellation: the
        driver turned it into its own error, or met one while it cleaned up after it
        (cancelling the query on a server that just died). Retrying would swallow the
        cancellation: the task ran on, and whoever cancelled it waited for ever (a
        lease heartbeat that outlived its ``stop_heartbeat``, CI stop 39)."""
        _check_cancelled(f"{self.engine} {what}", exc)
        if self.is_closed():
            raise StoreClosed(f"{self.engine} backend closed during {during}") from exc
        if not self.transient(exc):
            raise self.reject(f"{self.engine} {what} failed", exc) from exc

    async def _back_off(self, delay: float, message: str, what: str, exc: BaseException) -> float:
        """Say that ``what`` is retried (a warning the first time, then debug), let the
        engine prepare, wait ``delay`` seconds; returns the next delay."""
        log = self.logger.warning if delay == _FIRST_DELAY else self.logger.debug
        log(message, self.engine, what, self.reason(exc), self.budget())
        await self.before_retry()
        await asyncio.sleep(delay)
        return min(delay * 2, _MAX_DELAY)

    async def run(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` (safe to repeat), retrying transient failures until the deadline.

        Given up, it raises :class:`~statekeeper.errors.BackendError` with
        ``maybe_applied`` True when one of the tries may have reached the server (a
        write among them may stand: a lease granted, a snapshot stored, a delete done),
        False only when every try failed before it was sent (``unsent``)."""
        deadline = time.monotonic() + self.budget()
        delay = _FIRST_DELAY
        reached = False
        while True:
            self.check_open()
            try:
                await self.prepare()
                return await op()
            except self.errors as exc:
                self._final(what, exc, "an operation")
                reached = reached or not self.unsent(exc)
                if time.monotonic() + delay > deadline:
                    raise BackendError(
                        f"{self.engine} {what} failed after retrying for {self.budget():g}s: "
                        f"{self.reason(exc)}",
                        maybe_applied=reached,
                    ) from exc
                delay = await self._back_off(delay, "%s %s: %s; retrying for up to %gs", what, exc)

    async def settle_append(
        self,
        request: AppendRequest,
        exc: BaseException,
        *,
        landed: Callable[[AppendRequest], Awaitable[bool]],
        submit: Callable[[AppendRequest], Awaitable[AppendResult]],
        maybe_applied: bool = True,
    ) -> AppendResult:
        """Settle an append whose try failed with ``exc`` (its reply lost: stored, not
        stored, or beaten by another writer).

        Wait for the server, then ask ``landed`` whether the request's events (and key)
        are stored at their seqs: if so, it committed; if nothing is there, it is sent
        again (``submit``, which raises the engine's conflict or lease errors itself).
        An acknowledged write is never doubled, an unacknowledged one never silently
        lost: when the outcome cannot be established by the deadline, the append raises
        :class:`~statekeeper.errors.BackendError` with ``maybe_applied`` saying whether
        it may have been stored. ``maybe_applied=False`` for a first failure known not
        to have reached the server.
        """
        what = f"append to {request.agent_id!r}"
        _check_cancelled(f"{self.engine} {what}", exc)
        if not self.transient(exc):
            raise self.reject(f"{self.engine} {what} failed", exc) from exc
        deadline = time.monotonic() + self.budget()
        delay = _FIRST_DELAY
        last = exc
        while True:
            self.check_open()
            submitting = False
            try:
                await self.prepare()
                if maybe_applied and await landed(request):
                    return AppendResult(
                        request.agent_id, request.events[0].seq, request.events[-1].seq
                    )
                maybe_applied = False  # checked: it is not stored
                submitting = True
                return await submit(request)
            except self.errors as again:
                self._final(what, again, "an append")
                if submitting and not self.unsent(again):
                    maybe_applied = True
                last = again
            if time.monotonic() + delay > deadline:
                break
            delay = await self._back_off(
                delay, "%s %s interrupted (%s); retrying for up to %gs", what, last
            )
        raise BackendError(
            f"{self.engine} {what} at seq {request.events[0].seq} failed and could not be "
            f"completed within {self.budget():g}s: {self.reason(last)}",
            maybe_applied=maybe_applied,
        ) from last
