"""What names a store in a file written for one run on it (a progress file, a journal):
the store's URL without its password, a SQLite file by its absolute path. A run resumed
from such a file refuses another store: it would skip that store's items up to the
file's resume point, as if done."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["store_identity"]


def _innermost(backend: Any) -> Any:
    """``backend`` without the wrappers around it (observed, governed: ``inner``)."""
    for _ in range(16):
        inner = getattr(backend, "inner", None)
        if inner is None or inner is backend:
            break
        backend = inner
    return backend


def store_identity(backend: Any) -> str | None:
    """``backend``'s store, in words with no password: ``sqlite:<absolute path>`` for a
    SQLite file, else the engine's repr (its URL masked); None for a store that dies
    with its process (memory, a SQLite ``:memory:`` database): no run on it resumes."""
    engine = _innermost(backend)
    name = getattr(engine, "name", None)
    if name == "memory":
        return None
    if name == "sqlite":
        path = getattr(engine, "path", None)
        if path is None or str(path) == ":memory:" or str(path).startswith("file::memory:"):
            return None
        return f"sqlite:{os.path.realpath(os.fspath(path))}"
    return repr(engine)
