"""The governance of one store (:class:`Governance`): its principal, its policy and
its audit log — the check before a call (refused: :class:`~statekeeper.errors.AccessDenied`,
audited) and the audit record after it, or before it (``ahead``) and voided when it
fails. :func:`governance_of` hands it to the tools that drive a store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..errors import AccessDenied, AuditLogLocked, FeedLocked
from ..records import AppendResult
from .governed_protocols import AccessPolicy, AuditSink

__all__ = ["LOG_LOCKS", "Governance", "governance_of", "log_locked", "noting_failure"]

#: the locks every write of the audit log waits for at most ``audit_lock_timeout``:
#: its head row, and under row security the change feed's (every write of events)
LOG_LOCKS = (AuditLogLocked, FeedLocked)

# voids of cancelled mutations still being written (see Governance.voided)
_VOIDING: set[asyncio.Future[Any]] = set()


class Governance:
    """The principal, its policy and the audit log of one store."""

    def __init__(
        self, principal: str | None, policy: AccessPolicy | None, audit: AuditSink | None
    ) -> None:
        self.principal = principal
        self.policy = policy
        self.audit = audit

    async def require(self, agent_id: str | None, permission: str, operation: str) -> None:
        """Raise :class:`AccessDenied` (audited) unless the policy allows it."""
        if self.policy is None:
            return
        try:
            self.policy.check(self.principal or "", agent_id, permission, operation)
        except AccessDenied as exc:
            await self.refuse(exc, agent_id)

    async def require_namespace(self, namespace: str, permission: str, operation: str) -> None:
        """Raise :class:`AccessDenied` (audited, naming the namespace) unless the
        policy grants ``permission`` on ``namespace`` and every namespace below it
        (:meth:`Policy.check_namespace`; ``""``: the whole store, ``**``)."""
        if self.policy is None:
            return
        try:
            self.policy.check_namespace(self.principal or "", namespace, permission, operation)
        except AccessDenied as exc:
            await self.refuse(exc, None, {"namespace": namespace})

    async def require_reach(self, namespace: str, permission: str, operation: str) -> None:
        """Raise :class:`AccessDenied` (audited) unless the policy grants
        ``permission`` somewhere in ``namespace`` or below it: a listing of a
        namespace in which the principal could never see an agent is refused, not
        answered with an empty page."""
        policy, principal = self.policy, self.principal or ""
        if policy is None:
            return
        if not policy.knows(principal):
            await self.require(None, permission, operation)  # refused: names it, audited
        if not policy.reaches(principal, namespace, permission):
            where = f"namespace {namespace!r} or below" if namespace else "any namespace"
            exc = AccessDenied(
                principal, permission, operation, None, f"may {permission} no agent in {where}",
                namespace=namespace,
            )  # fmt: skip
            await self.refuse(exc, None, {"namespace": namespace})

    async def refuse(
        self, exc: AccessDenied, agent_id: str | None, detail: Mapping[str, Any] | None = None
    ) -> None:
        """Audit the refusal ``exc`` (outcome ``denied``) and raise it."""
        if self.audit is not None:
            await self.audit.record(
                exc.operation,
                principal=self.principal,
                agent_id=agent_id,
                outcome="denied",
                detail={"needs": exc.permission, **(detail or {})},
            )
        raise exc from None

    def can_read(self, agent_id: str) -> bool:
        return self.policy is None or self.policy.allows(self.principal or "", agent_id, "read")

    def store_admin(self) -> bool:
        return self.policy is None or self.policy.is_store_admin(self.principal or "")

    async def record(
        self,
        operation: str,
        agent_id: str | None = None,
        result: AppendResult | None = None,
        *,
        outcome: str = "ok",
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Audit a mutation (no-op without an audit log)."""
        if self.audit is None:
            return
        first = last = None
        if result is not None:
            first, last = result.first_seq, result.last_seq
            if result.duplicate:
                detail = {**(detail or {}), "duplicate": True}
        await self.audit.record(
            operation,
            principal=self.principal,
            agent_id=agent_id,
            first_seq=first,
            last_seq=last,
            outcome=outcome,
            detail=detail,
        )

    async def ahead(
        self,
        operation: str,
        agent_id: str | None,
        detail: Mapping[str, Any] | None = None,
        *,
        mark: Any = True,
    ) -> int | None:
        """Record a mutation BEFORE making it (an entry marked ``ahead``; see
        :meth:`AuditLog.record_ahead`); its seq, for :meth:`voided`. None without an
        audit log (or one that cannot: the caller records after, with :meth:`record`)."""
        audit = self.audit
        record_ahead = getattr(audit, "record_ahead", None)
        if record_ahead is None:
            return None
        seq: int = await record_ahead(
            operation, principal=self.principal, agent_id=agent_id, detail=detail, ahead=mark
        )
        return seq

    async def voided(
        self, entry: int | None, operation: str, agent_id: str | None, exc: BaseException
    ) -> None:
        """The mutation announced by entry ``entry`` (:meth:`ahead`) failed (None: no
        entry was written). A cancellation is a failure too (was: only an ``Exception``
        voided, so an acquire cancelled after its entry left the log saying a lease was
        granted that never was); the void is then shielded: cancelled again while it is
        written, it goes on in the background (held in ``_VOIDING``)."""
        void = getattr(self.audit, "void", None)
        if void is None or entry is None:
            return
        written = void(entry, operation, principal=self.principal, agent_id=agent_id, exc=exc)
        if isinstance(exc, Exception):
            await noting_failure(exc, written)
            return
        done = asyncio.ensure_future(written)
        _VOIDING.add(done)
        done.add_done_callback(_VOIDING.discard)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(done)

    def voiding(
        self, operation: str, agent_id: str | None
    ) -> Callable[[int | None], Awaitable[None]]:
        """:meth:`voided` for an entry whose writer was cancelled while it was written
        (a ``give_back`` for ``lease_grants.granting``)."""
        return lambda entry: self.voided(entry, operation, agent_id, asyncio.CancelledError())

    async def failed(self, operation: str, agent_id: str | None, exc: BaseException) -> None:
        """Audit a mutation that raised (nothing, or not all of it, was written)."""
        if self.audit is not None and isinstance(exc, Exception) and not log_locked(exc):
            recording = self.record(operation, agent_id, outcome=f"error:{type(exc).__name__}")
            await noting_failure(exc, recording)


