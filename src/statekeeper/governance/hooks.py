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

__all__ = ["AuditSink", "GovernanceEvent", "emit"]


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
