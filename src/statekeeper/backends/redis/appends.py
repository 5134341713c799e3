"""Appends: compare-and-append in one script (``lua/append.lua``), a batch pipelined, the
first append of a stream compacted at a base (``append_from_base``); an append whose
reply was lost settled by what is stored at its seqs."""

from __future__ import annotations

import asyncio
from asyncio import current_task
from collections.abc import Sequence
from typing import Any, cast

from ...errors import BackendError, ConflictError, LeaseLost, StateTooLarge, StoreClosed, StoreLost
from ...records import AppendRequest, AppendResult, RawSnapshot, StreamChange
from ..base import (
    KeptKeys,
    append_outcome,
    validate_batch,
    validate_from_base,
    validate_from_base_guard,
    validate_request,
)
from ..framing import pack_snapshot
from .base import RedisError, _holder, _rewrite_fields
from .codec import pack_event
from .engine import RedisEngine
from .keys import ShardKeys
from .limits import SURELY_TAKEN, request_size

__all__ = ["RedisAppends"]


class RedisAppends(RedisEngine):
    """Appends (a part of :class:`~.backend.RedisBackend`)."""

    def _append_call(self, request: AppendRequest) -> tuple[list[bytes], list[Any]]:
        h, sz = self._keys(request.agent_id)
        events = request.events
        snap = request.snapshot
        args: list[Any] = [
            request.agent_id.encode(),
            str(request.expected_seq),
            request.idempotency_key.encode() if request.idempotency_key is not None else b"",
            self._ttl_of(request.agent_id),
            repr(events[0].timestamp),
            repr(events[-1].timestamp),
            str(snap.seq) if snap is not None else "0",
            pack_snapshot(snap) if snap is not None else b"",
            request.head_tag if request.head_tag is not None else b"",
            request.fence[0].encode() if request.fence is not None else b"",
            str(request.fence[1]) if request.fence is not None else "0",
            # the tag compare: an empty tag is stored as none (see the script)
            ("1" if request.expected_tag else "0") if request.check_tag else "",
            request.expected_tag or b"",
        ]
        args.extend(pack_event(e) for e in events)
        k = self._agent(request.agent_id)
        keys = [h, sz, k.shard.index, k.lease]
        if self.feed:
            keys += [k.shard.feed_counter, k.shard.feed_stream]
        return keys, args

    @staticmethod
    def _result(request: AppendRequest, reply: Any) -> AppendResult:
        return append_outcome(request, reply, _holder)

    async def append(self, request: AppendRequest) -> AppendResult:
        self._check_can_write()
        validate_request(request)
        if not self._reached:
            await self.open()
        keys, args = self._append_call(request)
        task = current_task()  # a lost cancel: see .client
        asked = task.cancelling() if task is not None else 0
        try:
            reply = await self._write(request.agent_id, self._append_script, keys, args)
        except RedisError as exc:
            try:
                return await self._recover(request, exc)
            except StoreLost as lost:  # with its likely cause, as _retrying gives it
                raise await self._explained(lost) from lost.__cause__
        if task is not None and task.cancelling() > asked:
            raise asyncio.CancelledError
        return self._result(request, reply)

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        self._check_can_write()
        out, valid = validate_batch(requests)
        task = current_task()  # a lost cancel (see .client): the pipeline's send too
        asked = task.cancelling() if task is not None else 0
        if valid and not self._reached:
            await self.open()
        if valid and self.wait_replicas:
            # each append waits for its own replicas: agents concurrently (one connection
            # each), one agent's appends one after another in the batch's order
            by_agent: dict[str, list[tuple[int, AppendRequest]]] = {}
            for i, request in valid:
                by_agent.setdefault(request.agent_id, []).append((i, request))

            async def in_order(items: list[tuple[int, AppendRequest]]) -> None:
                for i, request in items:
                    try:
                        out[i] = await self.append(request)
                    except StoreClosed:
                        raise
                    except Exception as exc:
                        out[i] = exc

            done = await asyncio.gather(
                *(in_order(items) for items in by_agent.values()), return_exceptions=True
            )
            for result in done:
                if isinstance(result, BaseException):
                    raise result
        elif valid:
            calls: list[tuple[int, AppendRequest, list[bytes], list[Any]]] = []
            for i, request in valid:
                keys, args = self._append_call(request)
                if request_size(args) > SURELY_TAKEN:  # (a huge record: .limits)
                    try:
                        await self._check_size(request.agent_id, args)
                    except StateTooLarge as exc:
                        out[i] = exc  # refused on its own, as alone
                        continue
                calls.append((i, request, keys, args))
            valid = [(i, request) for i, request, _, _ in calls]
            try:
                async with self._client.pipeline(transaction=False) as pipe:
                    for _, request, keys, args in calls:
                        shard = self.layout.shard(request.agent_id)
                        keys, args = self._guarded(keys, args, (shard,))
                        if self.cluster:  # a cluster pipeline cannot load a script
                            pipe.eval(
                                cast(str, self._append_script.script), len(keys), *keys, *args
                            )
                        else:
                            await self._append_script(keys=keys, args=args, client=cast(Any, pipe))
                    replies = await pipe.execute(raise_on_error=False)
            except RedisError as exc:
                for i, request in valid:  # some may have run: settle each one
                    try:
                        out[i] = await self._recover(request, exc)
                    except StoreClosed:
                        raise
                    except Exception as inner:
                        out[i] = inner
            else:
                for (i, request), reply in zip(valid, replies, strict=True):
                    if isinstance(reply, BaseException):
                        out[i] = self._reject("redis append failed", reply)
                        if isinstance(out[i], StoreLost):
                            out[i] = await self._explained(cast(StoreLost, out[i]))
                        continue
                    try:
                        out[i] = self._result(request, reply)
                    except (ConflictError, LeaseLost) as exc:
                        out[i] = exc
        if task is not None and task.cancelling() > asked:
            raise asyncio.CancelledError
        return [r if r is not None else BackendError("not attempted") for r in out]

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """The agent made as :meth:`prune` leaves a stream (base snapshot, base field
        ``b``, the events after it) in one script, refused if the agent exists (with
        ``raise_floor``, its shard's feed floor raised through its first event in the
        same script; with ``guard``, its check of the other stream's head first, in
        the script: not on a cluster). A try whose reply was lost is settled by
        looking (as :meth:`_landed` does for an append): sent again, it would meet its
        own stream as a conflict."""
        self._check_can_write()
        validate_from_base(request, base, kept_keys)
        validate_from_base_guard(request, guard, self)
        if not self._reached:
            await self.open()
        keys, args = self._append_call(request)
        keys = [*keys[:3], *keys[4:]]  # no lease: a new stream takes no fence
        if raise_floor and self.feed:
            keys.append(self._agent(request.agent_id).shard.feed_floor)
        kept = [str(v) for k in kept_keys for v in k]
        args = [str(base.seq), pack_snapshot(base), str(len(kept_keys)), *kept, *args]
        shards: list[ShardKeys] | None = None
        if guard is not None and guard.rewrite is not None:  # (from_base.lua: the tail)
            held = self._agent(guard.agent_id)
            keys += [held.hash, held.snapshots]
            args += [*_rewrite_fields(guard.rewrite), "1"]
            shards = [self._agent(request.agent_id).shard, held.shard]
        else:
            args.append("0")
        first, last = request.events[0].seq, request.events[-1].seq
        tries = 0

        async def op() -> Any:
            nonlocal tries
            tries += 1
            if tries > 1 and await self._landed(request):
                return [0, first, last]
            return await self._write(request.agent_id, self._from_base_script, keys, args, shards)

        reply = await self._retrying("append_from_base", op)
        if int(reply[0]) == 3 and guard is not None:  # the guard's stream moved
            raise ConflictError(guard.agent_id, int(reply[1]), int(reply[2]))
        if int(reply[0]) != 0:
            raise ConflictError(request.agent_id, 0, int(reply[1]))
        return AppendResult(request.agent_id, first, last)

    async def _recover(self, request: AppendRequest, exc: RedisError) -> AppendResult:
        """Settle an append whose reply was lost: stored, not stored, or someone else's
        (see :meth:`Reconnecting.settle_append`)."""
        return await self._reconnect.settle_append(
            request, exc, landed=self._landed, submit=self._submit
        )

    async def _submit(self, request: AppendRequest) -> AppendResult:
        keys, args = self._append_call(request)
        reply = await self._write(request.agent_id, self._append_script, keys, args)
        return self._result(request, reply)

    async def _landed(self, request: AppendRequest) -> bool:
        h, _ = self._keys(request.agent_id)
        fields = [b"e:%d" % e.seq for e in request.events]
        key = request.idempotency_key
        if key is not None:
            fields.append(b"k:" + key.encode())
        if self.wait_replicas:  # stored AND replicated, or not settled yet
            values, acked = await self._barrier(request.agent_id, [("HMGET", h, *fields)])
            if isinstance(values, BaseException):
                raise values
            if any(v is not None for v in values):
                self._check_acked(acked)
        else:
            values = await self._client.hmget(h, fields)
        stored = values[: len(request.events)]
        if any(v != pack_event(e) for v, e in zip(stored, request.events, strict=True)):
            return False
        if key is None:
            return True
        first, last = request.events[0].seq, request.events[-1].seq
        return bool(values[-1] == b"%d:%d" % (first, last))
