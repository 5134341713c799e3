"""Storage engines behind one contract (:class:`Backend`)."""

from .base import Backend, Health
from .memory import MemoryBackend
from .sqlite import SQLiteBackend
from .url import open_backend

__all__ = ["Backend", "Health", "MemoryBackend", "SQLiteBackend", "open_backend"]
