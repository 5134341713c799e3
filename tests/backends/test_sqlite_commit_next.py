"""``SQLiteBackend.commit_next``: the store's common save committed now, as a plain call,
only when nothing else would have run first; every other case is left, untouched, to
``append_next`` (which makes the pass of the loop, queues, or waits for the lock)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from statekeeper import ConflictError, StateStore
from statekeeper.backends.base import NextRow
from statekeeper.backends.sqlite import SQLiteBackend


def _tag(seq: int) -> bytes:
    return hashlib.sha256(f"a/{seq}".encode()).digest()[:16]


def _row(seq: int, expected: bytes | None) -> NextRow:
    payload = f"event {seq}".encode()
    digest = hashlib.sha256(payload).digest()
    return ("a", seq, float(seq), payload, digest, _tag(seq), expected, None)


async def _head(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT head_seq FROM sk_agents").fetchone()[0])


async def test_commit_next_commits_only_when_nothing_else_would_run_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "now.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    loop = asyncio.get_running_loop()
    try:
        await backend.append_next(*_row(1, None))
        backend._pass_due = loop.time() + 3600.0  # no pass due (PASS_EVERY not gone by)
        assert backend.commit_next(_row(2, _tag(1))) is True
        assert await _head(path) == 2
        # a stale head: refused as append_next refuses it, nothing written
        with pytest.raises(ConflictError):
            backend.commit_next(_row(3, b"stale"))
        assert await _head(path) == 2
        # another task is ready: it runs first (append_next lets it), nothing done here
        loop.call_soon(lambda: None)
        assert backend.commit_next(_row(3, _tag(2))) is False
        await asyncio.sleep(0)
        # a pass due and a timer due: append_next makes the pass, nothing done here
        ran = asyncio.Event()
        loop.call_at(loop.time() - 1.0, ran.set)
        backend._pass_due = 0.0
        assert backend.commit_next(_row(3, _tag(2))) is False
        await asyncio.wait_for(ran.wait(), 30.0)
        # the write lock held by another connection: the writer thread waits for it
        backend._pass_due = loop.time() + 3600.0
        with closing(sqlite3.connect(path, isolation_level=None)) as holder:
            holder.execute("BEGIN IMMEDIATE")
            assert backend.commit_next(_row(3, _tag(2))) is False
            holder.execute("COMMIT")
        assert await _head(path) == 2
        assert backend.commit_next(_row(3, _tag(2))) is True  # the lock free again
        assert [e.seq for e in await backend.read("a", 0)] == [1, 2, 3]
    finally:
        await backend.close()
    assert backend.commit_next(_row(4, _tag(3))) is False  # closed: append_next raises


async def test_a_loop_of_saves_lets_a_due_timer_run(tmp_path: Path) -> None:
    """Saves committed through ``commit_next`` never yield to the loop themselves;
    a timer that falls due meanwhile still runs within a loop of them (the save after
    ``PASS_EVERY`` sees it waiting and makes its pass)."""
    async with StateStore(f"sqlite:///{tmp_path}/loop.db?synchronous=OFF") as store:
        backend = store._writes.backend
        assert isinstance(backend, SQLiteBackend)
        await store.save("a", {"messages": []})
        ran: list[str] = []
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() - 1.0, ran.append, "t")
        n = 0
        while not ran:
            n += 1
            backend._pass_due = 0.0  # (as if PASS_EVERY went by)
            await store.save("a", {"messages": list(range(n))})
        assert ran == ["t"]
        assert (await store.load("a")).data == {"messages": list(range(n))}


async def test_commit_next_leaves_a_pass_to_io_that_is_ready(tmp_path: Path) -> None:
    """Past ``PASS_EVERY``, data waiting on a socket the loop watches makes
    ``commit_next`` decline (nothing written) so that the loop's pass reads it first."""
    import socket

    path = tmp_path / "io.db"
    backend = SQLiteBackend(path, synchronous="OFF")
    loop = asyncio.get_running_loop()
    left, right = socket.socketpair()
    got = asyncio.Event()

    def read() -> None:
        left.recv(16)
        got.set()

    try:
        left.setblocking(False)
        loop.add_reader(left.fileno(), read)
        await backend.append_next(*_row(1, None))
        backend._pass_due = 0.0  # (as if PASS_EVERY went by)
        assert backend.commit_next(_row(2, _tag(1))) is True  # nothing waits: committed
        right.send(b"x")
        backend._pass_due = 0.0
        assert backend.commit_next(_row(3, _tag(2))) is False  # the socket is ready
        assert await _head(path) == 2
        await asyncio.wait_for(got.wait(), 30.0)
    finally:
        loop.remove_reader(left.fileno())
        left.close()
        right.close()
        await backend.close()


def test_commit_next_follows_the_running_loop_from_one_loop_to_the_next(
    tmp_path: Path,
) -> None:
    """The loop ``commit_next`` last ran on is remembered, not trusted: on the next
    loop (another ``asyncio.run``, here on another thread too) it reads that loop's
    ready queue, and outside any loop it raises as ``asyncio.get_running_loop`` does."""
    import threading

    path = tmp_path / "loops.db"
    backend = SQLiteBackend(path, synchronous="OFF")

    async def first() -> None:
        await backend.append_next(*_row(1, None))
        backend._pass_due = asyncio.get_running_loop().time() + 3600.0
        assert backend.commit_next(_row(2, _tag(1))) is True

    async def second() -> None:
        loop = asyncio.get_running_loop()
        backend._pass_due = loop.time() + 3600.0
        loop.call_soon(lambda: None)  # a task of this loop is ready: decline
        assert backend.commit_next(_row(3, _tag(2))) is False
        await asyncio.sleep(0)
        assert backend.commit_next(_row(3, _tag(2))) is True

    asyncio.run(first())
    failed: list[BaseException] = []

    def on_thread() -> None:
        try:
            asyncio.run(second())
        except BaseException as exc:  # (reported below)
            failed.append(exc)

    thread = threading.Thread(target=on_thread)
    thread.start()
    thread.join()
    assert failed == []
    with pytest.raises(RuntimeError):
        backend.commit_next(_row(4, _tag(3)))  # no running loop
    asyncio.run(backend.close())
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT head_seq FROM sk_agents").fetchone()[0] == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
async def test_a_forked_child_does_not_take_its_parents_loop_for_its_own(tmp_path: Path) -> None:
    """``asyncio.get_running_loop`` fails in a child forked while a loop ran (its pid
    check); the loop ``commit_next`` remembers is forgotten at the fork, so the child
    asks ``get_running_loop`` too."""
    import statekeeper.backends.sqlite.running as sk_sqlite

    last_loop = vars(sk_sqlite)["_last_loop"]  # (the module's own list, read below)

    backend = SQLiteBackend(tmp_path / "fork.db", synchronous="OFF")
    try:
        await backend.append_next(*_row(1, None))
        backend._pass_due = asyncio.get_running_loop().time() + 3600.0
        assert backend.commit_next(_row(2, _tag(1))) is True
        assert last_loop[0] is asyncio.get_running_loop()
        pid = os.fork()
        if pid == 0:  # the child: nothing but the check, then out
            os._exit(0 if last_loop[0] is None else 1)
        _, status = await asyncio.to_thread(os.waitpid, pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        await backend.close()
