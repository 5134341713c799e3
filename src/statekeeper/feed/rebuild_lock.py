"""Whether a projection's rebuild is alive: the rebuild lock.

A rebuild from the agents' states leaves the projection ``seeding`` until it has read
them all; a live runner (``run``) meanwhile applies nothing to it. A rebuild killed
there (SIGKILL, a crash) left it ``seeding`` for good: the live runner warned once and
waited for someone to run ``rebuild`` by hand. Now every rebuild holds
``<read model>.rebuild-<name>.lock`` (next to the read model's file, symlinks
resolved) for as long as it runs — an advisory ``flock``
the operating system releases when its process exits or dies — and a live runner that
finds the projection ``seeding`` with that lock free knows the rebuild is gone: it
finishes the rebuild itself (resuming the seeding where it stopped) and then follows.
A rebuild alive, in this process or another, holds the lock: the runner waits for it,
as before. A read model in memory (``":memory:"``, or ``""``: SQLite's private temporary
database), or a system without ``fcntl``,
has no lock: the runner waits, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from ..errors import ProjectionError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["abandoned", "rebuild_held"]

#: seconds between two tries of a rebuild waiting for another one to end
_POLL = 0.1


def _lock_path(path: str, name: str) -> str | None:
    if fcntl is None or path in ("", ":memory:") or path.startswith("file:"):
        # (a database of this connection only: "" is SQLite's private temporary one)
        return None
    # the read model's own lock, whatever path names it: a runner that opened it
    # through a symlink looked at another lock file, found it free while the rebuild
    # was alive, and "finished" it beside the rebuild
    return f"{os.path.realpath(path)}.rebuild-{name}.lock"


def _open(lock: str, name: str) -> int:
    """The lock file ``lock`` opened (created); one this process may not open (its
    permissions, a directory there, a read-only folder) is a :class:`ProjectionError`
    naming it, not a raw ``OSError`` out of ``run``/``rebuild``."""
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ProjectionError(
            f"projection {name!r}: cannot open its rebuild lock file {lock!r}"
            f" ({exc.strerror or exc}): let this user read and write that file (and"
            " create it in its folder), or remove what is there if it is not that lock"
            " file; the read model was not changed"
        ) from None


def _try(fd: int) -> bool:
    assert fcntl is not None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.asynccontextmanager
async def rebuild_held(path: str, name: str) -> AsyncIterator[None]:
    """Hold projection ``name``'s rebuild lock for the block (waiting while another
    rebuild holds it)."""
    lock = _lock_path(path, name)
    if lock is None:
        yield
        return
    fd = _open(lock, name)
    try:
        while True:  # (another process's lock: nothing to be woken by but a look)
            if _try(fd):
                break
            await asyncio.sleep(_POLL)
        yield
    finally:
        os.close(fd)  # (releases the flock)


def abandoned(path: str, name: str) -> bool:
    """Whether no rebuild of projection ``name`` holds its lock now (False when there is
    no lock to tell by: the caller waits)."""
    lock = _lock_path(path, name)
    if lock is None:
        return False
    fd = _open(lock, name)
    try:
        return _try(fd)
    finally:
        os.close(fd)
