"""PostgreSQL: head reads asked for while one is in flight go in one statement.

A LangGraph saver checks a thread's head at the start of every turn; with 16 threads on
one loop those checks arrive together (woken by the same commit). The first runs at
once, the ones arriving while it is in flight are answered together by the next
statement — never by the one already sent: a queued caller sees every write committed
before that next statement, as a statement of its own would.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest

pytest.importorskip("psycopg")

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.testing import request

from ._services import POSTGRES_DSN


class Gate:
    """Holds the backend's first ``head`` statement after it ran, until opened, and
    records every statement's name."""

    def __init__(self, backend: PostgresBackend) -> None:
        self.names: list[str] = []
        self.ran = asyncio.Event()
        self.open = asyncio.Event()
        query = backend._query

        async def gated(name: str, params: Sequence[Any], **kw: Any) -> list[tuple[Any, ...]]:
            self.names.append(name)
            rows = await query(name, params, **kw)
            if name == "head" and not self.ran.is_set():
                self.ran.set()
                await self.open.wait()
            return rows

        backend._query = gated  # type: ignore[method-assign]


async def wait_queued(backend: PostgresBackend, gate: Gate, n: int) -> None:
    """Until ``n`` more head reads wait for the next statement (or, not coalesced,
    sent statements of their own)."""
    heads = getattr(backend, "_heads", None)
    await passes(lambda: (len(heads._queue) if heads is not None else 0) + len(gate.names) - 1 >= n)


async def passes(check: Callable[[], bool], bound: int = 100_000) -> None:
    """Let the loop run, a pass at a time (not a duration), until ``check()``."""
    for _ in range(bound):
        if check():
            return
        await asyncio.sleep(0)
    pytest.fail("the condition never held")


async def test_heads_asked_during_a_read_share_the_next_statement(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=4)
    try:
        await backend.open()
        await backend.append_batch([request(x, 0) for x in "abc"])
        await backend.append(request("b", 1))
        gate = Gate(backend)
        first = asyncio.create_task(backend.head("a"))
        await gate.ran.wait()  # a's statement ran; its answer is held
        # asked while a's read is in flight: queued, read together afterwards
        rest = [asyncio.create_task(backend.head(x)) for x in ("b", "c", "zz", "b")]
        await wait_queued(backend, gate, 4)
        gate.open.set()
        assert await first == 1
        assert await asyncio.gather(*rest) == [2, 1, 0, 2]
        assert gate.names == ["head", "head_many"]
        # nothing in flight: a read runs alone again
        assert await backend.head("c") == 1
        assert gate.names == ["head", "head_many", "head"]
    finally:
        await backend.close()


async def test_head_tags_asked_during_a_head_read_share_the_next_statement(schema: str) -> None:
    """``head_tag`` (a LangGraph saver's check of a cached thread: is the stream there
    still the one it read?) is coalesced with the head reads: 16 threads' checks
    arriving together were one statement each (docs/benchmarks.md, "lgwrapped")."""
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=4)
    try:
        await backend.open()
        for agent_id in "ab":
            tagged = dataclasses.replace(request(agent_id, 0), head_tag=b"tag-" + agent_id.encode())
            await backend.append(tagged)
        await backend.append(request("c", 0))  # (a head written without a tag)
        alone = [await backend.head_tag(x) for x in ("a", "b", "c", "zz")]
        assert alone == [(1, b"tag-a"), (1, b"tag-b"), (1, None), (0, None)]
        gate = Gate(backend)
        first = asyncio.create_task(backend.head("a"))
        await gate.ran.wait()  # a's statement ran; its answer is held
        rest = [asyncio.create_task(backend.head_tag(x)) for x in ("a", "b", "c", "zz")]
        plain = asyncio.create_task(backend.head("b"))
        await wait_queued(backend, gate, 5)
        gate.open.set()
        assert await first == 1
        assert await asyncio.gather(*rest) == alone
        assert await plain == 1
        assert gate.names == ["head", "head_tag_many"]
        assert await backend.head_tag("b") == (1, b"tag-b")  # alone again: its own statement
        assert gate.names == ["head", "head_tag_many", "head_tag"]
    finally:
        await backend.close()


async def test_a_queued_head_sees_a_write_committed_after_the_first_read(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=4)
    writer = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    try:
        await backend.open()
        await writer.open()
        await backend.append(request("a", 0))
        gate = Gate(backend)
        first = asyncio.create_task(backend.head("a"))
        await gate.ran.wait()  # read at head 1, answer held
        await writer.append(request("a", 1))  # committed after that read
        later = asyncio.create_task(backend.head("a"))
        await wait_queued(backend, gate, 1)
        gate.open.set()
        assert await first == 1
        assert await later == 2  # not the answer of the statement sent before it asked
    finally:
        await writer.close()
        await backend.close()


async def test_a_failed_shared_read_fails_each_caller_and_the_next_runs_alone() -> None:
    from statekeeper.backends.postgres.coalesce import Coalesced

    started, release = asyncio.Event(), asyncio.Event()
    sent: list[Sequence[str]] = []

    async def one(agent_id: str) -> int:
        sent.append([agent_id])
        started.set()
        await release.wait()
        return 1

    async def many(agent_ids: Sequence[str]) -> list[int]:
        sent.append(list(agent_ids))
        raise OSError("connection lost")

    heads: Coalesced[str, int] = Coalesced(one, many)
    first = asyncio.create_task(heads("a"))
    await started.wait()
    queued = [asyncio.create_task(heads(x)) for x in ("b", "c")]
    await passes(lambda: len(heads._queue) >= 2)
    release.set()
    assert await first == 1
    for task in queued:
        with pytest.raises(OSError, match="connection lost"):
            await task
    assert sent == [["a"], ["b", "c"]]
    assert await heads("d") == 1  # nothing in flight: alone again
    assert sent[-1] == ["d"]
