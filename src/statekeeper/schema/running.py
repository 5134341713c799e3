"""One run at a time on a migration journal: the run lock.

A journal records one run (where it resumes, whether it finished, its rollback). Two
processes running ``statekeeper migrate`` (or a rollback, or a finalize) on the same
journal at once would each write their own record over the other's, page after page:
the file would end with whichever wrote last, and a resume would start after a page
the other run never finished. So every run holds ``<journal>.lock`` for as long as it
uses the journal: an advisory ``flock`` that the operating system releases when the
holder exits or dies. A second run finds it held and raises
:class:`~statekeeper.errors.JournalBusy` at once, naming the holder. A run whose process
crashed holds nothing: the next run on the journal takes the lock and resumes the
interrupted run from its journal, as after any interruption — a crash never blocks.

Re-entrant within one task (a finalize runs a migrate on its journal). Without
``fcntl`` (not POSIX) no lock is taken.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from ..errors import JournalBusy, NotOwned

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["holds_journal", "journal_held"]

P = ParamSpec("P")
T = TypeVar("T")

#: how every lock file starts (a file without it was not written by a run: not touched)
_MARK = b"statekeeper migration run lock: "

_HELD: ContextVar[frozenset[str]] = ContextVar("statekeeper_journals_held", default=frozenset())


def lock_path(journal: Path) -> Path:
    """The lock file of ``journal``."""
    return journal.with_name(journal.name + ".lock")


@contextlib.contextmanager
def journal_held(journal: Path | None) -> Iterator[None]:
    """Hold ``journal``'s run lock for the block (nothing when ``journal`` is None or
    already held by this task); :class:`JournalBusy` when another run holds it."""
    if journal is None or fcntl is None:
        yield
        return
    key = os.path.realpath(journal)
    held = _HELD.get()
    if key in held:
        yield
        return
    path = lock_path(journal)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        found = os.pread(fd, 512, 0)
        if found and not found.startswith(_MARK):  # never written by a run: not ours
            raise NotOwned(
                f"{path} is the lock file of migration journal {journal}, but it holds "
                "something else: it was left untouched (move it, or give another journal)"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = found[len(_MARK) :].decode("utf-8", "replace").strip()
            raise JournalBusy(str(journal), holder or "unknown") from None
        # who holds it, for the message of a run refused meanwhile
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        who = f"pid {os.getpid()} on {socket.gethostname()} since {stamp} UTC"
        os.pwrite(fd, _MARK + who.encode(), 0)
        token = _HELD.set(held | {key})
        try:
            yield
        finally:
            _HELD.reset(token)
            os.ftruncate(fd, 0)
            os.pwrite(fd, _MARK, 0)
    finally:
        os.close(fd)  # (releases the flock)


def holds_journal(
    fn: Callable[P, Awaitable[T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """``fn`` (migrate, rollback, finalize: ``journal`` and ``dry_run`` keywords) run
    holding its journal's run lock (none for a dry run, which writes no journal)."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kw: P.kwargs) -> T:
        journal = kw.get("journal")
        held = None if journal is None or kw.get("dry_run") else Path(journal)  # type: ignore[arg-type]
        with journal_held(held):
            return await fn(*args, **kw)

    return run
