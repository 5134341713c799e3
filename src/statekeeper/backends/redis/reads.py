"""Reads of one agent: the head (and its tag), events, the seq at a time, snapshots, the
newest snapshot with the events after it; an agent found without a head told apart from
a lost one (:mod:`.identity`)."""

from __future__ import annotations

from typing import Any

from ...errors import IntegrityError
from ...records import RawEvent, RawSnapshot
from ..framing import unpack_snapshot
from .base import _PROBE
from .codec import unpack_event
from .engine import RedisEngine
from .identity import PROOF

__all__ = ["RedisReads"]


class RedisReads(RedisEngine):
    """Reads of one agent (a part of :class:`~.backend.RedisBackend`)."""

    async def _absent(self, agent_id: str) -> None:
        """A plain read found no head for ``agent_id``: raise :class:`AgentLost` when the
        index lists it all the same, :class:`StoreLost` when the index lost its proof
        entry (see :mod:`.identity`; a second round trip, on this path only). The probe
        is one script (one consistent read: a stream deleted, or created again, between
        the first read and this one is not taken for a lost one)."""
        k = self.layout.agent(agent_id)
        raw = agent_id.encode()
        (found,) = await self._checked(
            agent_id, [("EVAL", _PROBE, 2, k.hash, k.shard.index, raw, PROOF + b"t:" + raw)]
        )
        if int(found[0]):
            return  # stored after all
        ttl = self._ttl_of(agent_id) not in ("0", "-1")
        self._identity.missing(k.shard, agent_id, found[1], found[2], found[3], ttl=ttl)

    def _queue_proofs(self, pipe: Any) -> None:
        """Queue a read of every shard index's proof entry (a listing or a count)."""
        for shard in self.layout.shard_keys:
            pipe.zscore(shard.index, PROOF)

    def _check_proofs(self, found: list[Any]) -> None:
        """:class:`StoreLost` for a shard whose index lost its proof entry."""
        for shard, proof in zip(self.layout.shard_keys, found, strict=True):
            self._identity.missing(shard, "", proof, None, None, ttl=True)

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        h, _ = self._keys(agent_id)

        async def op() -> Any:
            found = (await self._checked(agent_id, [("HMGET", h, b"h", b"g")]))[0]
            if found[0] is None:
                await self._absent(agent_id)
            return found

        head, tag = await self._retrying("head_tag", op)
        if head is None:
            return 0, None
        return int(head), bytes(tag) if tag else None

    async def head(self, agent_id: str) -> int:
        h, _ = self._keys(agent_id)

        async def op() -> Any:
            found = (await self._checked(agent_id, [("HGET", h, b"h")]))[0]
            if found is None:
                await self._absent(agent_id)
            return found

        value = await self._retrying("head", op)
        return int(value) if value is not None else 0

    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        if not self._reached:  # (as save_snapshot)
            await self.open()
        h, sz = self._keys(agent_id)
        args = [
            str(after_seq),
            str(-1 if to_seq is None else to_seq),
            str(-1 if limit is None else limit),
            self._ttl_of(agent_id),
            self._touch,
            agent_id.encode(),
        ]
        index = self.layout.shard(agent_id).index

        async def op() -> Any:
            return await self._read_run(agent_id, self._read_script, [h, sz, index], args)

        reply = await self._retrying("read", op)
        start = (int(reply[2]) if len(reply) > 2 else max(after_seq, 0)) + 1
        events = []
        for offset, blob in enumerate(reply[1]):
            if blob is None:
                raise IntegrityError(agent_id, start + offset, "event missing from redis")
            events.append(unpack_event(start + offset, bytes(blob)))
        return events

    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        h, _ = self._keys(agent_id)

        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys = [h, self.layout.shard(agent_id).index]
        args = [repr(float(timestamp)), agent_id.encode(), self._ttl_of(agent_id)]

        async def op() -> Any:
            return await self._read_run(agent_id, self._seq_at_script, keys, args)

        return int(await self._retrying("seq_at", op))

    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        h, sz = self._keys(agent_id)
        bound = "+inf" if at_or_below is None else str(at_or_below)

        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys = [h, sz, self.layout.shard(agent_id).index]
        args = [bound, self._ttl_of(agent_id), self._touch, agent_id.encode()]

        async def op() -> Any:
            return await self._read_run(agent_id, self._latest_script, keys, args)

        reply = await self._retrying("latest_snapshot", op)
        if not reply:
            return None
        return unpack_snapshot(int(reply[0]), bytes(reply[1]))

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        """The newest snapshot and the events after it: one script, one round trip."""
        reply = await self._read_latest_reply(agent_id, "read_latest")
        return self._latest_from(agent_id, reply)

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        """Head, head tag, newest snapshot and the events after it: the same script as
        :meth:`read_latest`, so one round trip and one consistent read (the events end
        at the head; the base class made two calls, ``head_tag`` then ``read_latest``)."""
        reply = await self._read_latest_reply(agent_id, "read_state")
        head = int(reply[1])
        if head == 0:
            return 0, None, None, []
        tag = reply[3] if len(reply) > 3 else None
        snap, events = self._latest_from(agent_id, reply)
        return head, bytes(tag) if tag else None, snap, events

    async def _read_latest_reply(self, agent_id: str, what: str) -> Any:
        k = self.layout.agent(agent_id)  # one agent's keys: one hash slot on a cluster
        keys = [k.hash, k.snapshots, k.shard.index]
        if not self._reached:  # (as save_snapshot)
            await self.open()
        args = [self._ttl_of(agent_id), self._touch, agent_id.encode()]

        async def op() -> Any:
            return await self._read_run(agent_id, self._read_latest_script, keys, args)

        return await self._retrying(what, op)

    @staticmethod
    def _latest_from(agent_id: str, reply: Any) -> tuple[RawSnapshot | None, list[RawEvent]]:
        snap = unpack_snapshot(int(reply[0][0]), bytes(reply[0][1])) if reply[0] else None
        start = (snap.seq if snap is not None else 0) + 1
        events = []
        for offset, blob in enumerate(reply[2]):
            if blob is None:
                raise IntegrityError(agent_id, start + offset, "event missing from redis")
            events.append(unpack_event(start + offset, bytes(blob)))
        return snap, events
