"""The PostgreSQL backend's reads: one statement per read (one round trip, one
snapshot), concurrent reads coalesced into one statement, listings by id and by last
write. Statements a replica may answer go there through ``_query`` (see
:mod:`.replica`). A mixin of :class:`~.backend.PostgresBackend`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ...arguments import check_stored_id
from ...records import (
    AgentInfo,
    AppendResult,
    RawEvent,
    RawSnapshot,
)
from ..base import LatestRead, prefix_end
from .part import PostgresPart

_NO_LIMIT = 2**62

__all__ = ["Reads"]


class Reads(PostgresPart):
    """Reads of :class:`~.backend.PostgresBackend`."""

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        rows = await self._query("key", (agent_id, key))
        if not rows:
            return None
        # (read on the primary) a write this process now knows of, as a conflict is:
        # reading its events must not go to a replica that has not replayed them (was:
        # "the record is forged or damaged", or a step recorded but unreadable)
        self._wrote()
        return AppendResult(agent_id, int(rows[0][0]), int(rows[0][1]), duplicate=True)

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
        rows = await self._query("keys", (agent_id,))
        return [(r[0], int(r[1]), int(r[2])) for r in rows]

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        """The agent's last seq and the head tag stored with it, coalesced with the
        other head reads (:meth:`head`): a LangGraph saver's checked read of a cached
        thread asks for the tag, and 16 threads' checks arriving together were 16
        statements (docs/benchmarks.md, "lgwrapped")."""
        return await self._heads((agent_id, True))

    async def head(self, agent_id: str) -> int:
        """The agent's last seq (0: no stream). Heads asked for while another head
        read is in flight are read together in one statement (see :mod:`.coalesce`)."""
        return (await self._heads((agent_id, False)))[0]

    async def _head_one(self, asked: tuple[str, bool]) -> tuple[int, bytes | None]:
        agent_id, tagged = asked
        if not tagged:
            rows = await self._query("head", (agent_id,))
            return (int(rows[0][0]) if rows else 0), None
        rows = await self._query("head_tag", (agent_id,))
        if not rows:
            return 0, None
        tag = rows[0][1]
        return int(rows[0][0]), bytes(tag) if tag is not None else None

    async def _head_many(self, asked: Sequence[tuple[str, bool]]) -> list[tuple[int, bytes | None]]:
        """Heads (with their tags when any caller asked for one) in one statement."""
        ids = [agent_id for agent_id, _ in asked]
        if not any(tagged for _, tagged in asked):
            rows = await self._query("head_many", (ids,))
            seqs = {r[0]: int(r[1]) for r in rows}
            return [(seqs.get(agent_id, 0), None) for agent_id in ids]
        rows = await self._query("head_tag_many", (ids,))
        found = {r[0]: (int(r[1]), bytes(r[2]) if r[2] is not None else None) for r in rows}
        return [found.get(agent_id, (0, None)) for agent_id in ids]

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        """Events of one agent. Reads issued while another read is in flight are sent
        together in one statement (like group commit, for reads): concurrent agents
        validating their heads cost one round trip, not one each."""
        self._check_open()
        if limit is not None and limit <= 0:
            return []
        args = (
            agent_id,
            after_seq,
            _NO_LIMIT if to_seq is None else to_seq,
            _NO_LIMIT if limit is None else limit,
        )
        if self._reading:
            future: asyncio.Future[list[RawEvent]] = asyncio.get_running_loop().create_future()
            self._read_queue.append((args, future))
            return await future
        self._reading = True
        try:
            rows = await self._query("read", args)
        finally:
            if self._read_queue:
                self._read_runner = asyncio.get_running_loop().create_task(self._read_drain())
            else:
                self._reading = False
        return [RawEvent(int(r[0]), r[1], float(r[2]), bytes(r[3]), bytes(r[4])) for r in rows]

    async def _read_drain(self) -> None:
        """Serve queued reads, many per statement, until none is left."""
        try:
            while self._read_queue:
                batch, self._read_queue = self._read_queue[:512], self._read_queue[512:]
                columns = list(zip(*(args for args, _ in batch), strict=True))
                try:
                    rows = await self._query("read_many", [list(c) for c in columns])
                except BaseException as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                results: list[list[RawEvent]] = [[] for _ in batch]
                for r in rows:
                    results[int(r[0]) - 1].append(
                        RawEvent(int(r[1]), r[2], float(r[3]), bytes(r[4]), bytes(r[5]))
                    )
                for (_, future), events in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(events)
        finally:
            self._reading = False

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        rows = await self._query("seq_at", (agent_id, timestamp))
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        bound = _NO_LIMIT if at_or_below is None else at_or_below
        rows = await self._query("snap_latest", (agent_id, bound))
        if not rows:
            return None
        r = rows[0]
        return RawSnapshot(int(r[0]), float(r[1]), bytes(r[2]), bytes(r[3]))

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        """The newest snapshot and the events after it: one statement, one round trip."""
        self._check_open()
        rows = await self._query("read_latest", (agent_id, agent_id))
        snap: RawSnapshot | None = None
        if rows and rows[0][1] is None:
            r = rows.pop(0)
            snap = RawSnapshot(int(r[0]), float(r[2]), bytes(r[3]), bytes(r[4]))
        return snap, [
            RawEvent(int(r[0]), r[1], float(r[2]), bytes(r[3]), bytes(r[4])) for r in rows
        ]

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        """The head, the newest snapshot and the events after it: one statement (one
        consistent read of the database), one round trip."""
        self._check_open()
        rows = await self._query("read_state", (agent_id, agent_id, agent_id))
        if not rows or rows[0][0] != 0 or not rows[0][1]:
            return 0, None, None, []
        first = rows[0]
        snap: RawSnapshot | None = None
        start = 1
        if len(rows) > 1 and rows[1][0] == 1:
            r = rows[1]
            snap = RawSnapshot(int(r[1]), float(r[3]), bytes(r[4]), bytes(r[5]))
            start = 2
        tag = first[4]
        return (
            int(first[1]),
            bytes(tag) if tag is not None else None,
            snap,
            [
                RawEvent(int(r[1]), r[2], float(r[3]), bytes(r[4]), bytes(r[5]))
                for r in rows[start:]
            ],
        )

    reads_latest_many = True

    async def read_latest_many(self, agent_ids: Sequence[str]) -> list[LatestRead | None]:
        """Heads, head tags, latest snapshots and the events after them of many agents:
        one statement (one consistent read of the database), one round trip."""
        for agent_id in agent_ids:
            check_stored_id(agent_id)
        if not agent_ids:
            return []
        rows = await self._query("read_latest_many", (list(dict.fromkeys(agent_ids)),))
        heads: dict[str, tuple[int, bytes | None]] = {}
        snaps: dict[str, RawSnapshot] = {}
        events: dict[str, list[RawEvent]] = {}
        for part, agent_id, seq, event_type, ts, payload, checksum in rows:
            if part == 0:
                heads[agent_id] = (
                    int(seq),
                    bytes(payload) if payload is not None else None,
                )
            elif part == 1:
                snaps[agent_id] = RawSnapshot(int(seq), float(ts), bytes(payload), bytes(checksum))
            else:
                events.setdefault(agent_id, []).append(
                    RawEvent(int(seq), event_type, float(ts), bytes(payload), bytes(checksum))
                )
        out: list[LatestRead | None] = []
        for agent_id in agent_ids:
            head = heads.get(agent_id)
            out.append(
                None
                if head is None
                else LatestRead(head[0], head[1], snaps.get(agent_id), events.get(agent_id, []))
            )
        return out

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        if after is None:
            rows = await self._query("list_all", (limit,))
        else:
            rows = await self._query("list", (after, limit))
        return [AgentInfo(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows]

    async def read_heads(self, agent_ids: Sequence[str]) -> list[RawEvent | None]:
        for agent_id in agent_ids:
            check_stored_id(agent_id)
        if not agent_ids:
            return []
        rows = await self._query("read_heads", (list(agent_ids),))
        found = {
            r[0]: RawEvent(int(r[1]), r[2], float(r[3]), bytes(r[4]), bytes(r[5])) for r in rows
        }
        return [found.get(agent_id) for agent_id in agent_ids]

    lists_by_write = True

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        if cursor is None:
            name = "list_newest_written" if newest_first else "list_oldest_written"
            rows = await self._query(name, (limit,))
        else:
            name = "list_newest_written_after" if newest_first else "list_oldest_written_after"
            rows = await self._query(name, (float(cursor[0]), cursor[1], limit))
        return [AgentInfo(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows]

    lists_backwards = True

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        if before is None:
            rows = await self._query("list_last", (limit,))
        else:
            rows = await self._query("list_before", (before, limit))
        return [AgentInfo(r[0], int(r[1]), float(r[2]), float(r[3])) for r in rows]

    async def orphaned_events(self) -> list[tuple[str, int, int, int]] | None:
        rows = await self._query("orphaned_events", ())
        return [(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]

    async def count_agents(self) -> int:
        rows = await self._query("count", ())
        return int(rows[0][0])

    async def count_prefix(self, prefix: str) -> int:
        if not prefix:
            return await self.count_agents()
        # a range of the primary key (agent_id is COLLATE "C": code point order)
        rows = await self._query("count_prefix", (prefix, prefix_end(prefix)))
        return int(rows[0][0])
