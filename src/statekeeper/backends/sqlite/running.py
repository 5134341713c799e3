"""The event loop an append runs on, found without ``asyncio.get_running_loop``'s
``getpid`` system call, and how often a loop of lone appends polls its loop
(:data:`PASS_EVERY`)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

#: the longest a loop of lone appends goes without polling its event loop (seconds;
#: see SQLiteBackend._open_commit): the I/O and timers of other tasks wait no longer
#: (a pass of the loop is made when the poll finds one). Read by :mod:`.lone` and
#: :mod:`.commits`, each its own import of it: a harness that changes it sets both
PASS_EVERY = 0.001

#: the clock of PASS_EVERY (asyncio's ``loop.time()``, without its method call)
_monotonic = time.monotonic

#: the asyncio event loop :meth:`SQLiteBackend.commit_next` (or :func:`_running_loop`)
#: last ran on (None: none yet, or forgotten at a fork). It is the running loop exactly
#: when its ``_thread_id`` is this thread's: asyncio's ``run_forever`` sets that on entry
#: and clears it on exit, and one thread runs one loop at a time. Checked so instead of calling
#: ``asyncio.get_running_loop()`` on every save, which in CPython 3.11 makes a
#: ``getpid`` system call each time (its check against a fork, which the reset below
#: keeps): ~1 us on this project's VMs (docs/benchmarks.md, "normalsave").
_last_loop: list[asyncio.BaseEventLoop | None] = [None]
_get_ident = threading.get_ident


def _forget_loop() -> None:
    _last_loop[0] = None


def _running_loop() -> asyncio.AbstractEventLoop:
    """The running event loop (RuntimeError outside one, as ``asyncio.get_running_loop``):
    :data:`_last_loop` when it runs on this thread, without the ``getpid`` system call
    of ``asyncio.get_running_loop`` — which the group committer's appends made once a
    save (``strace -c``: one ``getpid`` a save at 16 agents) —, else asked and kept
    there when it is an asyncio event loop (uvloop's is asked every time)."""
    loop = _last_loop[0]
    if loop is not None and loop._thread_id == _get_ident():  # type: ignore[attr-defined]
        return loop
    running = asyncio.get_running_loop()
    if isinstance(running, asyncio.BaseEventLoop):
        _last_loop[0] = running
    return running


os.register_at_fork(after_in_child=_forget_loop)
