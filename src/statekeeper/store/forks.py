"""A :class:`~statekeeper.store.StateStore` in a process forked from the one that made it.

The child inherits the store's connections (a SQLite file's, a PostgreSQL or Redis
pool's sockets), its thread pools (whose threads exist only in the parent) and its
write-behind buffer. Used there, PostgreSQL replies crossed between the two processes'
statements, a Redis call failed with asyncio's "attached to a different loop", a SQLite
commit waited for ever for the parent's commit thread, and a flush would write the
parent's buffered events a second time. So at the fork every store still open in the
parent is closed *in the child only*, without touching what it holds: each call there
raises :class:`~statekeeper.errors.StoreClosed` naming the fork, and ``close()`` does
nothing (the parent keeps its connections). Open a new store in the child (gunicorn's
``post_fork``, a multiprocessing initializer).

One ``os.register_at_fork`` hook for the process (made at import); a store costs one
``WeakSet.add`` when it is made, and its calls nothing (they check ``_closed`` already).
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["forked_message", "watch"]


class _Forkable(Protocol):
    _closed: bool
    _closed_why: str


#: what is open in this process, and what to open instead in a fork of it
_OPEN: weakref.WeakKeyDictionary[_Forkable, str] = weakref.WeakKeyDictionary()


def forked_message(parent: int, instead: str = "StateStore") -> str:
    """Why a store made in process ``parent`` refuses calls in this one."""
    return (
        f"this store was opened in process {parent}, and this process ({os.getpid()}) is "
        "a fork of it: its connections, threads and buffered writes are the parent's. "
        f"Open a new {instead} in this process"
    )


def _after_fork_in_child() -> None:
    parent = os.getppid()
    for thing, instead in list(_OPEN.items()):
        if not thing._closed:
            thing._closed = True
            thing._closed_why = forked_message(parent, instead)
    _OPEN.clear()


def watch(thing: _Forkable, instead: str = "StateStore") -> None:
    """Close ``thing`` (a store, the LangGraph saver's loop) in every process forked
    from this one (see the module); its message tells to open an ``instead``."""
    _OPEN[thing] = instead


os.register_at_fork(after_in_child=_after_fork_in_child)
