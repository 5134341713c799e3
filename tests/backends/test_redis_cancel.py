"""Cancelling a live feed subscription on Redis ends it, whenever the cancel comes.

redis-py sends each command under ``asyncio.wait_for(send, socket_timeout)``; before
Python 3.12, ``wait_for`` swallows a ``cancel()`` that arrives just as the send has
completed (CPython gh-86296) and returns normally. A live subscription cancelled at
that moment went on waiting for ever (it sends an ``XREAD`` every second): seen with
``wait_replicas``, where the loop sends more commands, but the same on any store. The
test cancels the subscriber exactly there: from the end of the send of its ``XREAD``,
on a private server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

pytest.importorskip("redis")

from redis.asyncio.connection import AbstractConnection, Connection

from statekeeper import StateStore

from ._services import private_redis

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("options", ["", "?wait_replicas=1&wait_timeout=0.2"])
async def test_a_live_subscription_cancelled_as_its_xread_is_sent_ends(
    monkeypatch: pytest.MonkeyPatch, options: str
) -> None:
    real = Connection._send_packed_command
    target: list[asyncio.Task[Any]] = []
    xreads_after_cancel = 0
    went_on = asyncio.Event()

    async def send(self: AbstractConnection, command: Iterable[bytes]) -> None:
        nonlocal xreads_after_cancel
        command = list(command)
        await real(self, command)  # type: ignore[arg-type]
        if b"XREAD" not in b"".join(command):
            return
        if target and not target[0].cancelling():
            target[0].cancel()  # the send is done: wait_for is about to return its result
        elif target:
            xreads_after_cancel += 1
            went_on.set()  # cancelled, and still waiting for the feed

    monkeypatch.setattr(Connection, "_send_packed_command", send)
    with private_redis() as server:
        async with StateStore(server.url) as writer:
            await writer.save("a", {"n": 1})
        async with StateStore(server.url + options) as reader:
            sub = reader.subscribe(from_position=1)  # live, past the head: it waits
            task = asyncio.ensure_future(anext(sub))
            target.append(task)
            gone_on = asyncio.ensure_future(went_on.wait())
            await asyncio.wait([task, gone_on], return_when=asyncio.FIRST_COMPLETED)
            gone_on.cancel()
            assert xreads_after_cancel == 0, "the subscription went on after its cancel"
            assert task.cancelled()


@pytest.mark.parametrize("call", ["append_batch", "append_together"])
async def test_a_pipelined_append_cancelled_as_it_is_sent_raises_cancelled(
    monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """``append`` raised a cancel the client lost (see .client); ``append_batch`` (one
    pipeline) and ``append_together`` (one script) returned their results instead, and
    the cancelled caller went on as if it had not been cancelled."""
    from statekeeper.backends.redis import RedisBackend
    from statekeeper.testing import request

    real = Connection._send_packed_command
    target: list[asyncio.Task[Any]] = []

    async def send(self: AbstractConnection, command: Iterable[bytes]) -> None:
        command = list(command)
        await real(self, command)  # type: ignore[arg-type]
        if target and b"EVALSHA" in b"".join(command) and not target[0].cancelling():
            target[0].cancel()  # the send is done: wait_for is about to return its result

    monkeypatch.setattr(Connection, "_send_packed_command", send)
    with private_redis() as server:
        backend = RedisBackend(server.url)
        try:
            await backend.append(request("a", 0))  # opened, scripts loaded
            if call == "append_batch":
                task = asyncio.ensure_future(backend.append_batch([request("a", 1)]))
            else:
                task = asyncio.ensure_future(backend.append_together([request("a", 1)]))
            target.append(task)
            await asyncio.wait([task])
            assert task.cancelled(), f"{call} answered {task.result()!r} to a cancelled caller"
            assert await backend.head("a") == 2  # (it was applied: as append's cancel)
        finally:
            await backend.close()
