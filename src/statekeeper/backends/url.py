"""Choosing a backend by URL: ``memory://``, ``sqlite:///path.db`` (and, when their
extras land, ``postgresql://…``, ``redis://…``, ``s3://bucket/prefix``)."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import BackendUnavailable, ConfigurationError
from .base import Backend

__all__ = ["open_backend"]

_PLANNED = {
    "postgresql": "PostgreSQL",
    "postgres": "PostgreSQL",
    "redis": "Redis",
    "rediss": "Redis",
    "s3": "S3",
}


def open_backend(url: str) -> Backend:
    """Build the backend a URL names.

    ``sqlite:///relative.db`` and ``sqlite:////abs/path.db`` follow SQLAlchemy's
    convention; a bare path (no scheme) is taken as a SQLite file. Query options:
    ``?synchronous=NORMAL`` and ``?busy_timeout=10`` for SQLite.
    """
    if not isinstance(url, str) or not url:
        raise ConfigurationError("a backend URL must be a non-empty string")
    if "://" not in url:
        from .sqlite import SQLiteBackend

        return SQLiteBackend(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        from .memory import MemoryBackend

        return MemoryBackend()
    if scheme == "sqlite":
        from .sqlite import SQLiteBackend

        path = unquote(url.split("://", 1)[1].split("?", 1)[0])
        if path.startswith("/"):
            path = path[1:]  # sqlite:///rel.db -> rel.db ; sqlite:////abs.db -> /abs.db
        if not path:
            raise ConfigurationError(f"no database path in {url!r}")
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        sync = options.pop("synchronous", "FULL").upper()
        try:
            timeout = float(options.pop("busy_timeout", "30"))
        except ValueError as exc:
            raise ConfigurationError(f"busy_timeout must be a number in {url!r}") from exc
        if options:
            raise ConfigurationError(f"unknown sqlite options {sorted(options)} in {url!r}")
        return SQLiteBackend(path, synchronous=sync, busy_timeout=timeout)  # type: ignore[arg-type]
    if scheme.split("+")[0] in _PLANNED:
        raise BackendUnavailable(
            f"the {_PLANNED[scheme.split('+')[0]]} backend is not available in this version "
            f"of statekeeper; use sqlite:///path.db or memory://"
        )
    raise ConfigurationError(f"unknown backend scheme {scheme!r} in {url!r}")
