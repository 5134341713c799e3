"""The mutation this task is making, shared by a governed store's write paths and
their audit hooks (:mod:`.governed_writes`: a call, the group committer, the
write-behind flush; :mod:`.governed_changes`: a delete or a snapshot), each in a
context variable of the task: whichever path writes it records its audit entry with
it, once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from ..records import AuditMark

__all__ = ["CHANGE", "PENDING", "PRECEDING", "Pending", "audit_mark", "entries_before_delete"]


class Pending:
    """The mutation this task is making (see ``_mutate`` and ``_change`` in
    :mod:`.governed_writes` and :mod:`.governed_changes`): ``recorded`` once its audit
    entry committed with its append."""

    __slots__ = ("agent_id", "operation", "recorded")

    def __init__(self, operation: str, agent_id: str) -> None:
        self.operation = operation
        self.agent_id = agent_id
        self.recorded = False


#: the create, save or append this task is making (see :mod:`.governed_writes`)
PENDING: ContextVar[Pending | None] = ContextVar("statekeeper_audit_pending", default=None)
#: the delete or snapshot this task is making (see :mod:`.governed_changes`)
CHANGE: ContextVar[Pending | None] = ContextVar("statekeeper_audit_change", default=None)
#: entries to commit just before the entry of this task's next delete, in its commit
PRECEDING: ContextVar[tuple[Mapping[str, Any], ...]] = ContextVar(
    "statekeeper_audit_preceding", default=()
)


@contextlib.contextmanager
def entries_before_delete(entries: Sequence[Mapping[str, Any]]) -> Iterator[None]:
    """Within: a governed store's delete (on an engine with one commit for two
    streams) commits ``entries`` (each ``{"op", "outcome", "detail", "first_seq",
    "last_seq"}``) just before its own entry, in ONE commit with the delete: a
    retention purge and the delete that makes it, both or neither."""
    token = PRECEDING.set(tuple(entries))
    try:
        yield
    finally:
        PRECEDING.reset(token)


def audit_mark(pending: Pending, principal: str | None, first: int, last: int) -> AuditMark:
    """The audit entry ``pending``'s append (seqs ``first``..``last``) is written with."""
    return AuditMark(pending.operation, principal, pending.agent_id, first, last)
