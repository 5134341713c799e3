"""Part of the backend contract, the reads: events, snapshots, latest state, agent
listings: the abstract methods and defaults :class:`~statekeeper.backends.base.Backend`
takes from :class:`ReadsContract`."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import CapabilityUnsupported
from ...records import (
    AgentInfo,
    EventRow,
    RawEvent,
    RawSnapshot,
    event_rows,
)
from .capabilities import LatestRead

if TYPE_CHECKING:
    from .part import ContractPart
else:
    ContractPart = abc.ABC  # (the type checker sees what the other parts declare)


class ReadsContract(ContractPart):
    @abc.abstractmethod
    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        """Events with ``after_seq < seq <= to_seq`` in seq order (at most ``limit``)."""

    @abc.abstractmethod
    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        """The last seq whose event timestamp is ``<= timestamp`` (0 if none)."""

    @abc.abstractmethod
    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        """Store a snapshot (replacing one at the same seq). The event at its seq must exist."""

    @abc.abstractmethod
    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        """The snapshot with the highest seq ``<= at_or_below`` (any seq when None)."""

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        """The agent's latest state in one call: ``(snapshot, events)`` — the snapshot
        with the highest seq (None when the agent has none) and every event after it
        (after seq 0 without a snapshot), in seq order.

        ``(None, [])`` for an unknown or deleted agent. The default composes
        :meth:`latest_snapshot` and :meth:`read` (two reads); engines override it with
        one consistent read (SQLite: one read transaction; PostgreSQL: one round trip;
        Redis: one script), so a concurrent append never splits the pair.
        """
        snapshot = await self.latest_snapshot(agent_id)
        events = await self.read(agent_id, after_seq=snapshot.seq if snapshot else 0)
        return snapshot, events

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        """What a cold load of the latest state needs, in one call: ``(head, tag,
        snapshot, events)`` — :meth:`head_tag` and :meth:`read_latest` together.

        ``(0, None, None, [])`` for an unknown or deleted agent. The default makes the
        two calls (two reads: an append between them may put events, or a snapshot,
        past ``head``; the caller ignores those). Engines override it with one
        consistent read (SQLite and PostgreSQL: one statement), where then
        ``snapshot.seq <= head`` and the events end at ``head``.
        """
        head, tag = await self.head_tag(agent_id)
        if head == 0:
            return 0, None, None, []
        snapshot, events = await self.read_latest(agent_id)
        return head, tag, snapshot, events

    async def read_state_rows(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[EventRow]]:
        """:meth:`read_state` with the events as :data:`~statekeeper.records.EventRow`
        tuples: what a fold replays. The default converts :meth:`read_state`'s events;
        an engine whose cursor returns such rows hands them over as they are (SQLite),
        with no :class:`RawEvent` built per event."""
        head, tag, snapshot, events = await self.read_state(agent_id)
        return head, tag, snapshot, event_rows(events)

    async def read_latest_many(self, agent_ids: Sequence[str]) -> list[LatestRead | None]:
        """Many agents' latest states in one call: for each of ``agent_ids`` (in order)
        a :class:`LatestRead` (head, head tag, latest snapshot, the events after it), or
        None for an agent without a stream. What a bulk pass over the store (a schema
        migration) needs instead of one head read and one latest read per agent.

        The default reads each agent in turn (:meth:`read_state`); an engine that
        answers in one consistent read sets :attr:`reads_latest_many` (SQLite: one read
        transaction per call; PostgreSQL: one statement)."""
        out: list[LatestRead | None] = []
        for agent_id in agent_ids:
            head, tag, snapshot, events = await self.read_state(agent_id)
            if head == 0:
                out.append(None)
                continue
            out.append(LatestRead(head, tag, snapshot, [e for e in events if e.seq <= head]))
        return out

    @abc.abstractmethod
    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """Agents ordered by id, strictly after ``after``, at most ``limit`` of them."""

    async def read_heads(self, agent_ids: Sequence[str]) -> list[RawEvent | None]:
        """The event at each agent's head (None for an agent without a stream), in the
        order of ``agent_ids``: what listing many agents' states needs. The default
        reads each agent's head and that event; SQLite and PostgreSQL answer in one
        statement."""
        out: list[RawEvent | None] = []
        for agent_id in agent_ids:
            head = await self.head(agent_id)
            last = await self.read(agent_id, head - 1, head) if head else []
            out.append(last[-1] if last and last[-1].seq == head else None)
        return out

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        """Agents ordered by id **descending**, strictly before ``before`` (from the
        last id when None), at most ``limit`` of them: the backward page of
        :meth:`list_agents` (keyset pagination in both directions). Engines that can
        read their index backwards set :attr:`lists_backwards` and override this; the
        default refuses with :class:`~statekeeper.errors.CapabilityUnsupported`."""
        raise CapabilityUnsupported(self.name, "listing agents backwards")

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        """Agents ordered by their last write (``updated_at``, then id): the most
        recently written first (``newest_first``) or the longest idle first, strictly
        beyond ``cursor`` = ``(updated_at, agent_id)`` of the last row of the previous
        page (from the start when None), at most ``limit`` of them — keyset pagination
        over an index on the last write. Engines with that index set
        :attr:`lists_by_write`; the default refuses with
        :class:`~statekeeper.errors.CapabilityUnsupported`."""
        raise CapabilityUnsupported(self.name, "listing agents by last write")

    async def head_checksum(self, agent_id: str, head: int) -> bytes | None:
        """The stored checksum of ``agent_id``'s event at ``head`` (None: no such event)."""
        for event in await self.read(agent_id, head - 1, head):
            if event.seq == head:
                return event.checksum
        return None