def log_locked(exc: BaseException) -> bool:
    """True when ``exc`` is the audit log's head found locked (``AuditLogLocked``), or
    under row security the change feed's lock (``FeedLocked``: every write of events
    waits for it, the log's too): its failure is not recorded in that log, whose record
    would wait ``audit_lock_timeout`` for the same lock again (was: twice the bound, and
    once more for each failed write of a flush); a note on ``exc`` says so."""
    if not isinstance(exc, LOG_LOCKS):
        return False
    what = "its head" if type(exc) is AuditLogLocked else "the change feed"
    note = f"not recorded in the audit log: {what} is locked ({type(exc).__name__})"
    if note not in getattr(exc, "__notes__", ()):  # (a batch's callers share one)
        exc.add_note(note)
    return True


async def noting_failure(exc: BaseException, recording: Awaitable[Any]) -> None:
    """Await the audit record of the failure ``exc`` (which its caller raises next); an
    audit record that fails too is noted on ``exc`` (was: its error replaced ``exc``,
    and the caller never learned what failed first)."""
    try:
        await recording
    except Exception as audit_exc:
        exc.add_note(f"its audit record failed too: {type(audit_exc).__name__}: {audit_exc}")


def governance_of(store: object) -> Governance | None:
    """The governance of a store (None for a plain store): for tools that drive one
    (rekey, migrate, leases, repair) to check and audit what they do."""
    return getattr(store, "_governance", None)
