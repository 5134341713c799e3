"""Several streams in one script (``lua/together.lua``, a single server only): appends with
their audit entries, and changes (a lease, a rewrite, a prune, a delete) with a check of
another stream."""

from __future__ import annotations

import asyncio
from asyncio import current_task
from collections.abc import Sequence
from typing import Any

from ...errors import (
    BackendError,
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
    LeaseHeld,
    StoreLost,
)
from ...records import AppendRequest, AppendResult, LeaseInfo, StreamChange
from ..base import append_outcome, check_fence, check_prune, validate_together
from ..framing import pack_snapshot
from ..pruned_snapshots import unstored_record
from .base import RedisError, _holder, _rewrite_fields
from .engine import RedisEngine
from .keys import ShardKeys

__all__ = ["RedisTogether"]


class RedisTogether(RedisEngine):
    """Several streams in one script (a part of :class:`~.backend.RedisBackend`)."""

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        """Every request and change in ONE script (:meth:`Backend.append_together`):
        all checks, then all writes, so all or nothing. A reply lost on the way is
        settled by looking at the first request's stream (all or none landed), as
        :meth:`append` settles its own. Not on a Redis Cluster (``appends_together``
        false): different agents live in different hash slots there."""
        if not self.appends_together:
            raise CapabilityUnsupported(
                self.name,
                "append_together",
                "a Redis Cluster keeps different agents in different hash slots, which one"
                " script cannot touch: the audit entry is written first there",
            )
        self._check_can_write()
        validate_together(requests, changes, self)
        if not requests and not changes:
            raise ConfigurationError("append_together needs an append or a change")
        task = current_task()  # a lost cancel: see .client
        asked = task.cancelling() if task is not None else 0
        if not self._reached:
            await self.open()
        keys: list[bytes] = []
        args: list[Any] = [str(len(requests)), str(len(changes)), "1" if self.feed else "0"]
        args.append(self._ttl_ms)
        for request in requests:
            k, a = self._append_call(request)
            keys += k
            args += [str(len(request.events)), *a]
        for change in changes:
            ak = self._agent(change.agent_id)
            keys += [ak.hash, ak.snapshots, ak.shard.index, self._lease_key(change.agent_id)]
            snap = change.snapshot
            drop = sorted(set(change.drop_snapshots))
            lease = change.lease
            args += [
                change.agent_id.encode(),
                "a" if change.absent else "" if change.delete_at is None else str(change.delete_at),
                str(snap.seq) if snap is not None else "0",
                pack_snapshot(snap) if snap is not None else b"",
                "" if change.prune_to is None else str(change.prune_to),
                str(len(drop)),
                *(str(s) for s in drop),
                "" if lease is None else "r" if lease.ttl is None else "g",
                lease.holder.encode() if lease is not None else b"",
                str(lease.token) if lease is not None else "0",
                repr(lease.ttl) if lease is not None and lease.ttl is not None else "0",
            ]
            if change.rewrite is None:
                args.append("0")
            else:
                args += ["1", *_rewrite_fields(change.rewrite)]
            args.append(change.delete_checksum or b"")
            args.append("" if change.prune_head is None else str(change.prune_head))
            args.append(change.prune_checksum or b"")
            args.append(self._ttl_of(change.agent_id))  # (the store's own streams: never)
        agent = requests[0].agent_id if requests else changes[0].agent_id
        shards = [
            self._agent(a).shard
            for a in (*(r.agent_id for r in requests), *(c.agent_id for c in changes))
        ]
        if not requests:  # (changes alone: changes_alone_together)
            return await self._changes_together(agent, changes, keys, args, shards)
        outcome: list[AppendResult | None] = []
        try:
            reply = await self._write(agent, self._together_script, keys, args, shards)
        except RedisError as exc:

            async def submit(_: AppendRequest) -> AppendResult:
                nonlocal outcome
                reply = await self._write(agent, self._together_script, keys, args, shards)
                outcome = self._together_outcome(requests, changes, reply)
                return AppendResult(agent, 0, 0)  # (the outcome above is the answer)

            try:
                await self._reconnect.settle_append(
                    requests[0], exc, landed=self._landed, submit=submit
                )
            except StoreLost as lost:  # with its likely cause, as _retrying gives it
                raise await self._explained(lost) from lost.__cause__
            reply = [0]  # (unless outcome: the first request landed, the script ran whole)
        if task is not None and task.cancelling() > asked:
            raise asyncio.CancelledError
        done = outcome or self._together_outcome(requests, changes, reply)
        if any(c.lease is not None and c.lease.ttl is not None for c in changes):
            await self._granted()  # (a grant committed with its audit entry)
        return done

    async def _changes_together(
        self,
        agent: str,
        changes: Sequence[StreamChange],
        keys: list[bytes],
        args: list[Any],
        shards: list[ShardKeys],
    ) -> list[AppendResult | None]:
        """:meth:`append_together` of changes alone (a prune or a rewrite with a check
        of another stream: tiered's). A reply lost, the script is sent again; refused
        then, a rewrite of them that gives its stream a new head tag found there is the
        first try committed (the script is all or nothing: a tiered check's fence),
        else whether it committed is unknown (a check it passed fails once it
        committed): BackendError, ``maybe_applied``."""
        tries = 0
        tagged = [c.rewrite for c in changes if c.rewrite is not None and c.rewrite.head_tag]

        async def op() -> Any:
            nonlocal tries
            tries += 1
            reply = await self._write(agent, self._together_script, keys, args, shards)
            if tries > 1 and int(reply[0]) != 0:
                for rewrite in tagged:  # (was: BackendError here, after its own commit)
                    now = await self.head_tag(rewrite.agent_id)
                    if now == (rewrite.expected_seq, rewrite.head_tag):
                        return [0]
                raise BackendError(
                    f"redis: the changes of {agent!r} met a lost reply, and sent again they"
                    " were refused: whether the first try committed is unknown",
                    maybe_applied=True,
                )
            return reply

        return self._together_outcome((), changes, await self._retrying("append_together", op))

    @staticmethod
    def _together_outcome(
        requests: Sequence[AppendRequest], changes: Sequence[StreamChange], reply: Any
    ) -> list[AppendResult | None]:
        """:meth:`append_together`'s answer from the script's reply (see together.lua):
        the results, or the error of the check that stopped it (nothing written)."""
        status = int(reply[0])
        if status == 0:
            return [AppendResult(r.agent_id, r.events[0].seq, r.events[-1].seq) for r in requests]
        if status == 6:
            request = requests[int(reply[1]) - 1]
            result = append_outcome(request, reply[2:], _holder)  # raises unless a duplicate
            return [result if r is request else None for r in requests]
        change = changes[int(reply[1]) - 1]
        agent_id = change.agent_id
        if status in (7, 8, 9):  # a lease change refused (lease_write.lua)
            lease = change.lease
            assert lease is not None
            if status == 7:
                raise LeaseHeld(agent_id, bytes(reply[2]).decode(), float(reply[3]))
            if status == 8:
                raise ConflictError(agent_id, lease.token - 1, int(reply[2]))
            token = int(reply[3])
            holder = _holder(reply[2])
            current = LeaseInfo(agent_id, holder, token, float(reply[4])) if token else None
            check_fence(agent_id, (lease.holder, lease.token), current)  # raises LeaseLost
            raise BackendError(f"redis refused the lease release of {agent_id!r}")
        head = int(reply[2])
        if status == 10:  # (a rewrite naming a pruned event or snapshot)
            raise unstored_record(agent_id, *reply[3:6])
        if status == 5:
            snap = change.snapshot
            expected = (
                change.rewrite.expected_seq
                if change.rewrite is not None
                else change.delete_at
                if change.delete_at is not None
                else change.prune_head
                if change.prune_head is not None
                else snap.seq
                if snap
                else 0
            )
            raise ConflictError(agent_id, expected, head)
        assert change.prune_to is not None
        drop = sorted(set(change.drop_snapshots))
        has_base, stored = bool(int(reply[3])), int(reply[4])
        check_prune(change.agent_id, head, change.prune_to, has_base, drop, stored)
        raise BackendError(f"redis refused the prune of {change.agent_id!r} (reply {status})")
