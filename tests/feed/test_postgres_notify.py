"""PostgreSQL feed wake-ups: a writer sends NOTIFY only while a subscriber listens.

Every NOTIFY is a round trip and a transaction of its own; a process whose appends
nobody follows should not pay for them (16 LangGraph threads on a group-commit saver
sent one for 2 of every 3 batches). A subscriber that listens is still woken up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

import psycopg

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.postgres import feed as pg_feed
from statekeeper.records import AppendRequest, RawEvent

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres


@pytest.fixture
async def schema(tmp_path: Path) -> AsyncIterator[str]:
    require_postgres()
    name = namespace(tmp_path)
    drop_schema(name)
    try:
        yield name
    finally:
        drop_schema(name)


def _request(agent: str, seq: int) -> AppendRequest:
    return AppendRequest(agent, seq - 1, (RawEvent(seq, "patch", 1.0, b"p%d" % seq, b"c"),))


async def _notified(backend: PostgresBackend) -> None:
    """Wait until the backend's notifier (if one was started) has finished."""
    task = backend._feed._notifier
    if task is not None:
        await task


async def test_a_writer_nobody_listens_to_sends_no_notify(schema: str) -> None:
    writer = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    # a bare LISTEN (not a subscriber): it sees every NOTIFY on the channel
    spy = await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True)
    try:
        await writer.open()
        channel = writer._feed.channel
        await spy.execute(f'LISTEN "{channel}"')
        for seq in (1, 2, 3):
            await writer.append(_request("a", seq))
            await _notified(writer)
        # a marker sent after the writer's notifier finished: anything the writer
        # notified committed before it, and is delivered before it
        async with await psycopg.AsyncConnection.connect(POSTGRES_DSN, autocommit=True) as other:
            await other.execute("SELECT pg_notify(%s, 'marker')", (channel,))
        payloads = []
        async for note in spy.notifies(timeout=60.0):
            payloads.append(note.payload)
            if note.payload == "marker":
                break
        assert payloads == ["marker"]
        assert [r.agent_id for r in await writer.read_feed(0)] == ["a", "a", "a"]
    finally:
        await spy.close()
        await writer.close()


async def test_a_listening_subscriber_in_another_backend_is_notified(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no quiet time: the subscriber's wait ends on a notification only
    monkeypatch.setattr(pg_feed, "LISTENER_RECHECK", 0.0, raising=False)
    writer = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    reader = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await writer.open()
        await writer.append(_request("a", 1))  # nobody listens yet
        await _notified(writer)
        first = (await reader.read_feed(0))[-1].position
        waiting = asyncio.create_task(reader.wait_feed(first, 3600.0))
        # the subscriber is listening once its connection holds the lock
        while reader._feed._listener is None:
            await asyncio.sleep(0)
            assert not waiting.done()
        await writer.append(_request("a", 2))
        await asyncio.wait_for(waiting, 60.0)
        assert [r.event.seq for r in await reader.read_feed(first)] == [2]
    finally:
        await reader.close()
        await writer.close()
