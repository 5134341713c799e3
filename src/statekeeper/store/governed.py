"""A store opened as a principal: every call checked against a policy, every
mutation (and refusal) recorded in an audit log.

``StateStore(url, principal="alice", policy=policy, audit=Audit())`` builds a
:class:`GovernedStateStore` (``StateStore.__new__`` picks it when any of the three is
given), a subclass that overrides every public call of the store: a check before
(:class:`Governance.require`: :class:`~statekeeper.errors.AccessDenied` when the policy
refuses, and the refusal audited), the store's own call, then the audit record of what
it did. A store opened without them is the plain :class:`StateStore`: no check, no
cost, on any path.

The policy and the audit log are objects of :mod:`statekeeper.governance` (a layer
above this one); the store only calls them, through the protocols of
:mod:`.governed_protocols`.

:class:`GovernedStateStore` is composed of one part per job, each a mixin over
:class:`~.governed_base.GovernedBase` (the governance, the audit sinks and the check
before a call): the reads (:mod:`.governed_reads`), the change feed and its admin
calls (:mod:`.governed_feed`), the writes and the audit hooks of their appends
(:mod:`.governed_writes`), the deletes and snapshots and theirs
(:mod:`.governed_changes`); the per-task mutation those hooks share is in
:mod:`.governed_pending`, the check and audit calls (:class:`Governance`) in
:mod:`.governed_checks`. This module opens it and holds its policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..arguments import check_principal
from ..errors import ConfigurationError
from .governed_changes import GovernedChanges
from .governed_checks import Governance
from .governed_checks import governance_of as governance_of
from .governed_checks import noting_failure as noting_failure
from .governed_feed import GovernedFeed
from .governed_pending import entries_before_delete as entries_before_delete
from .governed_protocols import AccessPolicy, AuditSettings
from .governed_protocols import AheadAuditSink as AheadAuditSink
from .governed_protocols import AtomicAuditSink as AtomicAuditSink
from .governed_protocols import AuditSink as AuditSink
from .governed_protocols import ChangeAuditSink as ChangeAuditSink
from .governed_reads import GovernedReads
from .governed_writes import GovernedWrites

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["AccessPolicy", "AuditSettings", "AuditSink", "Governance", "GovernedStateStore"]


class GovernedStateStore(GovernedReads, GovernedFeed, GovernedWrites, GovernedChanges):
    """A :class:`StateStore` opened as a principal (see the module documentation)."""

    def __init__(
        self,
        backend: Backend | str | None = None,
        *,
        principal: str | None = None,
        policy: AccessPolicy | None = None,
        audit: AuditSettings | None = None,
        **options: Any,
    ) -> None:
        if policy is not None and principal is None:
            raise ConfigurationError("a policy needs a principal: StateStore(..., principal=...)")
        if principal is not None:
            check_principal(principal, "principal")
        if policy is not None and not callable(getattr(policy, "check", None)):
            raise ConfigurationError(
                f"policy must be a statekeeper.governance.Policy, not {type(policy).__name__}"
            )
        if audit is not None and not callable(getattr(audit, "open", None)):
            raise ConfigurationError(
                f"audit must be a statekeeper.governance.Audit, not {type(audit).__name__}"
            )
        if audit is not None and getattr(audit, "keyring", None) is None:
            codec = options.get("codec")
            if options.get("keyring") is None and getattr(codec, "keyring", None) is None:
                # refused before the backend is opened (nothing to close, nothing created)
                raise ConfigurationError(
                    "an audit log needs a key: give the store a keyring, or Audit(keyring=...)"
                )
        super().__init__(backend, **options)
        sink = audit.open(self.backend, self.codec.keyring) if audit is not None else None
        # an unknown principal is not refused here (the store would stay open): every
        # call it makes is (Policy.check names it), audited
        self._governance = Governance(principal, policy, sink)
        self._atomic_sink = None
        self._change_sink = None
        self._ahead_sink = None
        if sink is not None and callable(getattr(sink, "write_with", None)):
            # each append is written with its audit entry: in one commit where the
            # engine has one for two streams, else the entry first (AuditLog.write_with);
            # the group committer and the write-behind flush hand their batches here
            self._ahead_sink = sink  # type: ignore[assignment]
            if getattr(sink, "records_with_writes", False):
                self._atomic_sink = sink  # type: ignore[assignment]
            self._writes.submitter = self._submit_with_entry
            self._writes.snapshot_saver = self._save_snapshot_with_entry
            self._writes.eraser = self._delete_with_entry
            if callable(getattr(sink, "record_with_change", None)) and getattr(
                sink, "records_with_writes", False
            ):
                self._change_sink = sink  # type: ignore[assignment]
            for queue in (self._writes.group, self._writes.behind):
                if queue is not None:
                    queue.auditor = self

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, principal={self._governance.principal!r})"

    @property
    def principal(self) -> str | None:
        """Who this store acts as."""
        return self._governance.principal

    # -- the policy -----------------------------------------------------------------

    async def set_policy(self, policy: AccessPolicy) -> None:
        """Replace the policy of this store (needs ``admin`` on ``**`` under the
        current one); audited with the new policy's grants."""
        if not callable(getattr(policy, "check", None)):
            raise ConfigurationError(
                f"policy must be a statekeeper.governance.Policy, not {type(policy).__name__}"
            )
        gov = await self._allowed(None, "admin", "policy")
        gov.policy = policy
        await gov.record("policy", detail={"grants": policy.to_dict()})
