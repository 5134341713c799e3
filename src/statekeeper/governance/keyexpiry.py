"""Retention's ``keys_ttl``: idempotency records older than a rule says are forgotten.

Every keyed append (``idempotency_key=``, a durable step, a LangGraph write) leaves a
record that makes a retry of it a no-op (:mod:`statekeeper.store.idempotency`). With no
rule, records stay as long as their agent: the exactly-once guarantee has no time
limit, and the record table grows with every keyed append. A rule's ``keys_ttl=30d``
bounds it: :func:`statekeeper.governance.retention.apply_retention` forgets, per agent
the rule governs (held agents skipped), the records made more than ``keys_ttl`` before
the run (``Backend.expire_keys``; a record's time is its append's). A retry of such an
append is no longer recognised: it is stored again, as a new append — so ``keys_ttl``
must be longer than any caller retries. A durable step's record
(:mod:`statekeeper.concurrency.steps`, key ``step:<id>``) is never forgotten: a step
retried after its record expired would run its side effect again, without a word; it
stays as long as its agent (as its event, which compaction keeps, does).

A run reports one ``expire-keys`` action per agent that had such records (``dry-run``:
counted, nothing forgotten), audited as governance operation ``expire-keys`` with the
count; on an engine without ``Capability.KEY_EXPIRY`` (Redis: its records go with the
agent's own TTL) the action is ``unsupported`` and nothing is forgotten.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .._durations import duration_text
from ..backends.base import Capability
from ..errors import AccessDenied, StatekeeperError
from .hooks import AuditSink, GovernanceEvent, emit

if TYPE_CHECKING:
    from ..store import StateStore
    from .retention import RetentionAction, Rule

__all__ = ["KIND", "apply_key_expiry", "expire_agent_keys", "expires_keys_after", "key_event"]

#: the retention action's kind (and the audit log's operation)
KIND = "expire-keys"


async def expire_agent_keys(
    store: StateStore, rule: Rule, agent_id: str, now: float, dry_run: bool
) -> RetentionAction | None:
    """Forget (``dry_run``: count) ``agent_id``'s idempotency records made more than
    ``rule.keys_ttl`` seconds before ``now``; the action, or None when the rule sets
    no ``keys_ttl`` or no record is that old."""
    from .retention import RetentionAction

    ttl = rule.keys_ttl
    if ttl is None:
        return None
    backend = store.backend
    if not backend.supports(Capability.KEY_EXPIRY):
        return RetentionAction(
            agent_id, KIND, "unsupported", reason="idempotency records expire with the agent's TTL"
        )
    count = await backend.expire_keys(agent_id, now - ttl, count_only=dry_run)
    if not count:
        return None
    return RetentionAction(
        agent_id,
        KIND,
        "dry-run" if dry_run else "done",
        reason=f"made more than {duration_text(ttl)} ago",
        keys_expired=count,
    )


def key_event(action: RetentionAction) -> GovernanceEvent:
    """How an ``expire-keys`` action is recorded in the audit log."""
    return GovernanceEvent(
        KIND,
        action.agent_id,
        action.outcome,
        None,
        None,
        {"keys_expired": action.keys_expired, "reason": action.reason},
    )


def expires_keys_after(action: RetentionAction | None) -> bool:
    """Whether a run goes on to the agent's records after its retention ``action``:
    not after a purge (the records go with the agent; a dry run's would) nor a
    refusal (the principal may not change the agent)."""
    if action is None:
        return True
    if action.outcome == "refused":
        return False
    return not (action.kind == "purge" and action.outcome in ("done", "dry-run"))


async def apply_key_expiry(
    store: StateStore,
    audit: AuditSink | None,
    rule: Rule,
    agent_id: str,
    listed: str,
    now: float,
    dry_run: bool,
) -> RetentionAction | None:
    """:func:`expire_agent_keys` as a run makes it: its action (named ``listed``, the
    id as the store lists it) audited, a failure reported as a ``failed`` action (a
    refusal, as the database's row-level security makes one, ``refused``)."""
    from .retention import RetentionAction

    try:
        action = await expire_agent_keys(store, rule, agent_id, now, dry_run)
    except AccessDenied as exc:  # (PostgreSQL row-level security: the role may not)
        action = RetentionAction(agent_id, KIND, "refused", reason=str(exc))
    except StatekeeperError as exc:
        action = RetentionAction(agent_id, KIND, "failed", reason=str(exc))
    if action is None:
        return None
    if action.outcome != "refused":  # (as retention's other refusals: not an entry)
        await emit(audit, key_event(action))
    return dataclasses.replace(action, agent_id=listed)
