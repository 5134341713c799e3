"""The one way retention, shredding and backups report what they did, for the audit log.

Each purge, forget, hold, backup and restore calls the store's audit sink (when one is
given, else the store's own audit log when it keeps one: :func:`store_sink`, with or
without a principal) with a :class:`GovernanceEvent`: the operation, the agent (None for
a whole-store operation), the seq range touched, the outcome and small PII-free details.
The audit log of :mod:`statekeeper.governance` records them; any callable (sync or
async) works."""

from __future__ import annotations

import contextlib
import inspect
import time
import weakref
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
    "store_log",
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


async def store_log(store: Any, kept: bool | None = None) -> tuple[Any, str | None] | None:
    """The audit log a store's mutations go to, and the principal its entries name:
    the log of a store opened as a principal (``StateStore(..., principal=...,
    audit=Audit())``); else, for a store opened without one, the store's own audit log
    when it keeps one (its entries then name no principal: ``-`` in ``statekeeper
    audit``) and the store has keys to seal an entry with. None otherwise. ``kept``:
    whether the store keeps an audit log, when the caller knows it already (a whole
    store's backup copied it, or not): then it is not read."""
    gov = getattr(store, "_governance", None)
    if gov is not None:
        return (gov.audit, gov.principal) if gov.audit is not None else None
    codec = getattr(store, "codec", None)
    keyring = getattr(codec, "keyring", None)
    if keyring is None:
        return None
    try:
        log = _KEPT.get(store)
    except TypeError:  # (a store that cannot be weakly referenced: looked up each time)
        log = None
    if log is None:
        if kept is None:
            from ..arguments import AUDIT_STREAM

            kept = bool(await store.backend.head(AUDIT_STREAM))
        if not kept:
            return None  # (not remembered: a log may be started later)
        from .audit import AuditLog

        log = AuditLog(store.backend, keyring)
        with contextlib.suppress(TypeError):
            _KEPT[store] = log
    return log, None


#: per store opened without a principal: the audit log it was found to keep (one log
#: object per store, so that its entries share a lock and the head it last wrote)
_KEPT: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


async def store_sink(
    store: Any, audit: AuditSink | None, *, kept: bool | None = None
) -> AuditSink | None:
    """``audit`` when given, else a sink into the store's audit log
    (:func:`store_log`): purges, forgets, holds and backups run on a store that keeps
    an audit log are recorded without being wired by hand, with or without a
    principal. ``kept``: as :func:`store_log`'s."""
    if audit is not None:
        return audit
    found = await store_log(store, kept)
    if found is None:
        return None
    return to_audit_log(*found)


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
    found = await store_log(store)
    if found is None:
        return None
    log, principal = found
    if not callable(getattr(log, "record_ahead", None)):
        return None
    entry = await log.record_ahead(
        event.op,
        principal=principal,
        agent_id=event.agent_id,
        first_seq=event.first_seq,
        last_seq=event.last_seq,
        detail=event.details,
        outcome=event.outcome,
    )
    return Announced(log, entry, event, principal)


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
