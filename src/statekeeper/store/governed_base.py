"""What every part of a governed store shares (:class:`GovernedBase`, the base of the
mixins :class:`~.governed.GovernedStateStore` is composed of): its governance, its
audit sinks, and the check before a call."""

from __future__ import annotations

from ..arguments import check_agent_id
from ..errors import AccessDenied
from . import observing
from .governed_checks import Governance
from .governed_protocols import AheadAuditSink, AtomicAuditSink, ChangeAuditSink
from .store import StateStore

__all__ = ["GovernedBase"]


class GovernedBase(StateStore):
    """A :class:`StateStore` opened as a principal: the attributes its parts share (set
    by :meth:`GovernedStateStore.__init__ <.governed.GovernedStateStore>`) and the
    checks each call makes first."""

    _governance: Governance
    #: the audit log, when it commits an entry with the append it records
    _atomic_sink: AtomicAuditSink | None
    #: ... and with a delete or a snapshot
    _change_sink: ChangeAuditSink | None
    #: the audit log, when it records a write with (or ahead of) it
    _ahead_sink: AheadAuditSink | None

    async def _allowed(self, agent_id: str | None, permission: str, operation: str) -> Governance:
        gov = self._governance
        if agent_id is not None:
            check_agent_id(agent_id)
        try:
            await gov.require(agent_id, permission, operation)
        except AccessDenied as exc:
            self._observe_denied(operation, agent_id, exc)
            raise
        return gov

    def _observe_denied(self, operation: str, agent_id: str | None, exc: AccessDenied) -> None:
        """A refusal shows in metrics and traces like any failed operation (see
        :func:`.observing.denied`): naming the agent only where the principal may read it."""
        if self.observer is not None:
            readable = agent_id is not None and self._governance.can_read(agent_id)
            observing.denied(self, operation, agent_id, exc, readable=readable)

    async def _check_read(self, agent_id: str, operation: str) -> None:
        await self._allowed(agent_id, "read", operation)
        gov = self._governance
        if gov.audit is not None and gov.audit.reads:
            await gov.record(operation, agent_id)
