"""The change feed's records: :class:`FeedRecord` (a row as a backend returns it) and
:class:`FeedEvent` (one verified event and its store-wide position)."""

from __future__ import annotations

from dataclasses import dataclass

from .decoded import Event
from .raw import RawEvent

__all__ = ["FeedEvent", "FeedRecord"]


@dataclass(frozen=True, slots=True)
class FeedRecord:
    """A row of the change feed as a backend returns it (see
    :meth:`~statekeeper.backends.base.Backend.read_feed`): the stored event of
    ``agent_id`` and its store-wide ``position``."""

    position: int
    agent_id: str
    event: RawEvent


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One verified event of the change feed: ``event`` and its store-wide ``position``
    (increasing in the order the appends committed; gaps are normal). Resume a
    subscription after a crash with ``from_position=`` the last position handled."""

    position: int
    event: Event
    #: the shard whose feed ``position`` belongs to (0 on a store with one feed; on a
    #: sharded store positions are per shard, see ``statekeeper.store.feed_cursor``)
    shard: int = 0
    #: True for a tombstone: the agent ``event.agent_id`` was deleted or forgotten
    #: (``event.type`` is ``"statekeeper.agent_deleted"``, ``event.seq`` the head it
    #: ended at, ``event.info["forgotten"]``): drop what was derived from its events
    deleted: bool = False

    @property
    def agent_id(self) -> str:
        return self.event.agent_id

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def type(self) -> str:
        return self.event.type
