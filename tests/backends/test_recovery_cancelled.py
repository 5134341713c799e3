"""A cancellation that the driver turns into one of its errors ends the retrying
operation as cancelled: it is not retried.

A server backend's calls ride out lost connections by retrying the driver's transient
errors (``backends/recovery.py``). A driver may meet such an error *because* the task
was cancelled — psycopg cancels the running query and waits for the server to confirm,
and a server that died meanwhile answers with a closed connection; a pool may hand the
cancelled waiter a connection instead of raising. Retrying then swallowed the
cancellation: the task ran on as if never cancelled, and whoever had cancelled it
waited on it for ever (a lease heartbeat that outlived ``stop_heartbeat``: the chaos
test's worker pool stalled, CI stop 39)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from statekeeper.backends.recovery import Reconnecting
from statekeeper.errors import BackendError
from statekeeper.records import AppendRequest, AppendResult, RawEvent


class ServerClosed(OSError):
    """The driver's error for a connection the server closed (transient)."""


def _reconnecting() -> Reconnecting:
    return Reconnecting(
        engine="test",
        timeout=lambda: 60.0,
        errors=(OSError,),
        transient=lambda exc: True,
        reason=str,
        reject=lambda what, exc: BackendError(what),
        is_closed=lambda: False,
        check_open=lambda: None,
        logger=logging.getLogger("tests.recovery"),
    )


def _cancelled_into_driver_error(
    calls: list[str], started: asyncio.Event
) -> Callable[[], Awaitable[str]]:
    """An operation whose first try waits until cancelled and then raises what the
    driver raised (the connection closed while the query was being cancelled); a
    second try would succeed."""

    async def op() -> str:
        calls.append("try")
        if len(calls) > 1:
            return "ran again"
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise ServerClosed("server closed the connection unexpectedly") from None
        return "unreachable"

    return op


async def test_an_operation_cancelled_into_a_driver_error_is_cancelled_not_retried() -> None:
    calls: list[str] = []
    started = asyncio.Event()
    task = asyncio.create_task(
        _reconnecting().run("read", _cancelled_into_driver_error(calls, started))
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == ["try"]  # not tried again after the cancellation


async def test_an_append_settled_while_cancelled_is_cancelled_not_sent_again() -> None:
    """``settle_append`` (an append whose reply was lost) in a task being cancelled:
    nothing is checked or sent again, the cancellation goes on."""
    asked: list[str] = []

    async def landed(request: AppendRequest) -> bool:
        asked.append("landed")
        return False

    async def submit(request: AppendRequest) -> AppendResult:
        asked.append("submit")
        return AppendResult(request.agent_id, 1, 1)

    request = AppendRequest("a", 0, [RawEvent(1, "e", 0.0, b"{}", b"")])

    async def settle() -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # the driver's error for the append the cancellation interrupted
            return await _reconnecting().settle_append(
                request, ServerClosed("server closed"), landed=landed, submit=submit
            )
        return None

    waiting = asyncio.Event()

    async def settle_when_cancelled() -> Any:
        waiting.set()
        return await settle()

    task = asyncio.create_task(settle_when_cancelled())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert asked == []
