"""What a file given to ``import`` or ``restore`` is, when it is not what the command
reads: a folder, a device, an empty file, a SQLite database (a store), an export given
to ``restore`` or a backup given to ``import``. Told from the file's kind and its first
bytes only (a store of gigabytes is never read through), before the target store is
opened: :class:`~statekeeper.errors.WrongFileKind`, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from ..errors import WrongFileKind

__all__ = ["check_input_file"]

#: the first 16 bytes of every SQLite database file (a statekeeper store on SQLite)
_SQLITE = b"SQLite format 3\x00"
#: how an export file starts (its header line, as ``export`` writes it)
_EXPORT = b'{"format":"statekeeper-export"'

_COPY = (
    "to copy a store into another, back it up and restore it (`statekeeper backup`,"
    " `statekeeper restore`), or export and import its agents (`statekeeper export`,"
    " `statekeeper import`)"
)


def check_input_file(path: Path, kind: Literal["export", "backup"]) -> None:
    """Refuse ``path`` (an existing path given for a statekeeper ``kind`` file) when it
    is plainly something else; a file of that kind, or one of no kind recognised, is
    left to the reader of ``kind`` files (which names what is wrong in it)."""
    what = f"a statekeeper {kind}" + (" file" if kind == "export" else "")
    if path.is_dir():
        raise WrongFileKind(str(path), f"it is a folder, not {what}")
    if not path.is_file():  # a device, a pipe, a socket (/dev/null)
        stdin = "; `-` reads stdin" if kind == "export" else ""
        raise WrongFileKind(
            str(path), f"not a regular file (a device, pipe or socket), not {what}{stdin}"
        )
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise WrongFileKind(str(path), f"cannot be read: {exc.strerror}") from None
    check_head(str(path), head, kind)


def check_head(name: str, head: bytes, kind: Literal["export", "backup"]) -> None:
    """Refuse the file ``name`` starting with ``head`` (its first 64 bytes or all of
    it) when it is empty or plainly not a ``kind`` file (stdin's, read whole, too)."""
    what = f"a statekeeper {kind}" + (" file" if kind == "export" else "")
    if not head:
        raise WrongFileKind(name, f"empty, not {what}")
    if head.startswith(_SQLITE):
        raise WrongFileKind(
            name, f"it is a SQLite database (a statekeeper store?), not {what}; {_COPY}"
        )
    from ..governance.backup.fileformat import MAGIC

    if kind == "export" and head.startswith(MAGIC[:-1]):
        raise WrongFileKind(
            name,
            "it is a statekeeper backup, not an export file: restore it with `statekeeper restore`",
        )
    if kind == "backup" and not head.startswith(MAGIC[:-1]) and _is_export(head):
        raise WrongFileKind(
            name,
            "it is a statekeeper export file, not a backup: import it with `statekeeper import`",
        )


def _is_export(head: bytes) -> bool:
    """Whether the first bytes are those of an export's header line (spaces between
    its JSON tokens allowed, as another tool may have rewritten it)."""
    return b"".join(head.split()).startswith(_EXPORT)
