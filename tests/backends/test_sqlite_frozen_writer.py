"""A writer frozen (SIGSTOP) inside a SQLite write transaction (issue 9 item 8).

SQLite has one write lock per file, so a process stopped while it holds it blocks
every other writer of the file, the lease takeover included. Fencing keeps that safe;
what the others must get is a fast, typed answer (``StoreLocked``) instead of a 30 s
wait ending in "database is locked" — while a merely *busy* file (writers committing
one after another) is still waited for.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend
from statekeeper.concurrency import LeaseManager
from statekeeper.errors import BackendError, LeaseLost, StoreLocked

pytestmark = [
    pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP"),
    pytest.mark.slow,  # a writer process frozen (SIGSTOP) and killed
]

# The child takes the agent's lease, then makes a fenced save and stops itself in the
# middle of it: inside the append's BEGIN IMMEDIATE transaction, rows written, no COMMIT.
CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys, threading
    from statekeeper import StateStore
    from statekeeper.backends.sqlite import SQLiteBackend
    from statekeeper.concurrency import LeaseManager

    original = SQLiteBackend._append_one

    def append_then_freeze(self, conn, request):
        result = original(self, conn, request)
        if request.agent_id == "job" and request.expected_seq == 1:
            # stop the process from this (the writer) thread, so that it stops here,
            # before COMMIT, not a few system calls later
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        return result

    SQLiteBackend._append_one = append_then_freeze

    async def main(path):
        store = StateStore(SQLiteBackend(path))
        lease = await LeaseManager(store, holder="frozen").acquire("job", ttl=0.5)
        await store.save("job", {"by": "frozen", "step": 1}, lease=lease)
        print("holding", flush=True)
        await store.save("job", {"by": "frozen", "step": 2}, lease=lease)
        print("resumed and committed", flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _lock_is_held(path: Path) -> bool:
    with closing(sqlite3.connect(path, timeout=0, isolation_level=None)) as probe:
        try:
            probe.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            return "locked" in str(exc)
        probe.execute("ROLLBACK")
        return False


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextmanager
def frozen_writer(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process stopped inside a write transaction of ``path``."""
    asyncio.run(_create(path))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "holding"
        # conditions, not durations: the child is stopped, and holds the write lock
        _wait_for(lambda: _state(child.pid) == "T", "the child to be stopped")
        _wait_for(lambda: _lock_is_held(path), "the write lock to be held")
        yield child
    finally:
        if child.poll() is None:
            child.kill()  # SIGKILL ends a stopped process too
        child.wait()


async def _create(path: Path) -> None:
    async with StateStore(SQLiteBackend(path)) as store:
        await store.save("other", {"n": 0})


async def _expired(backend: SQLiteBackend) -> bool:
    lease = await backend.get_lease("job")
    return lease is not None and lease.expires_at <= backend.clock()


def test_takeover_and_other_writers_fail_fast_and_typed_while_a_writer_is_frozen(
    tmp_path: Path,
) -> None:
    path = tmp_path / "frozen.db"
    with frozen_writer(path) as child:

        async def meanwhile() -> None:
            backend = SQLiteBackend(path)  # opening needs no lock
            store = StateStore(backend)
            try:
                # reads never wait for the writer (WAL)
                assert (await store.load("job")).data == {"by": "frozen", "step": 1}
                deadline = time.monotonic() + 60
                while not await _expired(backend):  # the frozen holder's lease runs out
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.01)
                started = time.monotonic()
                with pytest.raises(StoreLocked) as info:
                    await LeaseManager(store, holder="rescuer").acquire("job", ttl=30)
                waited = time.monotonic() - started
                error = info.value
                assert isinstance(error, BackendError) and not error.maybe_applied
                assert "committed nothing" in str(error) and str(path) in str(error)
                assert waited < backend.busy_timeout / 2  # not the 30 s "database is locked"
                assert error.waited >= backend.stall_timeout
                with pytest.raises(StoreLocked):  # any other writer: the same answer
                    await store.save("other", {"n": 1})
            finally:
                await store.close()

        asyncio.run(meanwhile())
        child.kill()  # the frozen process dies: SQLite drops its lock and its rows
        child.wait()

    async def after() -> None:
        async with StateStore(SQLiteBackend(path)) as store:
            lease = await LeaseManager(store, holder="rescuer").acquire("job", ttl=30)
            assert lease.token == 2  # the takeover succeeds at once now
            await store.save("job", {"by": "rescuer"}, lease=lease)
            assert (await store.load("job")).data == {"by": "rescuer"}
            assert await store.head("job") == 2  # the frozen write never landed

    asyncio.run(after())


def test_a_resumed_writer_commits_and_a_later_takeover_fences_it_off(tmp_path: Path) -> None:
    path = tmp_path / "resumed.db"
    with frozen_writer(path) as child:
        assert child.stdout is not None
        os.kill(child.pid, signal.SIGCONT)  # resumes: commits step 2 under its lease
        assert child.stdout.readline().strip() == "resumed and committed"
        assert child.wait() == 0

    async def after() -> None:
        async with StateStore(SQLiteBackend(path)) as store:
            # once the old lease ran out (nobody renews it), the takeover is granted
            lease = await LeaseManager(store, holder="rescuer").acquire("job", ttl=30, wait=60)
            # the old holder's token is stale from now on
            with pytest.raises(LeaseLost):
                await store.backend.renew_lease("job", "frozen", 1, 30)
            await store.save("job", {"by": "rescuer"}, lease=lease)
            assert await store.head("job") == 3

    asyncio.run(after())


def test_a_busy_file_is_waited_for_not_reported_as_stalled(tmp_path: Path) -> None:
    """Another connection holding the lock in turns, committing each time, is progress:
    the waiting writer keeps waiting past stall_timeout and then writes."""
    path = tmp_path / "busy.db"
    asyncio.run(_create(path))
    backend = SQLiteBackend(path, stall_timeout=0.3)
    commits = 0
    holding = threading.Event()

    def hold_in_turns() -> None:
        nonlocal commits
        # hold the lock for ~1.2 s in all (4 x stall_timeout), committing every 0.1 s
        # and taking it again at once: progress, never a stall
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            end = time.monotonic() + 1.2
            other.execute("BEGIN IMMEDIATE")
            while time.monotonic() < end:
                other.execute(
                    "INSERT OR REPLACE INTO sk_meta(key, value) VALUES ('tick', ?)", (commits,)
                )
                other.execute("COMMIT")
                commits += 1
                holding.set()
                other.execute("BEGIN IMMEDIATE")
                time.sleep(0.1)  # work done while holding the lock
            other.execute("COMMIT")

    async def main() -> None:
        store = StateStore(backend)
        try:
            holder = asyncio.get_running_loop().run_in_executor(None, hold_in_turns)
            await asyncio.to_thread(holding.wait)
            await store.save("other", {"n": 1})  # waits its turn, no StoreLocked
            await holder
            assert (await store.load("other")).data == {"n": 1}
        finally:
            await store.close()

    asyncio.run(main())


def test_stall_timeout_is_validated(tmp_path: Path) -> None:
    from statekeeper.errors import ConfigurationError

    for bad in (0, -1, "2", True):
        with pytest.raises(ConfigurationError, match="stall_timeout"):
            SQLiteBackend(tmp_path / "x.db", stall_timeout=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()
