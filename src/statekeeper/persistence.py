"""The seed article's ``StatePersistenceManager``, made real.

The article's manager cached states in a dict, evicted by sorting (O(n log n)), kept a
write buffer that flushed only when full (never on its interval), swallowed every error
and "stored" with ``asyncio.sleep``. This one keeps the same names and call shapes but
sits on :class:`~statekeeper.store.StateStore`: an O(1) LRU cache, a write-behind
buffer flushed by size *and* interval, SHA-256 checksums, and typed errors.

Deviations from the article, on purpose:

* the default backend is ``LOCAL`` (an embedded SQLite file) — it needs no server;
  ``REDIS``, ``POSTGRESQL`` and ``S3`` are real engines (extras ``redis``, ``postgres``,
  ``s3``) found through a URL: ``url=``, else ``$STATEKEEPER_REDIS_URL`` (default
  ``redis://127.0.0.1:6379/0``), ``$STATEKEEPER_POSTGRES_URL`` (default
  ``postgresql://``: libpq's ``PGHOST``/``PGUSER``/… environment), ``$STATEKEEPER_S3_URL``
  (no default: S3 needs a bucket); a hybrid setup is a ``tiered://`` URL;
* ``save_state`` raises a :class:`~statekeeper.errors.StatekeeperError` subclass for bad
  input (for example :class:`~statekeeper.errors.SerializationError`) instead of logging
  and returning False, so nothing fails silently;
* ``durability`` can be ``"sync"`` or ``"group"`` when every save must be durable before
  it returns (the article's buffer is ``"async"``: bounded loss on a crash).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

import orjson

from .arguments import check_mapping, check_seq
from .backends.url import open_backend
from .codec.types import TypeRegistry, needs_tagging, to_plain
from .errors import ConfigurationError
from .store import StateStore

__all__ = [
    "BACKEND_URL_ENV",
    "StatePersistenceManager",
    "StateSnapshot",
    "StorageBackend",
    "backend_url",
]


class StorageBackend(Enum):
    """Where a :class:`StatePersistenceManager` keeps state (the seed's four options)."""

    REDIS = "redis"
    POSTGRESQL = "postgresql"
    S3 = "s3"
    LOCAL = "local"


@dataclass
class StateSnapshot:
    """A saved state as the seed describes it; ``checksum`` is SHA-256 of the canonical JSON."""

    agent_id: str
    state: dict[str, Any]
    timestamp: float
    version: int
    checksum: str = ""


def state_checksum(state: dict[str, Any], types: TypeRegistry | None = None) -> str:
    """SHA-256 hex digest of ``state`` serialized with sorted keys (typed values tagged
    as the codec stores them; ``types`` names the registered ones)."""
    if needs_tagging(state):
        state = to_plain(state, types, "state")
    return hashlib.sha256(orjson.dumps(state, option=orjson.OPT_SORT_KEYS)).hexdigest()


#: where each server backend's URL comes from when none is given
BACKEND_URL_ENV: dict[StorageBackend, tuple[str, str | None]] = {
    StorageBackend.REDIS: ("STATEKEEPER_REDIS_URL", "redis://127.0.0.1:6379/0"),
    StorageBackend.POSTGRESQL: ("STATEKEEPER_POSTGRES_URL", "postgresql://"),
    StorageBackend.S3: ("STATEKEEPER_S3_URL", None),
}

_SCHEME_BACKEND = {
    "redis": StorageBackend.REDIS,
    "rediss": StorageBackend.REDIS,
    "postgresql": StorageBackend.POSTGRESQL,
    "postgres": StorageBackend.POSTGRESQL,
    "s3": StorageBackend.S3,
}


def backend_url(backend: StorageBackend, path: str | None = None) -> str:
    """The URL a :class:`StatePersistenceManager` uses for ``backend`` with no ``url``."""
    if backend is StorageBackend.LOCAL:
        return "sqlite:///" + (path or os.environ.get("STATEKEEPER_DB", "statekeeper.db"))
    env, default = BACKEND_URL_ENV[backend]
    url = os.environ.get(env) or default
    if url is None:
        raise ConfigurationError(
            f"StorageBackend.{backend.name} needs a location: pass url='s3://bucket/prefix"
            f"?endpoint_url=…' or set {env}"
        )
    return url


class StatePersistenceManager:
    """Save and load whole agent states with caching and a write-behind buffer.

    Args:
        backend: which storage to use: ``LOCAL`` is a SQLite file at ``path``;
            ``REDIS``, ``POSTGRESQL`` and ``S3`` use ``url`` or their environment
            variable (see :data:`BACKEND_URL_ENV`). Default: ``LOCAL``, or the engine
            ``url`` names.
        path: the SQLite file for ``LOCAL`` (default ``$STATEKEEPER_DB`` or
            ``statekeeper.db``).
        url: a backend URL (``memory://``, ``redis://…``, ``postgresql://…``,
            ``s3://bucket/prefix?endpoint_url=…``, ``tiered://?hot=…&durable=…``).
        backend_options: keyword arguments for the engine (e.g. ``{"schema": "app"}``
            for PostgreSQL, ``{"ttl": 3600}`` for Redis, credentials for S3).
        flush_interval: seconds before buffered saves are written (seed: 5.0).
        buffer_size: buffered saves that trigger a flush (seed: 100).
        max_cache_size: states kept in memory (seed: 1000).
        durability: ``"async"`` (seed behaviour), ``"group"`` or ``"sync"``.
    """

    def __init__(
        self,
        backend: StorageBackend | None = None,
        *,
        path: str | None = None,
        url: str | None = None,
        backend_options: Mapping[str, Any] | None = None,
        flush_interval: float = 5.0,
        buffer_size: int = 100,
        max_cache_size: int = 1000,
        durability: str = "async",
        snapshot_every: int = 100,
    ) -> None:
        if backend is None:
            scheme = urlsplit(url).scheme.lower().split("+", 1)[0] if url else ""
            backend = _SCHEME_BACKEND.get(scheme, StorageBackend.LOCAL)
        self.backend = backend
        if url is None:
            url = backend_url(backend, path)
        self.url = url
        self.flush_interval = flush_interval
        self.max_cache_size = max_cache_size
        self.store = StateStore(
            open_backend(url, options=backend_options),
            durability=durability,
            flush_size=buffer_size,
            flush_interval=flush_interval,
            cache_size=max_cache_size,
            snapshot_every=snapshot_every,
        )

    async def __aenter__(self) -> StatePersistenceManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def save_state(self, agent_id: str, state: dict[str, Any], version: int = 1) -> bool:
        """Record ``state`` as the agent's current state (only the diff is written).

        Returns True once the save is accepted (buffered in ``async`` mode, committed
        otherwise). Raises a ``StatekeeperError`` subclass when it cannot be.
        """
        check_mapping(state, "state")
        check_seq(version, "version")
        await self.store.save(agent_id, state, schema_version=version)
        return True

    async def load_state(self, agent_id: str) -> dict[str, Any] | None:
        """The agent's latest state, or None if it was never saved."""
        snapshot = await self.store.get(agent_id)
        return snapshot.data if snapshot is not None else None

    async def load_snapshot(self, agent_id: str) -> StateSnapshot | None:
        """The latest state with its timestamp, version and SHA-256 checksum."""
        snapshot = await self.store.get(agent_id)
        if snapshot is None:
            return None
        return StateSnapshot(
            agent_id=agent_id,
            state=snapshot.data,
            timestamp=snapshot.updated_at,
            version=snapshot.schema_version,
            checksum=state_checksum(snapshot.data, self.store.codec.types),
        )

    async def delete_state(self, agent_id: str) -> bool:
        """Delete the agent's state and history."""
        return await self.store.delete(agent_id)

    async def flush(self) -> None:
        """Write every buffered save now."""
        await self.store.flush()

    _flush_buffer = flush  # the seed's name

    async def close(self) -> None:
        """Flush and release the storage."""
        await self.store.close()

    def get_stats(self) -> dict[str, Any]:
        """The seed's counters (cache_size, buffer_size, backend) plus cache hit/miss data."""
        stats = self.store.stats()
        return {
            "cache_size": stats.cache.size,
            "buffer_size": stats.buffered,
            "backend": self.backend.value,
            "cache_hits": stats.cache.hits,
            "cache_misses": stats.cache.misses,
            "cache_evictions": stats.cache.evictions,
            "cache_hit_rate": stats.cache.hit_rate,
            "durability": stats.durability,
            "appends": stats.appends,
        }
