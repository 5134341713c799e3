"""The one way retention, shredding and backups report what they did, for the audit log.

Each purge, forget, backup and restore calls the store's audit sink (when one is given)
with a :class:`GovernanceEvent`: the operation, the agent (None for a whole-store
operation), the seq range touched, the outcome and small PII-free details. The audit
log of :mod:`statekeeper.governance` records them; any callable (sync or async) works.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Announced",
    "AuditSink",
    "ChangeSink",
    "GovernanceEvent",
    "announce",
    "change_sink",
    "emit",
    "is_store_admin",
    "require_namespace",
    "store_namespace",
    "store_sink",
    "to_audit_log",
]


@dataclass(frozen=True, slots=True)
class GovernanceEvent:
    """One governance operation on one agent (or the whole store: ``agent_id`` None)."""

    op: str  # "purge", "compact", "thin-snapshots", "forget", "backup", "restore"
    agent_id: str | None
    outcome: str = "ok"  # "ok", "refused", "failed", "dry-run"
    first_seq: int | None = None
    last_seq: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)


#: what receives :class:`GovernanceEvent` s (the audit log's recorder, a test list's append)
AuditSink = Callable[[GovernanceEvent], Awaitable[None] | None]


async def emit(sink: AuditSink | None, event: GovernanceEvent) -> None:
    """Hand ``event`` to ``sink`` (awaited when it is a coroutine function)."""
    if sink is None:
        return
    result = sink(event)
    if inspect.isawaitable(result):
        await result


def to_audit_log(log: Any, principal: str | None = None) -> AuditSink:
    """An :data:`AuditSink` that records each event in an audit log: any object with
    ``await log.record(op, *, principal, agent_id, first_seq, last_seq, outcome,
    detail)`` (the store's hash-chained audit log, :mod:`statekeeper.governance.audit`)."""

    async def sink(event: GovernanceEvent) -> None:
        await log.record(
            event.op,
            principal=principal,
            agent_id=event.agent_id,
            first_seq=event.first_seq,
            last_seq=event.last_seq,
            outcome=event.outcome,
            detail=event.details,
        )

    return sink


def store_sink(store: Any, audit: AuditSink | None) -> AuditSink | None:
    """``audit`` when given, else the audit log of a store opened as a principal
    (``StateStore(..., principal=..., audit=Audit())``), so that purges, forgets and
    backups run on a governed store are recorded without being wired by hand."""
    if audit is not None:
        return audit
    gov = getattr(store, "_governance", None)
    if gov is None or gov.audit is None:
        return None
    return to_audit_log(gov.audit, gov.principal)


async def require(store: Any, agent_id: str | None, permission: str, operation: str) -> None:
    """On a store opened as a principal, raise
    :class:`~statekeeper.errors.AccessDenied` (itself audited) unless its policy grants
    ``permission`` on ``agent_id``; a plain store allows everything."""
    gov = getattr(store, "_governance", None)
    if gov is not None:
        await gov.require(agent_id, permission, operation)


async def require_namespace(store: Any, permission: str, operation: str) -> None:
    """On a store opened as a principal, raise
    :class:`~statekeeper.errors.AccessDenied` (itself audited) unless its policy grants
    ``permission`` on the whole of the store's namespace (the namespace of a store
    opened with ``namespace=``, and every namespace below it; ``**`` for a store
    opened without one): the check of an operation on everything the store holds
    (:meth:`statekeeper.governance.Policy.check_namespace`). A plain store allows
    everything."""
    gov = getattr(store, "_governance", None)
    if gov is not None:
        await gov.require_namespace(store_namespace(store), permission, operation)


def is_store_admin(store: Any) -> bool:
    """Whether ``store`` may report on the whole store: a plain store, or one opened as
    a principal with ``admin`` on ``**`` (or with no policy). Store-wide aggregates
    (the file's size, the audit log's records, the change feed's positions) count every
    tenant's agents: a report for another principal leaves them out."""
    gov = getattr(store, "_governance", None)
    return gov is None or bool(gov.store_admin())


def store_namespace(store: Any) -> str:
    """The namespace a store is opened in (``""``: the whole store)."""
    namespace = getattr(store, "namespace", "")
    return namespace if isinstance(namespace, str) else ""


class Announced:
    """A mutation recorded in a governed store's audit log before it is made
    (:func:`announce`): :meth:`failed` records that it then failed."""

    __slots__ = ("entry", "event", "log", "principal")

    def __init__(self, log: Any, entry: int, event: GovernanceEvent, principal: str | None):
        self.log = log
        self.entry = entry
        self.event = event
        self.principal = principal

    async def failed(self, exc: BaseException) -> None:
        if isinstance(exc, Exception):
            await self.log.void(
                self.entry,
                self.event.op,
                principal=self.principal,
                agent_id=self.event.agent_id,
                exc=exc,
            )


async def announce(store: Any, audit: AuditSink | None, event: GovernanceEvent) -> Announced | None:
    """Record ``event`` BEFORE making it, in the audit log of a store opened as a
    principal (an entry marked ``ahead``: a crash after it leaves at worst an entry of
    a change not made, never a change without its entry). None when the caller gave
    its own ``audit`` sink or the store keeps no such log: the caller then
    :func:`emit` s the event after the change, as before."""
    if audit is not None:
        return None
    gov = getattr(store, "_governance", None)
    log = getattr(gov, "audit", None)
    if log is None or not callable(getattr(log, "record_ahead", None)):
        return None
    entry = await log.record_ahead(
        event.op,
        principal=gov.principal,  # type: ignore[union-attr]
        agent_id=event.agent_id,
        first_seq=event.first_seq,
        last_seq=event.last_seq,
        detail=event.details,
        outcome=event.outcome,
    )
    return Announced(log, entry, event, gov.principal)  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class ChangeSink:
    """A governed store's audit log that commits an entry with a change of a stream
    (:meth:`statekeeper.governance.AuditLog.record_with_change`), and its principal."""

    sink: Any
    principal: str | None


def change_sink(store: Any, audit: AuditSink | None) -> ChangeSink | None:
    """The audit log of a store opened as a principal, when its engine commits an
    entry and a change of another stream together (memory, SQLite, PostgreSQL) and
    the caller gave no ``audit`` sink of its own: retention then makes each
    compaction or thinning in ONE commit with its entry. None otherwise (the entry
    goes first: :func:`announce`)."""
    if audit is not None:
        return None
    gov = getattr(store, "_governance", None)
    together = getattr(store, "_change_sink", None)
    if gov is None or together is None:
        return None
    return ChangeSink(together, gov.principal)
