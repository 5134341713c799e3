"""A governed store's deletes and snapshots (:class:`GovernedChanges`): each needs
``write``, and its engine write is made with its audit entry — in one commit where the
engine has one for two streams, else the entry first (voided when the write fails) —
through the change the task is making (:mod:`.governed_pending`)."""

from __future__ import annotations

import functools
from typing import Any

from ..errors import AgentLost, ConflictError, RetriesExhausted
from ..records import AppendRequest, AppendResult, RawSnapshot, StreamChange
from . import conditional, feed_deletes, feed_intents
from .governed_base import GovernedBase
from .governed_pending import CHANGE, PRECEDING, Pending

__all__ = ["GovernedChanges"]

_CHANGE_RETRIES = 100


class GovernedChanges(GovernedBase):
    """The delete and snapshot calls of :class:`~.governed.GovernedStateStore` and
    their audit hooks."""

    async def snapshot(self, agent_id: str) -> int:
        gov = await self._allowed(agent_id, "write", "snapshot")
        if self._ahead_sink is None:
            seq = await super().snapshot(agent_id)
            await gov.record("snapshot", agent_id, AppendResult(agent_id, seq, seq))
            return seq
        # stored by _save_snapshot_with_entry, under the agent's lock, with its entry
        stored: int = await self._change("snapshot", agent_id, super().snapshot)
        return stored

    async def delete(self, agent_id: str) -> bool:
        gov = await self._allowed(agent_id, "write", "delete")
        if self._ahead_sink is None:
            try:
                existed = await super().delete(agent_id)
            except BaseException as exc:
                await gov.failed("delete", agent_id, exc)
                raise
            await gov.record("delete", agent_id, outcome="ok" if existed else "ok:absent")
            return existed
        # erased by _delete_with_entry, under the agent's lock, with its entry
        erased: bool = await self._change("delete", agent_id, super().delete)
        return erased

    async def _change(self, operation: str, agent_id: str, call: Any) -> Any:
        """``call(agent_id)`` (the store's delete or snapshot), whose engine write the
        hooks below make with its audit entry; a failure before any entry was
        written is recorded here."""
        change = Pending(operation, agent_id)
        token = CHANGE.set(change)
        try:
            result = await call(agent_id)
        except BaseException as exc:
            if not change.recorded:
                await self._governance.failed(operation, agent_id, exc)
            raise
        finally:
            CHANGE.reset(token)
        if not change.recorded:  # (the engine write was not reached: nothing to record)
            await self._governance.record(operation, agent_id)
        return result

    def _changing(self, operation: str, agent_id: str) -> Pending | None:
        change = CHANGE.get()
        if change is None or change.operation != operation or change.agent_id != agent_id:
            return None
        return change

    async def _save_snapshot_with_entry(self, agent_id: str, raw: RawSnapshot) -> None:
        """The store's write of an explicit snapshot: with its entry in one commit
        where the engine has one (memory, SQLite, PostgreSQL), else the entry first
        (voided when the write fails). The entry names the snapshot record (seq and
        checksum), which ``audit verify`` looks for."""
        change = self._changing("snapshot", agent_id)
        if change is None:
            await self.backend.save_snapshot(agent_id, raw)
            return
        principal = self._governance.principal
        named = [raw.seq, raw.checksum.hex()]
        together = self._change_sink
        if together is not None:
            await together.record_with_change(
                StreamChange(agent_id, snapshot=raw), "snapshot", principal=principal,
                first_seq=raw.seq, last_seq=raw.seq, detail={"snapshot": named},
            )  # fmt: skip
            change.recorded = True
            return
        sink = self._ahead_sink
        assert sink is not None
        entry = await sink.record_ahead(
            "snapshot", principal=principal, agent_id=agent_id, first_seq=raw.seq,
            last_seq=raw.seq, ahead={"snapshot": named},
        )  # fmt: skip
        change.recorded = True
        try:
            await self.backend.save_snapshot(agent_id, raw)
        except BaseException as exc:
            await self._void(entry, "snapshot", agent_id, exc)
            raise

    async def _delete_with_entry(self, agent_id: str) -> bool:
        """The store's delete of a stream: with its entry in one commit where the
        engine has one (the delete conditional on the head the entry names: a writer
        that appended meanwhile makes it read the head again), else the entry first,
        naming the head event it removes (a crash between the two leaves an entry
        ``audit verify`` reports as not applied, never a delete without its entry)."""
        change = self._changing("delete", agent_id)
        if change is None:  # (with its feed tombstone: in one commit where it can be)
            return await feed_deletes.erase(self.backend, self.codec, agent_id)
        gov = self._governance
        feed = feed_deletes.has_feed(self.backend)
        if feed and self._change_sink is not None:  # (with_intent settles them itself)
            await feed_intents.settle(self.backend, self.codec)  # a forget's a crash left
        forgotten = feed_deletes.forgetting.get()
        last: ConflictError | None = None
        expected = conditional.expected_head()  # a retention purge's: no retry
        identity = conditional.expected_checksum()  # (its head record's, when given)
        for _ in range(_CHANGE_RETRIES):
            try:
                seq = await self.backend.head(agent_id)
            except AgentLost:  # its data is gone (evicted...): deleting acknowledges it
                seq = 0
            if expected is not None and seq != expected:
                raise ConflictError(agent_id, expected, seq)
            raws = await self.backend.read(agent_id, after_seq=seq - 1, to_seq=seq) if seq else []
            if not raws:  # nothing stored to delete: recorded after
                existed = await self.backend.delete_agent(agent_id)
                for first in PRECEDING.get():
                    await gov.record(
                        first["op"], agent_id, outcome=first["outcome"], detail=first["detail"]
                    )
                await gov.record("delete", agent_id, outcome="ok" if existed else "ok:absent")
                change.recorded = True
                if existed and feed:  # (none after an agent created again since)
                    await feed_deletes.record_unless_created(
                        self.backend, self.codec, agent_id, seq, forgotten=forgotten
                    )
                return existed
            checksum = raws[-1].checksum  # the head record this entry names, deleted alone
            if identity is not None and checksum != identity:  # deleted, written again
                raise ConflictError(agent_id, seq, seq)
            erased = [seq, checksum.hex()]
            together = self._change_sink
            tombstone = feed_deletes.stream_of(self.backend, agent_id) if feed else None
            try:
                if together is None:  # the entry first, then the delete at the head it names
                    if not feed:
                        return await self._delete_ahead(agent_id, seq, checksum, change)
                    return await feed_intents.with_intent(  # (its tombstone after it)
                        self.backend, self.codec, agent_id, seq, forgotten,
                        functools.partial(self._delete_ahead, agent_id, seq, checksum, change),
                    )  # fmt: skip
                # the delete, its entry and its feed tombstone: one commit
                appends: list[AppendRequest] = []
                if tombstone is not None:
                    appends.append(
                        await feed_deletes.tombstone_request(
                            self.backend, self.codec, agent_id, seq, forgotten
                        )
                    )
                await together.record_with_change(
                    StreamChange(agent_id, delete_at=seq, delete_checksum=checksum), "delete",
                    principal=gov.principal,
                    detail={"erased": erased}, preceding=PRECEDING.get(), appends=appends,
                )  # fmt: skip
            except ConflictError as exc:
                if exc.agent_id == tombstone and exc.agent_id is not None:
                    last = exc  # another delete's tombstone first: nothing written, again
                    continue
                if exc.agent_id != agent_id or expected is not None:
                    raise
                last = exc  # another process wrote (or deleted) meanwhile: look again
                continue
            change.recorded = True
            return True
        assert last is not None
        raise RetriesExhausted(agent_id, _CHANGE_RETRIES, last)

    async def _delete_ahead(
        self, agent_id: str, seq: int, checksum: bytes, change: Pending
    ) -> bool:
        """The entry naming the head event (at ``seq``, ``checksum``), then the delete only
        at that head record (:func:`conditional.delete_at`): an append landing in between makes
        it a :class:`ConflictError` with nothing deleted and the entry voided (an
        unconditional delete erased that append too, under an entry naming the head
        before it)."""
        sink = self._ahead_sink
        assert sink is not None
        entry = await sink.record_ahead(
            "delete", principal=self._governance.principal, agent_id=agent_id,
            ahead={"gone": [seq, checksum.hex()]},
        )  # fmt: skip
        change.recorded = True
        try:
            return await conditional.delete_at(self.backend, agent_id, seq, checksum)
        except BaseException as exc:
            await self._void(entry, "delete", agent_id, exc)
            raise

    async def _void(self, entry: int, operation: str, agent_id: str, exc: BaseException) -> None:
        sink = self._ahead_sink
        if sink is not None and isinstance(exc, Exception):
            await sink.void(
                entry, operation, principal=self._governance.principal, agent_id=agent_id,
                exc=exc,
            )  # fmt: skip
