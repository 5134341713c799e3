"""A backup's entry in the audit log (:func:`audit_backup`): what was written, where,
in the sink the caller gave or the store's own log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...arguments import AUDIT_STREAM
from ...store.namespaced import NamespacedStateStore
from ..hooks import AuditSink, GovernanceEvent, emit, store_sink

if TYPE_CHECKING:
    from ...store import StateStore
    from .writer import BackupResult


async def audit_backup(store: StateStore, given: AuditSink | None, result: BackupResult) -> None:
    """Record the backup in ``given``, else the store's audit log (a whole store's
    backup copied it when there is one: known without another read)."""
    whole = not isinstance(store, NamespacedStateStore)
    kept = AUDIT_STREAM in result.internal_streams if whole else None
    await emit(
        await store_sink(store, given, kept=kept),
        GovernanceEvent(
            "backup",
            None,
            "ok",
            details={
                "backup_id": result.backup_id,
                "parent": result.parent,
                "agents": result.agents,
                "events": result.events,
                "location": result.location,
            },
        ),
    )
