"""The identity of the file at a path, ``(st_dev, st_ino)``: how the SQLite engine
tells that its store file or WAL was deleted, renamed or replaced while open (checked
before every commit, :meth:`.sqlite.SQLiteBackend._moved`).

:func:`python_file_id` is the reference. :data:`file_id` is what runs: the same in C
(``statekeeper.backends._fileid``, built from ``native/fileid.c`` when the package is
installed) when it was built, else the reference; ``STATEKEEPER_PURE=1`` in the
environment (read at import) forces the reference. Why native: ``os.stat`` builds an
``os.stat_result`` (ten fields, its times as floats and as nanoseconds) for the two
fields read here, ~5 k instructions a call, and a commit makes two — ~20 k of a
LangGraph saver's ``put`` + ``put_writes`` pair (docs/benchmarks.md, "lgonepath").
``tests/backends/test_sqlite_fileid.py`` holds the two to the same answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["NATIVE", "file_id", "python_file_id"]

FileId = Callable[[str], "tuple[int, int] | None"]


def python_file_id(path: str) -> tuple[int, int] | None:
    """``path``'s (device, inode); None when nothing is there."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_dev, st.st_ino)


def _load() -> FileId | None:
    if os.environ.get("STATEKEEPER_PURE", "") not in ("", "0"):
        return None
    try:
        from .. import _fileid
    except ImportError:  # installed without a compiler: the reference
        return None
    return _fileid.file_id


_built = _load()
#: whether :data:`file_id` is the C one
NATIVE = _built is not None
#: ``file_id(path) -> (st_dev, st_ino) | None``: the C one if built (and
#: ``STATEKEEPER_PURE`` is not set), else :func:`python_file_id`
file_id: FileId = _built if _built is not None else python_file_id
