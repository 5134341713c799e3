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
