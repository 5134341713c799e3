"""SQLite backend, the embedded default: :class:`SQLiteBackend` (``backend.py``) and
its parts, one job each — the file opened or created (``opening.py``, ``schema.py``),
connections and write transactions (``connections.py``), WAL checkpoints
(``checkpoints.py``), appends (``appends.py``, ``changes.py``, ``lone.py``,
``commits.py``, their statements in ``statements.py``, the running loop found by
``running.py``; ``engine.py`` declares what the parts use of each other), the reads
(``reads.py``), leases (``leases.py``), maintenance (``admin.py``), what every part
stands on (``base.py``); the change feed's
tables (``feed.py``); a file inspected (``files.py``), exported (``export.py``),
imaged page by page (``pages.py``, ``pagepass.py``, ``prefetch.py``, ``fds.py``) and
imported (``importing.py``); the WAL's frames and growth (``wal.py``); a file's
identity (``fileid.py``); the event loop's idle check (``loop.py``). The compiled
parts stay beside the package, in ``statekeeper.backends`` (``_pagepass``,
``_fileid``: their build names in setup.py)."""

from .backend import SQLiteBackend
from .checkpoints import CHECKPOINT_PAGES
from .commits import _settle as _settle  # (tests settle a queue with it)
from .connections import WRITER_READS
from .lone import _BUSY as _BUSY  # (tests hold a lone append busy with it)
from .opening import PAGE_SIZE
from .schema import SCHEMA_VERSION

__all__ = ["CHECKPOINT_PAGES", "PAGE_SIZE", "SCHEMA_VERSION", "WRITER_READS", "SQLiteBackend"]
