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

__all__ = ["AuditSink", "GovernanceEvent", "emit", "to_audit_log"]


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
