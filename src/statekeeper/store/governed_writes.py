"""A governed store's writes (:class:`GovernedWrites`): ``create``, ``save``,
``append`` (and ``settle``) need ``write``; each append is written with its audit
entry — by the call's own submit, or in the batch of the group committer or of a
write-behind flush (the ``BatchAuditor`` hooks ``label`` and ``commit``) — through the
mutation the task is making (:mod:`.governed_pending`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import AccessDenied
from ..namespaces import namespace_of
from ..records import AppendRequest, AppendResult
from .governed_base import GovernedBase
from .governed_checks import Governance, log_locked, noting_failure
from .governed_pending import PENDING, Pending, audit_mark

__all__ = ["GovernedWrites"]


class GovernedWrites(GovernedBase):
    """The write calls of :class:`~.governed.GovernedStateStore` and its audit hooks of
    appends."""

    async def _mutate(
        self, operation: str, agent_id: str, call: Any, *args: Any, **kw: Any
    ) -> AppendResult:
        gov = await self._allowed(agent_id, "write", operation)
        actor = kw.get("actor")
        if actor is None:
            kw["actor"] = gov.principal  # the stream itself says who wrote
        elif actor != gov.principal and gov.policy is not None and gov.principal is not None:
            try:
                await self._as_another(gov, agent_id, operation, actor)
            except AccessDenied as exc:
                self._observe_denied(operation, agent_id, exc)
                raise
        pending = Pending(operation, agent_id)
        token = PENDING.set(pending)
        try:
            result: AppendResult = await call(agent_id, *args, **kw)
        except BaseException as exc:
            await gov.failed(operation, agent_id, exc)
            raise
        finally:
            PENDING.reset(token)
        if not pending.recorded:  # committed with the append already, or record it now
            await gov.record(operation, agent_id, result)
        return result

    async def _as_another(
        self, gov: Governance, agent_id: str, operation: str, actor: object
    ) -> None:
        """An ``actor=`` other than the principal writes history as someone else wrote
        it (an import does, as a restore does): ``admin``'s, never ``write``'s, else
        the stream would name a writer the audit log does not (refused, audited)."""
        policy = gov.policy
        assert policy is not None and gov.principal is not None
        if not policy.allows(gov.principal, agent_id, "admin"):
            exc = AccessDenied(
                gov.principal, "admin", operation, agent_id,
                f"writing as actor {str(actor)!r:.60} (not itself) needs admin on namespace"
                f" {namespace_of(agent_id)!r}",
            )  # fmt: skip
            await gov.refuse(exc, agent_id, {"actor": str(actor)[:128]})

    async def _submit_with_entry(self, request: AppendRequest) -> AppendResult:
        """The write pipeline's append: the mutation :meth:`_mutate` is making, with
        its audit entry, in one commit (:meth:`AuditLog.record_with`), or the entry
        first where the engine has no such commit (:meth:`AuditLog.write_with`)."""
        pending = PENDING.get()
        if pending is None or pending.recorded or pending.agent_id != request.agent_id:
            return await self.backend.append(request)
        sink = self._atomic_sink
        if sink is not None:
            result = await sink.record_with(
                request, pending.operation, principal=self._governance.principal
            )
        else:
            ahead = self._ahead_sink
            assert ahead is not None
            events = request.events
            mark = audit_mark(pending, self._governance.principal, events[0].seq, events[-1].seq)
            (out,) = await ahead.write_with([request], [[mark]])
            if isinstance(out, BaseException):
                raise out
            result = out
        pending.recorded = not result.duplicate
        return result

    # -- the group committer's and the write-behind buffer's batches (BatchAuditor) -----

    def label(self, request: AppendRequest) -> list[Any] | None:
        """The entry ``request`` is to be recorded with, taken when it is queued (in
        the task of the call that makes it); with write-behind the entry goes with the
        flush, so the call itself records nothing more."""
        pending = PENDING.get()
        if pending is None or pending.recorded or pending.agent_id != request.agent_id:
            return None
        events = request.events
        marks = [(pending, audit_mark(pending, self._governance.principal, events[0].seq,
                                 events[-1].seq))]  # fmt: skip
        if self._writes.behind is not None:
            pending.recorded = True
        return marks

    async def commit(
        self, requests: Sequence[AppendRequest], labels: Sequence[Sequence[Any]]
    ) -> list[AppendResult | BaseException]:
        """One batch of the group committer or of a write-behind flush, each append with
        its entries (:meth:`AuditLog.write_with`: one commit where the engine can)."""
        sink = self._ahead_sink
        assert sink is not None
        results = await sink.write_with(requests, [[m for _, m in pairs] for pairs in labels])
        failed = []
        for result, pairs in zip(results, labels, strict=True):
            for pending, mark in pairs:
                if isinstance(result, BaseException):
                    failed.append((mark, result))
                elif not result.duplicate:
                    pending.recorded = True
        if failed and self._writes.behind is not None:
            # acknowledged, never stored: the call that made it has returned long ago,
            # so the log says it here (sync and group calls raise, and _mutate records)
            # (one whose record fails too: the write's error stays the one reported,
            # the audit failure noted on it, and the other failures are still recorded)
            for mark, exc in failed:
                if log_locked(exc):
                    continue
                recording = self._governance.record(
                    mark.operation, mark.agent_id, outcome=f"error:{type(exc).__name__}",
                    detail={"seqs": [mark.first_seq, mark.last_seq], "write_behind": True},
                )  # fmt: skip
                await noting_failure(exc, recording)
        return results

    async def create(
        self, agent_id: str, data: Mapping[str, Any] | None = None, **kw: Any
    ) -> AppendResult:
        return await self._mutate("create", agent_id, super().create, data, **kw)

    async def save(self, agent_id: str, data: Mapping[str, Any], **kw: Any) -> AppendResult:
        operation = "transition" if kw.get("fsm_state") is not None else "save"
        return await self._mutate(operation, agent_id, super().save, data, **kw)

    async def append(
        self,
        agent_id: str,
        event_type: str,
        info: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> AppendResult:
        operation = "transition" if kw.get("fsm_state") is not None else "append"
        return await self._mutate(operation, agent_id, super().append, event_type, info, **kw)

    async def settle(self, agent_id: str) -> int | None:
        """:meth:`StateStore.settle` needs ``write``; a governed store settles nothing
        (its snapshots and removals carry audit entries of their own: None)."""
        await self._allowed(agent_id, "write", "settle")
        return await super().settle(agent_id)

    async def _idle_settle(self, agent_id: str) -> int | None:
        """An idle settle (``settle_after``) writes in this store's principal's name:
        only while the policy lets it ``write`` the agent, as :meth:`settle` requires
        (write revoked since the agent's last save: nothing stored, no refusal to
        audit — no call of the principal's was refused)."""
        gov = self._governance
        if gov.policy is not None and not gov.policy.allows(gov.principal or "", agent_id, "write"):
            return None
        return await super()._idle_settle(agent_id)
