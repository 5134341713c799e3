"""Small files written atomically and durably: a key file, a witness, a journal, a
progress file. One implementation below every layer that writes one."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(target: Path, text: str, *, mode: int = 0o666, durable: bool = True) -> None:
    """Write ``text`` to ``target`` atomically: a temporary file beside it (created with
    ``mode``, less the umask), flushed to disk unless not ``durable`` (a progress file
    written once per item), then renamed over it. A crash leaves the old file or the
    new one, never a mix (small file: blocking is fine)."""
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, target)
