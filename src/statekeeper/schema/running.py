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
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from .._files import run_locked
from ..errors import JournalBusy

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
    if journal is None:
        yield
        return
    key = os.path.realpath(journal)
    held = _HELD.get()
    if key in held:
        yield
        return
    token = _HELD.set(held | {key})
    try:
        with run_locked(
            journal, _MARK, "migration journal", lambda holder: JournalBusy(str(journal), holder)
        ):
            yield
    finally:
        _HELD.reset(token)


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
