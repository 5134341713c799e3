"""The running store's memory of the streams it saw: a stream found shorter than that,
or with another history under the same seqs, is a store that went back in time.

A server that loses its last writes keeps running and keeps the store's identity:
Redis restarted from an AOF or RDB that misses the last second, a PostgreSQL replica
promoted behind its primary, a backup restored under a live process. The chain and the
head tag of what is left verify — it is an older state of the same streams. Before,
the store took the missing cached seq for a stream deleted by someone else, served the
older state and wrote new events over the seqs of acknowledged ones, without a word.

:class:`RecordCache` is the store's cache of folded states; a state it drops because
its stream no longer holds it (:meth:`RecordCache.discard`: a refresh that found the
cached seq gone or another event there, an append that met another head) is
remembered as a :class:`Seen` (seq, creation time, time of the event at that seq),
bounded. The next read of that agent from storage compares (:func:`went_back`, on the
record read and the time of the event now stored at the remembered seq):

* the same stream (its first event's time unchanged) with a lower head, or
* the same stream at or past the remembered seq whose event there is another one (a
  server that lost writes, after which this process or another wrote past the old
  head: the seq is no longer lower, the history differs)

is :class:`~statekeeper.errors.RollbackDetected`, raised once — later reads serve what
is stored. The event's time comes with the read where the engine reads the latest
state in one call (SQLite, PostgreSQL, Redis: the events after the latest snapshot);
when a snapshot was taken past the remembered seq, or on the other engines (memory,
S3, tiered), it is one more read of one event — on this path alone, never on a read
or write of an agent that storage still holds as this store saw it. A rekey rewrites
the events' bytes, not their times, and is not a rollback; neither is a compacted
stream whose event at that seq is gone, nor a stream deleted and created again by
another process (it starts at another time).

A stream wholly gone cannot be told from one deleted by another process by the stream
alone (a delete leaves no trace in storage): the store asks its witness file then
(:mod:`statekeeper.security.highwater`, whose deletes are marked before the rows go);
without a witness it is served as not found. Dropping a state on purpose (this store
deleted the agent, shredded or rewrote it) is :meth:`RecordCache.forget`, which
remembers nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..errors import RollbackDetected
from .cache import LRUCache

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..records import EventRow
    from .state import AgentRecord

__all__ = [
    "MEMORY",
    "REMEMBERED",
    "Ask",
    "RecordCache",
    "Seen",
    "check_seen",
    "vanished",
    "went_back",
]

#: how many dropped states are remembered (the oldest is forgotten first)
REMEMBERED = 4096
#: the witness named by a rollback this memory found
MEMORY = "this process's memory"

#: asked with an agent found gone and the seq seen of it: raises when that is a
#: rollback (the store's witness knows it acknowledged and not deleted), else returns
Ask = Callable[[str, int], Awaitable[None]]


class Seen(NamedTuple):
    """What the store saw of a stream whose state it dropped."""

    seq: int
    #: the stream's first event's time (its incarnation)
    created_at: float
    #: the time of the event at ``seq``
    updated_at: float


class RecordCache(LRUCache[str, "AgentRecord"]):
    """The LRU cache of folded states, remembering the ones storage no longer held."""

    __slots__ = ("gone",)

    def __init__(self, max_size: int) -> None:
        super().__init__(max_size)
        #: agent id -> what was seen of a state dropped by :meth:`discard`
        self.gone: dict[str, Seen] = {}

    def discard(self, key: str) -> None:
        """Drop the cached state of ``key``: it may no longer be what is stored."""
        record = self._data.pop(key, None)
        if record is None:
            return
        self.dropped = True
        gone = self.gone
        gone.pop(key, None)
        gone[key] = Seen(record.seq, record.created_at, record.updated_at)
        if len(gone) > REMEMBERED:
            del gone[next(iter(gone))]

    def forget(self, key: str) -> None:
        """Drop the cached state of ``key`` on purpose (deleted or replaced by this store)."""
        if self._data.pop(key, None) is not None:
            self.dropped = True
        self.gone.pop(key, None)

    def take(self, key: str) -> Seen | None:
        """What was seen of ``key``'s dropped state, forgotten now (checked once)."""
        return self.gone.pop(key, None) if self.gone else None


def same_stream_further(seen: Seen, record: AgentRecord) -> bool:
    """``record`` is the stream ``seen`` was (the same first event's time), at or
    past its seq: whether it still holds what was seen is the event at that seq."""
    return record.created_at == seen.created_at and record.seq >= seen.seq


def went_back(seen: Seen, record: AgentRecord, stamp: float | None) -> None:
    """Raise :class:`RollbackDetected` when ``record``, just read from storage, is the
    stream ``seen`` was at a lower seq, or at or past it with another event at that
    seq (``stamp``: the time of the event stored there now, None when not known)."""
    if record.created_at != seen.created_at:
        return  # another incarnation: deleted and created again
    seq, agent_id = seen.seq, record.agent_id
    if record.seq < seq:
        raise RollbackDetected(
            agent_id,
            seq,
            record.seq,
            MEMORY,
            f"this process saw seq {seq} stored and the store now ends at seq "
            f"{record.seq}: writes acknowledged after it were lost by the server "
            "(restarted from an older copy?); later reads serve what is stored",
        )
    if stamp is not None and stamp != seen.updated_at:
        raise RollbackDetected(
            agent_id,
            seq,
            record.seq,
            MEMORY,
            f"this process saw seq {seq} stored and the store now holds another event at "
            f"seq {seq} (ending at seq {record.seq}): writes acknowledged up to it were "
            "lost by the server (restarted from an older copy?) and other writes made "
            "since in their place; later reads serve what is stored",
        )


async def check_seen(
    cache: RecordCache, backend: Backend, record: AgentRecord, events: Sequence[EventRow]
) -> None:
    """:func:`went_back` of ``record`` (just read from ``backend``, ``events`` the event
    rows read with it) if ``cache`` dropped its agent's state as no longer stored."""
    seen = cache.take(record.agent_id)  # (None at once when nothing was dropped)
    if seen is None:
        return
    stamp = None
    if same_stream_further(seen, record):  # the event at the seq seen: the same one?
        stamp = next((e[2] for e in events if e[0] == seen.seq), None)
        if stamp is None:  # (a snapshot past it: one read of one event, here only)
            raws = await backend.read(record.agent_id, seen.seq - 1, seen.seq, limit=1)
            if raws and raws[0].seq == seen.seq:
                stamp = raws[0].timestamp
    went_back(seen, record, stamp)


async def vanished(cache: RecordCache, agent_id: str, ask: Ask | None) -> AgentRecord | None:
    """``agent_id`` has no stream: if ``cache`` dropped its state as no longer stored,
    ``ask`` (the store's witness) whether it was deleted or lost; None (not found) when
    that did not raise."""
    seen = cache.take(agent_id)
    if seen is not None and ask is not None:
        await ask(agent_id, seen.seq)
    return None
