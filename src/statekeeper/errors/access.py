"""Governance errors: access denied, policies, forgotten agents and legal holds.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from statekeeper.errors.base import ConfigurationError, StatekeeperError
from statekeeper.errors.storage import StorageError

# --- governance: principals, policies, the audit log (statekeeper.governance) ----------


class AccessDenied(StatekeeperError, PermissionError):
    """The store's principal may not do this (see ``docs/governance.md``).

    ``principal`` is who asked, ``permission`` what was needed (``"read"``,
    ``"write"`` or ``"admin"``), ``operation`` the call (``"save"``, ``"load"``...)
    and ``agent_id`` the agent it was for (None for store-wide operations);
    ``namespace`` the namespace of an operation on a whole namespace (a backup, a
    restore, a retention run or a listing through a store opened in it; ``""``: the
    whole store). Nothing was read or written; the refusal is in the audit log when
    the store keeps one.
    """

    def __init__(
        self,
        principal: str,
        permission: str,
        operation: str,
        agent_id: str | None = None,
        reason: str | None = None,
        *,
        namespace: str | None = None,
    ) -> None:
        self.principal = principal
        self.permission = permission
        self.operation = operation
        self.agent_id = agent_id
        self.namespace = namespace
        on = f" on agent {agent_id!r}" if agent_id is not None else ""
        if agent_id is None and namespace:
            on = f" in namespace {namespace!r}"
        why = reason or f"needs {permission} permission"
        super().__init__(f"access denied: principal {principal!r} may not {operation}{on} ({why})")


class PolicyError(ConfigurationError):
    """A policy (file or object) cannot be used. ``source`` names the file (or
    ``"<policy>"``) and ``line`` the line of the problem when it is known."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        self.source = source
        self.line = line
        self.problem = problem
        where = f"{source}, line {line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


class AgentForgotten(StorageError):
    """The agent was crypto-shredded (``statekeeper forget``): its data key is destroyed,
    so none of its records, in any copy of the store, can be decrypted again.

    ``agent_id`` names the agent; ``forgotten_at`` is when its key was destroyed (epoch
    seconds; None when the key vault holds no record of the agent at all, e.g. a store
    restored next to another vault). Raised instead of returning anything decoded.
    """

    def __init__(self, agent_id: str, forgotten_at: float | None = None) -> None:
        self.agent_id = agent_id
        self.forgotten_at = forgotten_at
        super().__init__(agent_id, forgotten_at)

    def __str__(self) -> str:
        if self.forgotten_at is None:
            return (
                f"agent {self.agent_id!r} cannot be read: its data key is not in the key vault"
                " (forgotten, or a vault other than the one that wrote it)"
            )
        return f"agent {self.agent_id!r} was forgotten: its data key was destroyed"


class AgentOnHold(StatekeeperError, PermissionError):
    """A legal hold exempts the agent from every purge (``statekeeper hold``; a
    retention policy's ``hold`` line): ``forget``, ``delete``, retention and expiry
    refuse it. ``agent_id`` names the agent, ``hold`` the hold's pattern (``acme/alice``
    or ``legal/*``), ``reason`` why it was placed and ``operation`` the purge refused.
    Nothing was changed; release the hold first (``statekeeper hold remove``, audited).
    """

    def __init__(self, agent_id: str, hold: str, reason: str, operation: str) -> None:
        self.agent_id = agent_id
        self.hold = hold
        self.reason = reason
        self.operation = operation
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"cannot {operation} agent {agent_id!r}: it is under the legal hold {hold!r}{why};"
            " release the hold first ('statekeeper hold remove')"
        )
