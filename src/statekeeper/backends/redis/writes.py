"""The writes other than appends: snapshots, deletes (with their receipts), prunes,
rewrites, and ``drop_all``."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from ...errors import ConfigurationError, ConflictError
from ...records import RawSnapshot, RewriteRequest
from ..base import check_prune, validate_rewrite
from ..framing import pack_snapshot
from ..pruned_snapshots import unstored_record
from .base import _rewrite_fields
from .engine import RedisEngine

__all__ = ["RedisWrites"]


class RedisWrites(RedisEngine):
    """The writes other than appends (a part of :class:`~.backend.RedisBackend`)."""

    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        self._check_writable()
        if not self._reached:  # (the store's TTL: known once open, see _settle_ttl)
            await self.open()
        h, sz = self._keys(agent_id)
        args: list[bytes | str] = [
            str(snapshot.seq),
            pack_snapshot(snapshot),
            self._ttl_of(agent_id),
            agent_id.encode(),
        ]
        keys = [h, sz, self.layout.shard(agent_id).index]

        async def op() -> Any:
            return await self._write(agent_id, self._save_snapshot_script, keys, args)

        reply = await self._retrying("save_snapshot", op)
        if int(reply[0]) != 0:
            raise ConflictError(agent_id, snapshot.seq, int(reply[1]))

    async def delete_agent(self, agent_id: str) -> bool:
        self._check_writable()
        return await self._delete(agent_id, None) == 1

    async def _delete(self, agent_id: str, head: int | None, checksum: bytes | None = None) -> int:
        """The delete script's reply for ``agent_id`` (conditional on ``head`` when
        given). The script leaves a receipt (a key of the agent's shard holding this
        call's random token and answer, expiring once no retry can come): a try sent
        again after a lost reply finds it and returns the first try's answer, instead of
        meeting the stream as it is now (its own delete: "did not exist", or a
        conflict; or a stream created again since up to ``head``, which it would
        delete)."""
        h, sz = self._keys(agent_id)
        shard = self._agent(agent_id).shard
        token = secrets.token_hex(16)
        receipt = shard.base + b"d:" + token.encode()
        if not self._reached:  # (as save_snapshot)
            await self.open()
        lifetime = str(int(max(60.0, 2 * self.retry_timeout) * 1000))
        ttl = self._ttl_of(agent_id)  # (a lost agent existed: see delete.lua)
        args = [agent_id.encode(), "" if head is None else str(head), token, lifetime, ttl]
        args.append(checksum or b"")  # (the head record's identity: see delete.lua)

        async def op() -> Any:
            return await self._write(
                agent_id, self._delete_script, [h, sz, shard.index, receipt], args
            )

        return int(await self._retrying("delete_agent" if head is None else "delete_agent_at", op))

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """The delete conditional on the head (:meth:`Backend.delete_agent_at`): the
        delete script with the expected head (and head event checksum), checked in the
        script (exact when sent again after a lost reply: see :meth:`_delete`)."""
        self._check_writable()
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        reply = await self._delete(agent_id, head, checksum)
        if reply < 0:
            raise ConflictError(agent_id, head, -1 - reply)
        return True

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Remove history below a snapshot in one script (atomic: the head and its
        event's checksum compared in it); retried safely."""
        self._check_can_write()
        if head is None and checksum is not None:
            raise ConfigurationError("a prune's checksum is its head's identity: give head too")
        k = self._agent(agent_id)
        if not self._reached:  # (as save_snapshot)
            await self.open()
        drop = sorted(set(drop_snapshots))
        args = [
            agent_id.encode(),
            self._ttl_of(agent_id),
            str(base_seq),
            "" if head is None else str(head),
            checksum if head is not None and checksum is not None else b"",
            *(str(s) for s in drop),
        ]
        keys = [k.hash, k.snapshots, k.shard.index]  # (the index: a lost agent, presence.lua)

        async def op() -> Any:
            return await self._write(agent_id, self._prune_script, keys, args)

        reply = await self._retrying("prune", op)
        if int(reply[0]) == 2:
            assert head is not None
            raise ConflictError(agent_id, head, int(reply[1]))
        if int(reply[0]) != 0:
            has_base, stored = bool(int(reply[2])), int(reply[3])
            check_prune(agent_id, int(reply[1]), base_seq, has_base, drop, stored)

    async def replace_snapshot(
        self,
        agent_id: str,
        snapshot: RawSnapshot,
        drop_seq: int | None,
        head: int,
        checksum: bytes | None,
    ) -> bool:
        """:meth:`Backend.replace_snapshot` in one script (replace_snapshot.lua: the head
        and its event's checksum compared in it; one agent's keys, so on a cluster too).
        Sent again after a lost reply it stores the same row and finds the removal
        made: False then, though the first try removed it."""
        self._check_can_write()
        if head < 1:
            raise ConfigurationError(f"replace_snapshot needs a head >= 1, got {head}")
        k = self._agent(agent_id)
        if not self._reached:  # (as save_snapshot)
            await self.open()
        args: list[bytes | str] = [
            agent_id.encode(),
            self._ttl_of(agent_id),
            str(snapshot.seq),
            pack_snapshot(snapshot),
            str(head),
            checksum or b"",
            "" if drop_seq is None else str(drop_seq),
        ]
        keys = [k.hash, k.snapshots, k.shard.index]  # (the index: a lost agent, presence.lua)

        async def op() -> Any:
            return await self._write(agent_id, self._replace_snapshot_script, keys, args)

        reply = await self._retrying("replace_snapshot", op)
        if int(reply[0]) != 0:
            raise ConflictError(agent_id, head, int(reply[1]))
        return bool(int(reply[1]))

    async def rewrite(self, request: RewriteRequest) -> None:
        """Replace stored record bytes atomically (one script), if the head is still
        ``(expected_seq, expected_tag)``."""
        self._check_can_write()
        validate_rewrite(request)
        k = self._agent(request.agent_id)
        if not self._reached:  # (as save_snapshot)
            await self.open()
        keys = [k.hash, k.snapshots, k.shard.index]  # (the index: a lost agent, presence.lua)
        args: list[bytes | str] = [
            self._ttl_of(request.agent_id),
            request.agent_id.encode(),
            *_rewrite_fields(request),
        ]
        attempts = 0

        async def op() -> Any:
            nonlocal attempts
            attempts += 1
            reply = await self._write(request.agent_id, self._rewrite_script, keys, args)
            if int(reply[0]) != 0 and attempts > 1 and request.head_tag is not None:
                head, tag = await self.head_tag(request.agent_id)  # our lost reply?
                if head == request.expected_seq and tag == request.head_tag:
                    return [0, head]
            return reply

        reply = await self._retrying("rewrite", op)
        if int(reply[0]) == 3:
            raise unstored_record(request.agent_id, *reply[2:5])
        if int(reply[0]) != 0:
            raise ConflictError(request.agent_id, request.expected_seq, int(reply[1]))

    def _is_agent_hash(self, key: bytes) -> bool:
        """Whether ``key`` (under the prefix) is an agent's hash: ``a:<agent>``, after
        the shard's ``{tag}`` in the sharded layout."""
        rest = key[len(self._pfx) :]
        if rest[:1] == b"{":
            rest = rest[rest.find(b"}") + 1 :]
        return rest[:2] == b"a:"

    async def drop_all(self) -> int:
        """Delete every key of this backend's store (tests, benchmarks): the keys its
        layout gives under its prefix, not another store's whose prefix starts with it
        (:meth:`.keys.Layout.owns`); returns
        how many agents there were (as SQLite and memory do: not how many keys, which
        counts what deleted agents leave by design — their delete receipts, expiring,
        and lease hashes, kept so a fencing token never goes back — and the store's
        own keys). Refused with an empty prefix, which would mean the whole database."""
        if not self.prefix:
            raise ConfigurationError("drop_all needs a non-empty prefix")
        self._check_writable()
        pattern = b"".join(b"\\" + bytes([c]) if c in b"*?[]\\" else bytes([c]) for c in self._pfx)

        async def op() -> int:
            agents = 0
            batch: list[bytes] = []
            async for key in self._client.scan_iter(match=pattern + b"*", count=1000):
                if not self.layout.owns(key):  # (another store's prefix may start so)
                    continue
                batch.append(key)
                agents += self._is_agent_hash(key)
                if len(batch) >= 500:
                    await self._client.delete(*batch)
                    batch = []
            if batch:
                await self._client.delete(*batch)
            if self._reached and not self.evictable:
                await self._adopt()  # the store is empty by our own hand: new markers
            return agents

        return await self._retrying("drop_all", op)
