"""The running store's memory of the streams it saw: a stream found shorter than that
is a store that went back in time.

A server that loses its last writes keeps running and keeps the store's identity:
Redis restarted from an AOF or RDB that misses the last second, a PostgreSQL replica
promoted behind its primary, a backup restored under a live process. The chain and the
head tag of what is left verify — it is an older state of the same streams. Before,
the store took the missing cached seq for a stream deleted by someone else, served the
older state and wrote new events over the seqs of acknowledged ones, without a word.

:class:`RecordCache` is the store's cache of folded states; a state it drops because
its stream no longer holds it (:meth:`RecordCache.discard`: a refresh that found the
cached seq gone, an append that met another head) is remembered as (seq, creation
time), bounded. The next read of that agent from storage (:meth:`RecordCache.check`)
compares: the same stream (its first event's time unchanged) with a lower head is
:class:`~statekeeper.errors.RollbackDetected`, raised once — later reads serve what is
stored. A stream deleted and created again by another process starts at another time,
and is not a rollback. Dropping a state on purpose (this store deleted the agent,
shredded or rewrote it) is :meth:`RecordCache.forget`, which remembers nothing.

The witness file (:mod:`statekeeper.security.highwater`) sees the same across
restarts of the process; this needs no file and costs nothing on the write path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import RollbackDetected
from .cache import LRUCache

if TYPE_CHECKING:
    from .state import AgentRecord

__all__ = ["REMEMBERED", "RecordCache"]

#: how many dropped states are remembered (the oldest is forgotten first)
REMEMBERED = 4096


class RecordCache(LRUCache[str, "AgentRecord"]):
    """The LRU cache of folded states, remembering the ones storage no longer held."""

    __slots__ = ("gone",)

    def __init__(self, max_size: int) -> None:
        super().__init__(max_size)
        #: agent id -> (seq, created_at) of a state dropped by :meth:`discard`
        self.gone: dict[str, tuple[int, float]] = {}

    def discard(self, key: str) -> None:
        """Drop the cached state of ``key``: it may no longer be what is stored."""
        record = self._data.pop(key, None)
        if record is None:
            return
        self.dropped = True
        gone = self.gone
        gone.pop(key, None)
        gone[key] = (record.seq, record.created_at)
        if len(gone) > REMEMBERED:
            del gone[next(iter(gone))]

    def forget(self, key: str) -> None:
        """Drop the cached state of ``key`` on purpose (deleted or replaced by this store)."""
        if self._data.pop(key, None) is not None:
            self.dropped = True
        self.gone.pop(key, None)

    def check(self, record: AgentRecord) -> None:
        """Raise :class:`RollbackDetected` when ``record``, just read from storage, is
        the same stream as a state dropped earlier, at a lower seq."""
        seen = self.gone.pop(record.agent_id, None)
        if seen is None:
            return
        seq, created_at = seen
        if record.seq < seq and record.created_at == created_at:
            raise RollbackDetected(
                record.agent_id,
                seq,
                record.seq,
                "this process's memory",
                f"this process saw seq {seq} stored and the store now ends at seq "
                f"{record.seq}: writes acknowledged after it were lost by the server "
                "(restarted from an older copy?); later reads serve what is stored",
            )
