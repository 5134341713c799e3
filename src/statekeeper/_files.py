"""Small files written atomically and durably: a key file, a witness, a journal, a
progress file. One implementation below every layer that writes one."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["new_temporary", "sync_directory", "write_atomically"]


def new_temporary(target: Path, mode: int = 0o666) -> tuple[int, Path]:
    """A new, empty temporary file beside ``target`` (to be renamed over it), opened for
    writing: its name is random and it is created exclusively (``O_EXCL``), so it is
    never a file that was there — someone's ``notes.json.tmp``, or a symlink to a file
    elsewhere that would be written through — nor a leftover of a run killed earlier."""
    while True:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits taken
            continue


def write_atomically(target: Path, text: str, *, mode: int = 0o666, durable: bool = True) -> None:
    """Write ``text`` to ``target`` atomically: a new temporary file beside it (created
    with ``mode``, less the umask), flushed to disk unless not ``durable`` (a progress
    file written once per item), then renamed over it. A crash leaves the old file or
    the new one, never a mix (small file: blocking is fine). ``durable``: the rename
    itself is flushed too (the directory), so a power loss after the return cannot
    bring the old file back (a key file without the key just added and used)."""
    fd, tmp = new_temporary(target, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        sync_directory(target.parent)


def sync_directory(folder: Path) -> None:
    """Flush ``folder``'s entries to disk (a file just created or renamed in it): until
    then a power loss can undo the rename. A no-op where directories cannot be opened
    or synced (Windows, some network file systems)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
