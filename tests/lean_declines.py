"""Why the SQLite engine's lean keyed append (``SQLiteBackend.commit_keyed``) declined a
write, read right after it declined: for tests that count a run's lean appends.

How many of a run's writes the engine takes at once depends on thread scheduling: it
declines when the loop has other work (a task ready, a timer due, I/O ready: a pass of
the loop due), which another thread handing work to the loop, or a timer falling due on
a loaded machine, decides. So a test does not count them; it checks that every write
was either taken or declined with one of those reasons, still there when it looks (on
the loop's thread, before anything else ran on the loop: a ready callback stays queued
until the loop runs it, a due timer stays due and readable I/O readable until the loop
polls), and a deterministic test checks that with none of them the engine takes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from statekeeper.backends import sqlite
from statekeeper.backends.sqlite.loop import nothing_waits

#: the outcome of a write the engine took
LEAN = "lean"
#: why it declined one: what the engine checks before committing (commit_keyed)
TASK_READY = "a task ready"
LOOP_WAITS = "a pass of the loop due (a timer due, I/O ready)"
WRITER_BUSY = "the writer busy"
REASONS = frozenset({TASK_READY, LOOP_WAITS, WRITER_BUSY})


def why_declined(backend: sqlite.SQLiteBackend) -> str:
    """(On the loop's thread, right after ``backend.commit_keyed`` returned None.) The
    reason that is still there, or a sentence saying there is none."""
    loop: Any = asyncio.get_running_loop()
    if loop._ready:
        return TASK_READY
    if not nothing_waits(loop):
        return LOOP_WAITS
    if backend._checkpoint_due or backend._writer_busy.locked():
        return WRITER_BUSY
    return "declined with the loop idle and the writer free"


def recording(outcomes: list[str]) -> Callable[..., Any]:
    """``SQLiteBackend.commit_keyed`` that appends each call's outcome to ``outcomes``:
    :data:`LEAN`, or why it declined (:func:`why_declined`)."""
    commit_keyed = sqlite.SQLiteBackend.commit_keyed

    def recorded(backend: sqlite.SQLiteBackend, *args: Any) -> Any:
        result = commit_keyed(backend, *args)
        outcomes.append(LEAN if result is not None else why_declined(backend))
        return result

    return recorded
