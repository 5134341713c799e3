"""Capabilities, leases, merges and the store's refusals to write.

Part of :mod:`statekeeper.errors` (import every name from there).
"""

from __future__ import annotations

from typing import Any

from statekeeper.errors import base as _base
from statekeeper.errors.base import ConfigurationError

# assigned from their module, not imported by name: Python 3.11 compiles a method call
# on an imported name (``StatekeeperError.__init__(self, ...)``) as an attribute load
# and a plain call, on a name the module assigns as a method call; the constructors
# keep the bytecode they had before errors.py was split (issue 11)
StatekeeperError = _base.StatekeeperError


class CapabilityUnsupported(StatekeeperError):
    """The backend does not offer an optional capability (see
    :class:`statekeeper.backends.base.Capability`); nothing was done.

    Engines declare what they offer in ``Backend.capabilities``; a call of an
    undeclared one raises this (leases raise :class:`LeasesUnsupported`).
    """

    def __init__(self, backend: str, capability: str, detail: str = "") -> None:
        self.backend = backend
        self.capability = capability
        suffix = f": {detail}" if detail else ""
        super().__init__(f"the {backend} backend does not support {capability}{suffix}")


class LeaseError(StatekeeperError):
    """Base class for lease and fencing errors."""


class LeaseHeld(LeaseError):
    """The agent's lease is held by another holder and has not expired.

    ``holder`` and ``expires_at`` (seconds since the epoch, on the backend's clock)
    describe the current lease.
    """

    def __init__(self, agent_id: str, holder: str, expires_at: float) -> None:
        self.agent_id = agent_id
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(f"agent {agent_id!r} is leased by {holder!r}")


class LeaseLost(LeaseError):
    """A write (or renewal) carried a fencing token that is no longer the agent's newest.

    The lease expired and was taken by someone else, or was released: nothing was
    written. ``token`` is the caller's; ``current_token`` and ``current_holder`` are
    the newest lease the backend knows (0 and None when it has none).
    """

    def __init__(
        self,
        agent_id: str,
        holder: str,
        token: int,
        current_token: int,
        current_holder: str | None,
    ) -> None:
        self.agent_id = agent_id
        self.holder = holder
        self.token = token
        self.current_token = current_token
        self.current_holder = current_holder
        lease = f"agent {agent_id!r}: lease token {token} of {holder!r}"
        if current_holder is not None:
            why = f"is stale (newest is {current_token}, held by {current_holder!r})"
        elif current_token == token:
            why = "was released (acquire a new lease to write)"
        elif current_token > token:
            why = f"is stale (newest is {current_token}, since released)"
        else:
            why = "is not current (the agent holds no lease)"
        super().__init__(f"{lease} {why}; nothing was written")


class LeasesUnsupported(LeaseError):
    """The backend cannot grant leases or check fencing tokens (e.g. the S3 archive tier).

    A write that carries a fencing token is refused with this error rather than
    stored unchecked.
    """

    def __init__(self, backend: str) -> None:
        self.backend = backend
        super().__init__(f"the {backend} backend does not support leases or fenced writes")


class RetentionRunning(LeaseHeld):
    """Another retention run (``statekeeper retention apply``,
    :func:`~statekeeper.governance.retention.apply_retention`) holds the store's run
    lock: two runs at once would work the same agents. Nothing was read or changed.

    ``namespace`` is the scope of the run holding it (``""``: the whole store),
    ``holder`` who it is (pid, host, principal), ``expires_at`` when its lease expires
    unless renewed (seconds since the epoch, on the engine's clock): a run whose process
    died holds it no longer than that, and the next run resumes its work.
    """

    def __init__(self, namespace: str, holder: str, expires_at: float) -> None:
        self.namespace = namespace
        self.agent_id = ""
        self.holder = holder
        self.expires_at = expires_at
        StatekeeperError.__init__(self, namespace, holder, expires_at)

    def __str__(self) -> str:
        import time

        where = f"namespace {self.namespace!r}" if self.namespace else "the store"
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.expires_at))
        return (
            f"another retention run holds the run lock of {where} ({self.holder}), its"
            f" lease running until {until} unless renewed: wait for it to end (a run whose"
            " process died holds it no longer than that; run again then to resume it)"
        )


class MergeConflict(StatekeeperError):
    """Two concurrent versions of an agent that no merge strategy could reconcile.

    Nothing is dropped: ``ours`` and ``theirs`` are both versions (and ``base`` their
    common ancestor when known); ``fields`` names the paths that stayed unresolved;
    ``reason``, when known, why (it ends the message).
    """

    def __init__(
        self,
        agent_id: str | None,
        ours: Any,
        theirs: Any,
        base: Any = None,
        fields: tuple[str, ...] = (),
        reason: str = "",
    ) -> None:
        self.agent_id = agent_id
        self.ours = ours
        self.theirs = theirs
        self.base = base
        self.fields = fields
        where = f"agent {agent_id!r}" if agent_id is not None else "document"
        what = f" at {', '.join(fields)}" if fields else ""
        self.reason = reason
        why = f": {reason}" if reason else ""
        super().__init__(f"{where}: concurrent updates{what} could not be merged{why}")


class ReadOnlyStore(ConfigurationError):
    """A write was attempted through a backend opened read-only. Nothing was written."""


class NotOwned(ConfigurationError):
    """A file would be deleted or overwritten, but statekeeper cannot prove it created
    it (no ownership marker). The file was left untouched."""


class WrongFileKind(ConfigurationError):
    """A file given to a command is not the kind it reads: a folder, a device, an empty
    file, a SQLite database or a backup given to ``import``, an export given to
    ``restore``... (only its first bytes were read). Nothing was written. ``path``
    names it, ``reason`` what it is instead."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")
