"""The WAL's growth step made where the commit that crossed its threshold ran (issue 11,
group11, 2026-12-05 afternoon): a lone writer at ``synchronous=FULL`` grows its WAL
without starting the writer thread, without a sync of the zeros of its own (the next
commit's sync takes them) and without its next save's hop to that thread; a busy
writer still queues the step there."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.backends.sqlite import wal as sqlite_wal
from statekeeper.backends.sqlite.wal import GROW_CAP, GROW_STEP
from statekeeper.store import StateStore


def _wal_size(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


def _grown_size(page_size: int, frames: int) -> int:
    return sqlite_wal.WAL_HEADER + frames * (page_size + sqlite_wal.FRAME_HEADER)


def _page_size(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


@pytest.mark.parametrize("durability", ["group", "sync"])
async def test_a_lone_writers_growth_step_starts_no_thread_and_syncs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """16 saves of one agent on a new FULL store (the concurrency curve's 1-agent row
    starts so): the WAL is grown a step within them, the writer thread never starts
    (the step was made after the commit that crossed its threshold, on the loop), and
    no sync is made from Python (SQLite's own sync of each commit takes the zeros)."""
    syncs: list[int] = []

    def counted(fd: int) -> None:
        syncs.append(fd)

    db = tmp_path / "lone.db"
    messages: list[str] = []
    url = f"sqlite:///{db}?synchronous=FULL"
    async with StateStore(url, durability=durability, witness=False) as store:
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)
        # (counted from here: the new file's folder is synced at the open)
        monkeypatch.setattr(os, "fdatasync", counted, raising=False)
        monkeypatch.setattr(os, "fsync", counted)
        monkeypatch.setattr(sqlite_wal, "_datasync", counted, raising=False)  # (its old name)
        for n in range(16):
            messages.append(f"message {n}: " + "x" * 280)
            await store.save("a", {"messages": list(messages)})
        page_size = _page_size(db)
        assert _grown_size(page_size, GROW_STEP) <= _wal_size(db) < _grown_size(page_size, GROW_CAP)
        assert backend._growth.steps == 1
        assert not backend._writer_pool._threads  # (the writer thread never started)
        assert syncs == []
        assert (await store.load("a")).data["messages"] == messages
        monkeypatch.undo()
    async with StateStore(f"sqlite:///{db}") as again:
        assert (await again.verify()).ok
        assert (await again.load("a")).data["messages"] == messages


async def test_a_few_agents_batched_grow_the_wal_without_the_writer_thread(
    tmp_path: Path,
) -> None:
    """4 agents saving together (the curve's 4-agent row: batches committed on the
    loop under the writer lock, or by the commit thread): the step is made right
    after the commit that crossed its threshold, by the thread holding the lock, and
    the writer thread never starts."""
    db = tmp_path / "four.db"
    history: dict[str, list[str]] = {f"agent-{i}": [] for i in range(4)}
    url = f"sqlite:///{db}?synchronous=FULL"
    async with StateStore(url, durability="group", witness=False) as store:
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)

        async def chat(agent_id: str) -> None:
            messages = history[agent_id]
            for n in range(16):
                messages.append(f"{agent_id} says {n}: " + "x" * 280)
                await store.save(agent_id, {"messages": list(messages)})

        await asyncio.gather(*(chat(a) for a in history))
        page_size = _page_size(db)
        assert backend._growth.steps >= 1
        assert _wal_size(db) >= _grown_size(page_size, GROW_STEP)
        assert not backend._writer_pool._threads  # (the writer thread never started)
        for agent_id, messages in history.items():
            assert (await store.load(agent_id)).data["messages"] == messages


async def test_a_step_due_while_the_writer_is_busy_is_queued_on_the_writer_thread(
    tmp_path: Path,
) -> None:
    """While the writer connection is in use (its lock held: a batch committing on
    the commit thread, say), the step is not made on the committing thread: it is
    queued on the writer thread, the next writes behind it, and made there."""
    db = tmp_path / "busy.db"
    async with StateStore(f"sqlite:///{db}?synchronous=FULL", durability="sync") as store:
        await store.save("a", {"n": 0})
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)
        before = _wal_size(db)
        growth: Any = backend._growth
        backend._writer_busy.acquire()
        try:
            growth.next_at = backend._wal_limit = 0.0  # (a step is due at the next count)
            backend._wrote(1)
            assert backend._checkpoint_due  # queued: the next write waits behind it
            assert _wal_size(db) == before  # not made here
        finally:
            backend._writer_busy.release()
        await store.save("a", {"n": 1})  # queued behind the step on the writer thread
        assert not backend._checkpoint_due
        assert growth.steps == 1
        assert _wal_size(db) >= _grown_size(_page_size(db), GROW_STEP)
        assert (await store.load("a")).data["n"] == 1


async def test_a_step_that_fails_leaves_the_save_that_counted_it_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step made after a lone commit that fails (an unexpected error of the file
    system, say) is not the save's error: the save stands, the growth ends, the
    saves after it are made as they were (their commits extend the WAL)."""
    tried: list[int] = []

    def failing(self: sqlite_wal.Growth, wal_path: str, page_size: int, pages: float) -> int:
        tried.append(1)
        raise RuntimeError("the step failed")

    monkeypatch.setattr(sqlite_wal.Growth, "step", failing)
    db = tmp_path / "failed.db"
    async with StateStore(f"sqlite:///{db}?synchronous=FULL", durability="group") as store:
        for n in range(24):
            await store.save("a", {"n": n, "pad": "x" * 300})
        backend = store.backend
        assert isinstance(backend, SQLiteBackend)
        assert tried == [1]  # tried once, then no more steps
        assert backend._growth.steps == 0
        assert (await store.load("a")).data["n"] == 23
    async with StateStore(f"sqlite:///{db}") as again:
        assert (await again.load("a")).data["n"] == 23
