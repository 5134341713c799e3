"""Detaching a trace callback from a SQLite backend's writer connection, safely.

pysqlite's ``set_trace_callback`` takes the connection's SQLite mutex while holding the
GIL, and a statement running on another thread holds that mutex while its trace
callback waits for the GIL: detached from the event loop while the writer thread runs
a statement of its own (the WAL growth step queued after a write at
``synchronous=FULL``), the two threads wait on each other for ever. Detached on the
writer thread, behind whatever was queued there, nothing else uses the connection.
"""

from __future__ import annotations

import asyncio

from statekeeper.backends.sqlite import SQLiteBackend


async def detach_trace(backend: SQLiteBackend) -> None:
    conn = backend._writer
    assert conn is not None
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(backend._writer_pool, conn.set_trace_callback, None)
