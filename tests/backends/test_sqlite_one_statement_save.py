"""A lone save of an existing SQLite agent is one statement in autocommit (issue 11,
docs/benchmarks.md "perfsave").

``SQLiteBackend.commit_next`` used to run four statements a save — ``BEGIN
IMMEDIATE``, the head's compare-and-set ``UPDATE``, the event ``INSERT``, ``COMMIT`` —
each a trip through pysqlite (bind, step, reset, the GIL dropped and taken). It now
inserts one row into a TEMP view of the writer connection whose ``INSTEAD OF`` trigger
moves the head from the expected seq and tag, aborts when it moved, and inserts the
event (the feed's trigger firing as before). These tests pin what a user relies on:
the save is written whole (head, event, feed) and verifies; a stale head is refused
with nothing written; a write lock held elsewhere writes nothing inline and leaves the
save to the writer thread; another connection of the same file sees no new object.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConflictError


def _url(path: Path) -> str:
    return f"sqlite:///{path}?synchronous=NORMAL"


def _chat(n: int) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": f"message {i}"} for i in range(n)]}


def _rows(path: Path, agent_id: str) -> tuple[int, int, int, bytes | None]:
    """The head seq, events and feed rows of ``agent_id``, and its head tag, read by a
    connection of its own."""
    conn = sqlite3.connect(path)
    try:
        head, tag = conn.execute(
            "SELECT head_seq, head_tag FROM sk_agents WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        events = conn.execute(
            "SELECT count(*) FROM sk_events WHERE agent_id = ?", (agent_id,)
        ).fetchone()[0]
        feed = conn.execute(
            "SELECT count(*) FROM sk_feed WHERE agent_id = ?", (agent_id,)
        ).fetchone()[0]
        return int(head), int(events), int(feed), tag
    finally:
        conn.close()


def _backend(store: StateStore) -> SQLiteBackend:
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    return backend


async def test_a_steady_save_is_one_statement_and_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as store:
        for n in range(1, 4):
            await store.save("a", _chat(n))
        seen: list[str] = []
        writer = _backend(store)._writer
        assert writer is not None
        writer.set_trace_callback(seen.append)
        await store.save("a", _chat(4))
        writer.set_trace_callback(None)
        # (pysqlite traces the statement again as each trigger program starts)
        assert len(set(seen)) == 1 and seen[0].startswith("INSERT INTO sk_next_row"), seen
        assert not writer.in_transaction
        assert _rows(path, "a")[:3] == (4, 4, 4)
        assert (await store.verify(["a"])).ok
    async with StateStore(_url(path), durability="sync") as again:  # from the file
        assert (await again.load("a")).data == _chat(4)
        assert (await again.verify(["a"])).ok


async def test_a_stale_head_is_refused_with_nothing_written(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as store:
        for n in range(1, 3):
            await store.save("a", _chat(n))
        backend = _backend(store)
        head, events, feed, tag = _rows(path, "a")
        for seq, expected in ((head, tag), (head + 2, tag), (head + 1, b"\x01\x00" + bytes(32))):
            try:
                backend.commit_next(("a", seq, 1.0, b"x", b"y" * 32, b"z" * 34, expected, None))
            except ConflictError as exc:
                assert exc.expected_seq == seq - 1 and exc.current_seq == head
            else:
                raise AssertionError(f"seq {seq} was not refused")
            assert _rows(path, "a") == (head, events, feed, tag)
            assert backend._writer is not None and not backend._writer.in_transaction
        # the store's cached head is still right: its next save lands on it
        await store.save("a", _chat(3))
        assert _rows(path, "a")[:3] == (head + 1, events + 1, feed + 1)
        assert (await store.verify(["a"])).ok


async def test_a_save_over_another_writers_head_is_not_lost(tmp_path: Path) -> None:
    """Another store on the file moved the head: this store's cached head is stale, its
    one-statement save is refused, and the save is made again on the new head."""
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as mine:
        for n in range(1, 3):
            await mine.save("a", _chat(n))
        async with StateStore(_url(path), durability="sync") as theirs:
            await theirs.save("a", {"messages": [], "by": "theirs"})
        await mine.save("a", _chat(3))
        assert _rows(path, "a")[:2] == (4, 4)
    async with StateStore(_url(path), durability="sync") as again:
        assert (await again.load("a")).data == _chat(3)
        assert (await again.verify(["a"])).ok


async def test_a_write_lock_held_elsewhere_writes_nothing_inline(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as store:
        for n in range(1, 3):
            await store.save("a", _chat(n))
        backend = _backend(store)
        head, events, feed, tag = _rows(path, "a")
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
            row = ("a", head + 1, 1.0, b"x", b"y" * 32, b"z" * 34, tag, None)
            assert backend.commit_next(row) is False  # nothing written: the thread takes it
            assert backend._writer is not None and not backend._writer.in_transaction
            other.execute("ROLLBACK")
        finally:
            other.close()
        assert _rows(path, "a") == (head, events, feed, tag)
        assert backend.commit_next(row) is True
        assert _rows(path, "a")[:3] == (head + 1, events + 1, feed + 1)


async def test_the_view_is_the_writer_connections_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as store:
        await store.save("a", _chat(1))
        await store.save("a", _chat(2))
        conn = sqlite3.connect(path)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            temp = conn.execute("SELECT count(*) FROM sqlite_temp_master").fetchone()[0]
        finally:
            conn.close()
        assert not {n for n in names if "next_row" in n}
        assert temp == 0
