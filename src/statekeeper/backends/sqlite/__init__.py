"""SQLite backend, the embedded default: :class:`SQLiteBackend` (``backend.py``) and
its parts, one job each — the reads (``reads.py``), leases (``leases.py``),
maintenance (``admin.py``), what the parts stand on (``base.py``); the change feed's
tables (``feed.py``); a file inspected (``files.py``), exported (``export.py``),
imaged page by page (``pages.py``, ``pagepass.py``, ``prefetch.py``, ``fds.py``) and
imported (``importing.py``); the WAL's frames and growth (``wal.py``); a file's
identity (``fileid.py``); the event loop's idle check (``loop.py``). The compiled
parts stay beside the package, in ``statekeeper.backends`` (``_pagepass``,
``_fileid``: their build names in setup.py)."""

from .backend import _BUSY as _BUSY  # (tests hold a lone append busy with it)
from .backend import (
    CHECKPOINT_PAGES,
    PAGE_SIZE,
    SCHEMA_VERSION,
    WRITER_READS,
    SQLiteBackend,
)

__all__ = ["CHECKPOINT_PAGES", "PAGE_SIZE", "SCHEMA_VERSION", "WRITER_READS", "SQLiteBackend"]
