"""A lone append of one event on an existing SQLite stream — with or without an
idempotency key — is one statement in autocommit (issue 12, docs/benchmarks.md
"lgsmall").

``SQLiteBackend.append`` committed such an append (the LangGraph saver's checkpoints,
keyed by checkpoint, and its writes; a store ``append``) with five statements —
``BEGIN IMMEDIATE``, the key's ``INSERT``, the head's compare-and-set, the event's
``INSERT``, ``COMMIT`` —, each a trip through pysqlite. It now inserts one row into a
TEMP view of the writer connection whose ``INSTEAD OF`` trigger claims the key, moves
the head from the expected seq and tag (aborting when it moved) and inserts the event.
What a user relies on, pinned here: the append is written whole (head, event of its
kind, key row, feed row) and verifies; a key used before answers as a duplicate with
nothing written; a stale head is refused with nothing written, its key not kept; a
write lock held elsewhere writes nothing inline and the append still lands.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper import StateStore, SyncStateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.errors import ConflictError
from statekeeper.integrations.langgraph import StatekeeperSaver
from statekeeper.records import AppendRequest, RawEvent


def _url(path: Path) -> str:
    return f"sqlite:///{path}?synchronous=NORMAL"


def _rows(path: Path, agent_id: str) -> tuple[int, int, int, int, bytes | None]:
    """Head seq, events, feed rows and key rows of ``agent_id``, and its head tag, read
    by a connection of its own."""
    conn = sqlite3.connect(path)
    try:
        head, tag = conn.execute(
            "SELECT head_seq, head_tag FROM sk_agents WHERE agent_id = ?", (agent_id,)
        ).fetchone()
        counts = [
            conn.execute(
                f"SELECT count(*) FROM {table} WHERE agent_id = ?", (agent_id,)
            ).fetchone()[0]
            for table in ("sk_events", "sk_feed", "sk_idempotency")
        ]
        return int(head), counts[0], counts[1], counts[2], tag
    finally:
        conn.close()


def _backend(store: StateStore) -> SQLiteBackend:
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    return backend


def _request(agent: str, seq: int, tag: bytes | None, key: str | None) -> AppendRequest:
    event = RawEvent(seq, "lg.cp", float(seq), b"payload %d" % seq, bytes(32))
    return AppendRequest(
        agent, seq - 1, [event], idempotency_key=key,
        head_tag=b"t" * 34, expected_tag=tag, check_tag=True,
    )  # fmt: skip


async def test_a_keyed_append_is_one_statement_and_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as store:
        await store.create("a", {"n": 0})
        await store.append("a", "step", ops=[{"op": "replace", "path": "/n", "value": 1}])
        writer = _backend(store)._writer
        assert writer is not None
        seen: list[str] = []
        writer.set_trace_callback(seen.append)
        result = await store.append(
            "a", "step", ops=[{"op": "replace", "path": "/n", "value": 2}], idempotency_key="k2"
        )
        writer.set_trace_callback(None)
        # (pysqlite traces the statement again as each trigger program starts)
        assert len(set(seen)) == 1 and seen[0].startswith("INSERT INTO sk_append_row"), seen
        assert not writer.in_transaction
        assert (result.first_seq, result.last_seq, result.duplicate) == (3, 3, False)
        assert _rows(path, "a")[:4] == (3, 3, 3, 1)
        assert (await store.verify(["a"])).ok
        # the key answers as a duplicate of that append, nothing more written
        again = await store.append(
            "a", "step", ops=[{"op": "replace", "path": "/n", "value": 9}], idempotency_key="k2"
        )
        assert (again.first_seq, again.last_seq, again.duplicate) == (3, 3, True)
        assert _rows(path, "a")[:4] == (3, 3, 3, 1)
    async with StateStore(_url(path), durability="sync") as reopened:  # from the file
        loaded = await reopened.load("a")
        assert loaded.data == {"n": 2}
        assert [e.type async for e in reopened.history("a")][-1] == "step"
        assert (await reopened.verify(["a"])).ok


async def test_a_used_key_is_a_duplicate_and_a_stale_head_a_refusal(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as store:
        await store.create("a", {"n": 0})
        await store.append("a", "step", ops=[{"op": "replace", "path": "/n", "value": 1}])
        await store.append(
            "a", "step", ops=[{"op": "replace", "path": "/n", "value": 2}], idempotency_key="k"
        )
        backend = _backend(store)
        head, events, feed, keys, tag = _rows(path, "a")
        # the key used before: the first append's range, whatever the head says
        dup = await backend.append(_request("a", head + 1, tag, "k"))
        assert (dup.first_seq, dup.last_seq, dup.duplicate) == (head, head, True)
        assert _rows(path, "a") == (head, events, feed, keys, tag)
        # a stale head (its seq, one ahead, another tag): refused, nothing written, the
        # new key not kept
        for seq, expected in ((head, tag), (head + 2, tag), (head + 1, b"\x01" * 34)):
            with pytest.raises(ConflictError) as refused:
                await backend.append(_request("a", seq, expected, "new"))
            assert refused.value.expected_seq == seq - 1 and refused.value.current_seq == head
            assert _rows(path, "a") == (head, events, feed, keys, tag)
            assert backend._writer is not None and not backend._writer.in_transaction
        # the store's cached head is still right: its next append lands on it
        await store.append(
            "a", "step", ops=[{"op": "replace", "path": "/n", "value": 3}], idempotency_key="new"
        )
        assert _rows(path, "a")[:4] == (head + 1, events + 1, feed + 1, keys + 1)
        assert (await store.verify(["a"])).ok


async def test_a_write_lock_held_elsewhere_writes_nothing_inline(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with StateStore(_url(path), durability="sync") as store:
        await store.create("a", {"n": 0})
        await store.append("a", "step", ops=[{"op": "replace", "path": "/n", "value": 1}])
        backend = _backend(store)
        head, events, feed, keys, tag = _rows(path, "a")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
        try:
            landed = asyncio.ensure_future(backend.append(_request("a", head + 1, tag, "k")))
            # inline, nothing was written: the writer thread waits for the lock
            await asyncio.sleep(0)
            assert not landed.done()
            assert backend._writer is not None and not backend._writer.in_transaction
        finally:
            other.execute("ROLLBACK")
            other.close()
        result = await landed
        assert (result.last_seq, result.duplicate) == (head + 1, False)
        assert _rows(path, "a")[:4] == (head + 1, events + 1, feed + 1, keys + 1)


def test_a_langgraph_steps_appends_are_one_statement_each(tmp_path: Path) -> None:
    """The saver's lone checkpoint and write appends (outside a run) on an existing
    thread: one statement each, and the thread reads back whole and verifies."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    path = tmp_path / "lg.db"
    with StatekeeperSaver.from_url(_url(path)) as saver:
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        backend: SQLiteBackend | None = None
        seen: list[str] = []
        for step in range(6):
            if step == 2:
                backend = _backend(saver.store)
                assert backend._writer is not None
                backend._writer.set_trace_callback(seen.append)
            checkpoint: Any = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=-1))
            checkpoint["channel_values"] = {"n": step}
            checkpoint["channel_versions"] = {"n": step + 1}
            meta: Any = {"source": "loop", "step": step}
            config = saver.put(config, checkpoint, meta, {"n": step + 1})
            saver.put_writes(config, [("n", step + 1)], f"task-{step}")
        assert backend is not None and backend._writer is not None
        backend._writer.set_trace_callback(None)
        statements = [s for s in seen if not s.startswith("--")]
        assert statements and all(s.startswith("INSERT INTO sk_append_row") for s in statements), (
            statements
        )
        latest = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
        assert latest is not None and latest.checkpoint["channel_values"] == {"n": 5}
        assert latest.pending_writes == [("task-5", "n", 6)]
    with SyncStateStore(_url(path)) as store:
        assert store.verify().ok
