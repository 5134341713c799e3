"""``drop_all`` takes the file's write lock as every other write does: it waits while
another connection holds the lock, instead of failing at once."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path

from statekeeper import StateStore
from statekeeper.backends.sqlite import SQLiteBackend

from ._sqlite_trace import detach_trace


async def test_drop_all_waits_for_a_lock_another_connection_holds(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    backend = SQLiteBackend(str(path))
    async with StateStore(backend) as store:
        await store.save("a", {"n": 1})
        await store.save("b", {"n": 2})
        tries = 0
        retried = threading.Event()

        def traced(statement: str) -> None:
            nonlocal tries
            if statement.startswith("BEGIN IMMEDIATE"):
                tries += 1
                if tries >= 2:  # the lock was found taken once: a wait, not a failure
                    retried.set()

        writer = backend._writer
        assert writer is not None
        writer.set_trace_callback(traced)
        holding = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        with closing(holding) as holder:
            holder.execute("BEGIN IMMEDIATE")

            def release() -> None:
                retried.wait()
                holder.execute("ROLLBACK")

            releaser = threading.Thread(target=release)
            releaser.start()
            try:
                assert await backend.drop_all() == 2
            finally:
                retried.set()
                releaser.join()
        await detach_trace(backend)
        assert await store.list_agents() == []
