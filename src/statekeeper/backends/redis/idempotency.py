"""Idempotency keys: a key looked up, every key of an agent, keys renamed (with a guard's
check, in one script)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError
from ...records import AppendResult, StreamChange
from ..base import validate_rename_guard
from .base import _rewrite_fields
from .engine import RedisEngine

__all__ = ["RedisIdempotency"]


class RedisIdempotency(RedisEngine):
    """Idempotency keys (a part of :class:`~.backend.RedisBackend`)."""

    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        h, _ = self._keys(agent_id)

        async def op() -> Any:
            return (await self._checked(agent_id, [("HGET", h, b"k:" + key.encode())]))[0]

        value = await self._retrying("lookup_key", op)
        if value is None:
            return None
        first, last = bytes(value).split(b":")
        return AppendResult(agent_id, int(first), int(last), duplicate=True)

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``."""
        h, _ = self._keys(agent_id)

        async def op() -> list[tuple[str, int, int]]:
            out = []
            async for field, value in self._client.hscan_iter(h, match=b"k:*", count=1000):
                first, last = bytes(value).split(b":")
                out.append((bytes(field)[2:].decode(), int(first), int(last)))
            await self._checked(agent_id, [])  # the scan read the store adopted
            return sorted(out, key=lambda k: k[1])

        return await self._retrying("idempotency_keys", op)

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """Store records under another form of their key, in one script — with the
        ``guard``'s check and change (see :meth:`Backend.rename_keys`; not on a Redis
        Cluster: another agent's keys are in another hash slot)."""
        self._check_can_write()
        validate_rename_guard(agent_id, guard, self)
        h, _ = self._keys(agent_id)
        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys, args = [h], ["", b"", "0"]
        shards = [self._agent(agent_id).shard]
        if guard is not None:
            ak = self._agent(guard.agent_id)
            keys += [ak.hash, ak.snapshots, ak.shard.index]
            shards.append(ak.shard)
            args = ["a" if guard.absent else "r", guard.agent_id.encode()]
            args.append(self._ttl_of(guard.agent_id))
            if guard.rewrite is not None:
                args += _rewrite_fields(guard.rewrite)
        args += [b"k:" + form.encode() for pair in renames for form in pair]

        async def op() -> Any:  # (sent again after a lost reply: renames what is left)
            return await self._write(agent_id, self._rename_keys_script, keys, args, shards)

        reply = await self._retrying("rename_keys", op)
        if isinstance(reply, list):  # {5, head}: the guard's stream moved, nothing renamed
            assert guard is not None
            expected = guard.rewrite.expected_seq if guard.rewrite is not None else 0
            raise ConflictError(guard.agent_id, expected, int(reply[1]))
        return int(reply)
