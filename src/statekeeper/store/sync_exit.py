"""Sync facades left open at interpreter exit: their stores are flushed, then closed.

A :class:`~statekeeper.store.sync.SyncStateStore` runs its store on a loop of its own, on
a daemon thread: an application that never closed it lost every write still in the
write-behind buffer (``durability="async"``) and the witness's last marks when the
interpreter ended, without a word. Each open facade's store is flushed from a
``threading`` exit hook, which runs before Python stops its thread pools (a SQLite
store's writer thread, ``asyncio.to_thread``) and while the facade's thread still runs.
Any object with a ``_portal`` (the loop its store runs on) and a ``store`` is taken: the
LangGraph saver registers its own here too (``integrations/langgraph/state.py``).

Flushed is not closed: the facade's loop kept its store's tasks (a PostgreSQL pool's
workers, its backend's watcher) pending on a daemon thread, and whether the
interpreter's teardown collected them — asyncio printing "Task was destroyed but it is
pending!" for each — was a matter of chance. :func:`close_at_exit` also closes the
facade from an ``atexit`` hook (after the flush, and after the exit hooks the
application registered later, which may still use it): its tasks end and its loop
stops before the interpreter tears anything down.
"""

from __future__ import annotations

import atexit
import builtins
import concurrent.futures.thread  # noqa: F401 (its exit hook registered before ours)
import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends.recovery import process_exiting
from ..errors import WriteBufferError
from . import unflushed

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["OPEN", "close_at_exit", "flush_at_exit"]

#: the facades still open (their ``close`` takes them out)
OPEN: weakref.WeakSet[Any] = weakref.WeakSet()
_hook = threading.Lock()
_hooked = False


def flush_at_exit(facade: Any) -> None:
    """Flush ``facade``'s store at interpreter exit unless it was closed before."""
    global _hooked
    with _hook:
        if not _hooked:
            # threading's exit hooks run in reverse order, before atexit's: registered
            # after concurrent.futures' own (imported above), this one runs first
            register = getattr(threading, "_register_atexit", None)
            if register is None:  # pragma: no cover - every supported Python has it
                return
            register(_flush_open)
            _hooked = True
    OPEN.add(facade)


def close_at_exit(facade: Any, *, flush: bool = True) -> Callable[[], None]:
    """Close ``facade`` (``facade.close()``) at interpreter exit unless it was closed (or
    collected) before, its store flushed first by :func:`flush_at_exit` when ``flush``.

    Returns the ``atexit`` hook, for the facade's ``close`` to unregister. Only a weak
    reference is held: the facade stays collectable (and its hook then goes too)."""
    ref = weakref.ref(facade)

    def close() -> None:
        found = ref()
        if found is not None:
            with contextlib.suppress(Exception):  # exiting anyway: never a traceback
                found.close()

    atexit.register(close)
    weakref.finalize(facade, atexit.unregister, close).atexit = False
    if flush:
        flush_at_exit(facade)
    return close


def _flush_open() -> None:
    open_now = builtins.list(OPEN)
    if open_now:
        # (a server that cannot be reached is tried for seconds, not a whole retry_timeout)
        process_exiting()
    for facade in open_now:
        with contextlib.suppress(Exception):  # exiting anyway: the store logs what failed
            if not facade._portal.running:
                continue
            try:
                facade._portal.call(_flush(facade.store))
            except WriteBufferError as exc:  # nobody will flush again: said here
                unflushed.lost_at_exit(exc.failures)


async def _flush(store: StateStore) -> None:
    await store.flush()
    if store.witness is not None:  # (its store's identity left to a later run: no call)
        await store.witness.flush(identify=False)
