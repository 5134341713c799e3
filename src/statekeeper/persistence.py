"""The seed article's ``StatePersistenceManager``, made real.

The article's manager cached states in a dict, evicted by sorting (O(n log n)), kept a
write buffer that flushed only when full (never on its interval), swallowed every error
and "stored" with ``asyncio.sleep``. This one keeps the same names and call shapes but
sits on :class:`~statekeeper.store.StateStore`: an O(1) LRU cache, a write-behind
buffer flushed by size *and* interval, SHA-256 checksums, and typed errors.

Deviations from the article, on purpose:

* the default backend is ``LOCAL`` (an embedded SQLite file) — it needs no server;
* ``save_state`` raises a :class:`~statekeeper.errors.StatekeeperError` subclass for bad
  input (for example :class:`~statekeeper.errors.SerializationError`) instead of logging
  and returning False, so nothing fails silently;
* ``durability`` can be ``"sync"`` or ``"group"`` when every save must be durable before
  it returns (the article's buffer is ``"async"``: bounded loss on a crash).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from .errors import BackendUnavailable
from .store import StateStore

__all__ = ["StatePersistenceManager", "StateSnapshot", "StorageBackend"]


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


def state_checksum(state: dict[str, Any]) -> str:
    """SHA-256 hex digest of ``state`` serialized with sorted keys."""
    return hashlib.sha256(orjson.dumps(state, option=orjson.OPT_SORT_KEYS)).hexdigest()


class StatePersistenceManager:
    """Save and load whole agent states with caching and a write-behind buffer.

    Args:
        backend: which storage to use; ``LOCAL`` is a SQLite file at ``path``.
        path: the SQLite file for ``LOCAL`` (default ``$STATEKEEPER_DB`` or
            ``statekeeper.db``).
        url: a backend URL, overriding ``backend``/``path`` (e.g. ``memory://``).
        flush_interval: seconds before buffered saves are written (seed: 5.0).
        buffer_size: buffered saves that trigger a flush (seed: 100).
        max_cache_size: states kept in memory (seed: 1000).
        durability: ``"async"`` (seed behaviour), ``"group"`` or ``"sync"``.
    """

    def __init__(
        self,
        backend: StorageBackend = StorageBackend.LOCAL,
        *,
        path: str | None = None,
        url: str | None = None,
        flush_interval: float = 5.0,
        buffer_size: int = 100,
        max_cache_size: int = 1000,
        durability: str = "async",
        snapshot_every: int = 100,
    ) -> None:
        self.backend = backend
        if url is None:
            if backend is not StorageBackend.LOCAL:
                raise BackendUnavailable(
                    f"StorageBackend.{backend.name} is not available in this version; "
                    "use StorageBackend.LOCAL (SQLite) or url='memory://'"
                )
            url = "sqlite:///" + (path or os.environ.get("STATEKEEPER_DB", "statekeeper.db"))
        self.flush_interval = flush_interval
        self.max_cache_size = max_cache_size
        self.store = StateStore(
            url,
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
            checksum=state_checksum(snapshot.data),
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
