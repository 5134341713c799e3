"""The store layer: caching, durability modes, snapshots, verification, agents."""

from .agent import DurableAgent
from .cache import CacheStats, LRUCache
from .store import DEFAULT_URL, Problem, StateStore, StoreStats, VerifyReport
from .sync import SyncDurableAgent, SyncStateStore

__all__ = [
    "DEFAULT_URL",
    "CacheStats",
    "DurableAgent",
    "LRUCache",
    "Problem",
    "StateStore",
    "StoreStats",
    "SyncDurableAgent",
    "SyncStateStore",
    "VerifyReport",
]
