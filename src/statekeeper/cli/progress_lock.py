"""One run at a time on a retention progress file (``retention apply --progress-file``).

A progress file records one run's resume point and what it did before it. Two runs
sharing one (two operators, a cron job overlapping the next) would each write their
own over the other's: a resume would start after an agent the other run did, and count
its work as done "before the resume". So a run holds ``<progress file>.lock`` while it
reads, writes and finally removes the file: an advisory ``flock`` that the operating
system releases when the holder exits or dies (as a migration journal's,
:mod:`statekeeper.schema.running`). A second run finds it held and is refused at once
with :class:`~statekeeper.errors.ProgressFileBusy`, naming the file and the holder; a
crashed run holds nothing, and the next run resumes from the file. A dry run neither
reads nor writes the file: it takes no lock. Without ``fcntl`` (not POSIX) none is taken.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from .._files import run_locked
from ..errors import ProgressFileBusy

__all__ = ["progress_held"]

#: how every lock file starts (a file without it was not written by a run: not touched)
_MARK = b"statekeeper retention progress lock: "


@contextlib.contextmanager
def progress_held(progress_file: Path | None) -> Iterator[None]:
    """Hold ``progress_file``'s lock for the block (nothing for None);
    :class:`ProgressFileBusy` when another run holds it."""
    if progress_file is None:
        yield
        return
    with run_locked(
        progress_file,
        _MARK,
        "retention progress file",
        lambda holder: ProgressFileBusy(str(progress_file), holder),
    ):
        yield
