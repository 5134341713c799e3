"""A thread's first reads, before it has a read connection, run on the idle writer
connection (``SQLiteBackend._rows``): a store that writes and reads back little opens
no read connection (docs/benchmarks.md, "savecpu2"). The writer is used only when its
lock is free and no transaction is open on it; otherwise, on SQLite's busy answer, and
after ``WRITER_READS`` reads of the thread, the read goes to the thread's reader."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import WRITER_READS, SQLiteBackend


@pytest.mark.parametrize("durability", ["group", "sync"])
async def test_a_store_that_only_writes_opens_no_read_connection(
    tmp_path: Path, durability: str
) -> None:
    path = tmp_path / "w.db"
    async with StateStore(f"sqlite:///{path}?synchronous=OFF", durability=durability) as store:
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)

        async def run(agent: str) -> None:
            for n in range(4):
                await store.save(agent, {"n": n, "agent": agent})

        await asyncio.gather(*(run(f"a{i}") for i in range(16)))
        # the key guard's reads and every new agent's read of its head ran on the writer
        assert backend._readers == []
    async with StateStore(f"sqlite:///{path}") as store:
        for i in range(16):
            assert (await store.load(f"a{i}")).data == {"n": 3, "agent": f"a{i}"}


async def test_a_read_while_the_writer_is_busy_opens_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    async with StateStore(f"sqlite:///{path}?synchronous=OFF") as store:
        await store.save("a", {"x": 1})
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        with backend._writer_busy:  # (a commit in flight on another thread holds it)
            head, _tag, _snap, events = backend.state_rows_now("a")
        assert head == 1 and len(events) == 1
        assert len(backend._readers) == 1  # the thread's reader, opened for it
        assert backend.state_rows_now("a")[0] == 1  # and kept for its next reads
    finally:
        await backend.close()


async def test_a_read_never_sees_the_writer_s_open_transaction(tmp_path: Path) -> None:
    path = tmp_path / "open.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        writer = backend._writer
        assert writer is not None
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO sk_agents(agent_id, head_seq, created_at, updated_at)"
            " VALUES ('ghost', 7, 0, 0)"
        )
        try:
            assert backend.state_rows_now("ghost")[0] == 0  # uncommitted: not seen
        finally:
            writer.execute("ROLLBACK")
        assert len(backend._readers) == 1
    finally:
        await backend.close()


async def test_reads_on_the_writer_see_every_commit_of_other_connections(
    tmp_path: Path,
) -> None:
    path = tmp_path / "other.db"
    reading = SQLiteBackend(path, synchronous="OFF")
    try:
        assert reading.state_rows_now("a")[0] == 0
        async with StateStore(f"sqlite:///{path}?synchronous=OFF") as store:
            await store.save("a", {"x": 1})
            assert reading.state_rows_now("a")[0] == 1
            assert await reading.read_marker("encrypted") is False
            await store.save("a", {"x": 2})
            assert reading.state_rows_now("a")[0] == 2
            heads = await reading.read_heads(["a", "b"])
            assert heads[0] is not None and heads[0].seq == 2 and heads[1] is None
            listed = await reading.list_agents_by_write(limit=8)
            assert [info.agent_id for info in listed] == ["a"]
        assert reading._readers == []  # every read above ran on its idle writer
    finally:
        await reading.close()


async def test_a_thread_that_goes_on_reading_opens_its_reader(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    async with StateStore(f"sqlite:///{path}?synchronous=OFF") as store:
        await store.save("a", {"x": 1})
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)
        for _ in range(WRITER_READS + 1):
            assert backend.state_rows_now("a")[0] == 1
        assert len(backend._readers) == 1  # its later reads: the reader's kept cursor
        assert backend._local.writer_reads == WRITER_READS


class _BusyCursor:
    """The writer's read cursor answering as SQLite does to a read it cannot make now
    (a WAL being recovered or restarted by another connection)."""

    def execute(self, sql: str, args: Any = ()) -> Any:
        raise sqlite3.OperationalError("database is locked")


async def test_a_busy_answer_on_the_writer_sends_the_read_to_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    async with StateStore(f"sqlite:///{path}?synchronous=OFF") as store:
        await store.save("a", {"x": 1})
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        backend._writer_reads = _BusyCursor()  # type: ignore[assignment]
        assert backend.state_rows_now("a")[0] == 1
        assert len(backend._readers) == 1
        assert not backend._writer_busy.locked()  # the writer's lock given back
    finally:
        await backend.close()


async def test_a_closed_backend_still_refuses_a_read(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "closed.db", synchronous="OFF")
    await backend.close()
    with pytest.raises(Exception, match="closed"):
        backend.state_rows_now("a")


async def test_the_last_write_index_is_known_from_the_open(tmp_path: Path) -> None:
    path = tmp_path / "index.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        assert backend._by_write is True  # no statement of its own at the key check
        assert backend.lists_by_write
    finally:
        await backend.close()
    with closing(sqlite3.connect(path)) as conn:  # a file of an older statekeeper
        conn.execute("DROP INDEX sk_agents_written")
        conn.commit()
    backend = SQLiteBackend(path, synchronous="OFF")
    try:
        assert getattr(backend, "_by_write", None) is None
        assert backend.lists_by_write is False
    finally:
        await backend.close()
