"""PostgreSQL positions commit out of order: the feed never passes one still to commit.

Transaction A takes position p, transaction B takes p + 1 and commits first. A reader
that delivered p + 1 and resumed after it would lose p for good; the feed's safe
frontier holds p + 1 back until A has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg

from statekeeper import StateStore
from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.url import tiered_url
from statekeeper.records import AppendRequest, FeedEvent, FeedRecord, RawEvent

from ..backends._services import POSTGRES_DSN, drop_schema, namespace, require_postgres


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[PostgresBackend]:
    require_postgres()
    schema = namespace(tmp_path)
    drop_schema(schema)
    b = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=4)
    await b.open()
    try:
        yield b
    finally:
        await b.close()
        drop_schema(schema)


def _event(seq: int) -> RawEvent:
    return RawEvent(seq, "patch", 1.0, b"p%d" % seq, b"c")


@pytest.fixture
async def other(backend: PostgresBackend) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """Another session on the server, for an append the test leaves open (closed before
    the backend's schema is dropped)."""
    conn = await psycopg.AsyncConnection.connect(POSTGRES_DSN)
    try:
        yield conn
    finally:
        await conn.close()


async def _open_append(conn: psycopg.AsyncConnection[Any], schema: str, agent_id: str) -> None:
    """An append of ``agent_id`` left open in ``conn``: its position taken, not committed
    until ``conn`` commits."""
    await conn.execute(
        f'SELECT * FROM "{schema}".sk_append1(%s, 0, 1, %s, 1.0, %s, %s,'
        " NULL, NULL, NULL, NULL, NULL, NULL, false, NULL, NULL, NULL)",
        (agent_id, "patch", b"s", b"c"),
    )


async def _hold_feed_lock(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """An append in flight as the feed sees it: ``conn`` holds the feed's lock
    (sql/feed.sql) until its transaction ends."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock_shared(23117, hashtext(%s))",
        (f"statekeeper-feed:{schema}",),
    )


async def test_a_later_position_waits_for_an_earlier_one_still_in_flight(
    backend: PostgresBackend, other: psycopg.AsyncConnection[Any]
) -> None:
    await backend.append(AppendRequest("first", 0, (_event(1),)))
    done = await backend.read_feed(0)
    assert [r.agent_id for r in done] == ["first"]
    # A: an append left open (its position taken, not committed)
    await _open_append(other, backend.schema, "slow")
    # B: commits after A took its position
    await backend.append(AppendRequest("fast", 0, (_event(1),)))
    after = done[-1].position
    assert await backend.read_feed(after) == []  # fast's position is held back
    assert (await backend.feed_bounds())[1] == after
    await other.commit()
    records = await backend.read_feed(after)
    assert [r.agent_id for r in records] == ["slow", "fast"]
    assert records[0].position < records[1].position


async def test_a_rolled_back_append_leaves_a_gap_not_a_stall(
    backend: PostgresBackend, other: psycopg.AsyncConnection[Any]
) -> None:
    await _open_append(other, backend.schema, "aborted")
    await backend.append(AppendRequest("kept", 0, (_event(1),)))
    assert await backend.read_feed(0) == []
    await other.rollback()
    assert [r.agent_id for r in await backend.read_feed(0)] == ["kept"]


async def test_a_subscriber_wakes_up_on_notify(tmp_path: Path) -> None:
    require_postgres()
    schema = namespace(tmp_path)
    drop_schema(schema)
    url = f"{POSTGRES_DSN}?schema={schema}"
    try:
        async with StateStore(url) as reader, StateStore(url) as writer:
            await writer.save("a/1", {"n": 0})
            sub = reader.subscribe()
            first = await anext(sub)
            assert first.agent_id == "a/1"
            # waits for an hour unless a notification comes
            task = asyncio.create_task(reader.backend.wait_feed(first.position, 3600.0))
            await writer.save("a/2", {"n": 1})
            await asyncio.wait_for(task, 60.0)
            event = await anext(sub)
            assert (event.agent_id, event.event.ops[0]["value"]) == ("a/2", {"n": 1})
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("reader", ["postgresql", "tiered"])
async def test_a_cursor_resumes_on_a_new_reader_while_an_append_is_in_flight(
    backend: PostgresBackend, other: psycopg.AsyncConnection[Any], reader: str
) -> None:
    # another process's cursor, resumed by a reader that has not read yet while some
    # append is open: that reader's safe frontier is still 0, yet the cursor is valid
    # (on a tiered store too: its feed is its PostgreSQL durable tier's)
    url = f"{POSTGRES_DSN}?schema={backend.schema}"
    reader_url = url if reader == "postgresql" else tiered_url(hot="memory://", durable=url)
    async with StateStore(url) as writer, StateStore(reader_url) as resumed:
        await writer.save("a/1", {"n": 1})
        head = (await writer.feed_bounds())[1]
        await _hold_feed_lock(other, backend.schema)
        sub = resumed.subscribe(head)
        waiting = asyncio.ensure_future(anext(sub))
        # the cursor is checked at the start: let it happen with the append open
        while not (waiting.done() or sub._started):  # noqa: ASYNC110 (a private flag)
            await asyncio.sleep(0.01)
        await other.commit()
        await writer.save("a/2", {"n": 2})
        event = await asyncio.wait_for(waiting, 60.0)
        assert (event.agent_id, event.position) == ("a/2", sub.position)
        assert event.position > head


def _ended_after_the_first_empty_read(
    store: StateStore, end: Callable[[], Awaitable[None]]
) -> None:
    """Run ``end`` once, right after the first read of ``store``'s feed that came back
    empty: between a catch-up's read and whatever it checks next."""
    backend = store.backend
    read = backend.read_feed_page  # (what a subscription reads: a page and the feed id)
    pending = [end]

    async def read_then_end(
        after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        records, feed = await read(after, limit)
        if not records and pending:
            await pending.pop()()
        return records, feed

    backend.read_feed_page = read_then_end  # type: ignore[method-assign]


@pytest.mark.parametrize("reader", ["postgresql", "tiered"])
@pytest.mark.parametrize("ending", ["commit", "rollback"])
async def test_a_catch_up_on_a_new_reader_while_an_append_is_in_flight_delivers_what_is_committed(
    backend: PostgresBackend, other: psycopg.AsyncConnection[Any], ending: str, reader: str
) -> None:
    # a rebuild or report (stop_at_head) started by a reader that has not read yet while
    # another append is open: its safe head is 0, and the catch-up ended at once, without
    # the events already committed (the caller's own among them). The open append ends
    # right after the catch-up's first (empty) read: it must still deliver them all. A
    # tiered store's feed is its PostgreSQL durable tier's
    url = f"{POSTGRES_DSN}?schema={backend.schema}"
    reader_url = url if reader == "postgresql" else tiered_url(hot="memory://", durable=url)
    async with StateStore(url) as store, StateStore(reader_url) as fresh:
        await store.save("a/1", {"n": 1})
        await store.save("a/2", {"n": 2})
        if ending == "commit":
            await _hold_feed_lock(other, backend.schema)
        else:
            # an append that took a position below the head and never commits: the
            # catch-up must not wait for it for ever
            await _open_append(other, backend.schema, "slow")
        await store.save("a/3", {"n": 3})
        _ended_after_the_first_empty_read(
            fresh, other.commit if ending == "commit" else other.rollback
        )
        sub = fresh.subscribe(stop_at_head=True)
        events = await asyncio.wait_for(_collect(sub), 60.0)
        assert [e.agent_id for e in events] == ["a/1", "a/2", "a/3"]
        assert sub.position == events[-1].position


async def test_a_catch_up_ends_when_the_newest_position_is_deleted_while_an_append_is_open(
    backend: PostgresBackend, other: psycopg.AsyncConnection[Any]
) -> None:
    # the catch-up's stop is the newest position committed at its start; its agent is
    # deleted while another append is open, so the newest committed position goes back.
    # The frontier must still reach the stop once the append ends (it stayed below it,
    # and the catch-up waited for the next append)
    url = f"{POSTGRES_DSN}?schema={backend.schema}"
    async with StateStore(url) as store, StateStore(url) as fresh:
        await store.save("a/1", {"n": 1})
        await store.save("b/1", {"n": 1})
        await _hold_feed_lock(other, backend.schema)

        async def delete_then_end() -> None:
            await store.delete("b/1")
            await fresh.feed_bounds()  # a frontier read while the append is still open
            await other.commit()

        _ended_after_the_first_empty_read(fresh, delete_then_end)
        events = await asyncio.wait_for(_collect(fresh.subscribe(stop_at_head=True)), 60.0)
        assert [e.agent_id for e in events] == ["a/1"]


async def _collect(sub: AsyncIterator[FeedEvent]) -> list[FeedEvent]:
    return [event async for event in sub]
