"""Storage engines behind one contract (:class:`Backend`).

The core engines (memory, SQLite, tiered) import eagerly. The server engines load on
first access (``from statekeeper.backends import PostgresBackend``) so the core has no
hard dependency on their drivers; a missing driver raises
:class:`~statekeeper.errors.BackendUnavailable` naming the extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Backend, Health
from .memory import MemoryBackend
from .sqlite import SQLiteBackend
from .tiered import TieredBackend
from .url import open_backend, tiered_url

if TYPE_CHECKING:
    from .postgres import PostgresBackend
    from .redis import RedisBackend
    from .s3 import S3Backend

__all__ = [
    "Backend",
    "Health",
    "MemoryBackend",
    "PostgresBackend",
    "RedisBackend",
    "S3Backend",
    "SQLiteBackend",
    "TieredBackend",
    "open_backend",
    "tiered_url",
]

_LAZY = {
    "PostgresBackend": (".postgres", "postgres"),
    "RedisBackend": (".redis", "redis"),
    "S3Backend": (".s3", "s3"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    from ..errors import BackendUnavailable

    module_name, extra = _LAZY[name]
    try:
        module = importlib.import_module(module_name, __name__)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise BackendUnavailable(
            f"{name} needs an optional dependency ({exc.name or exc}): "
            f"pip install 'statekeeper[{extra}]'"
        ) from exc
    return getattr(module, name)
