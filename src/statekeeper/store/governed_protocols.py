"""What a governed store asks of the governance layer (:mod:`statekeeper.governance`,
a layer above this one): the policy (:class:`AccessPolicy`), the audit log
(:class:`AuditSink` and the sinks that commit an entry with the write it records) and
how to open it (:class:`AuditSettings`). The store only calls them, through these
protocols (see :mod:`.governed`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..records import AppendRequest, AppendResult, StreamChange

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..codec.keys import Keyring

__all__ = [
    "AccessPolicy",
    "AheadAuditSink",
    "AtomicAuditSink",
    "AuditSettings",
    "AuditSink",
    "ChangeAuditSink",
]


class AccessPolicy(Protocol):
    """What the store asks a policy (:class:`statekeeper.governance.Policy`)."""

    def knows(self, principal: str) -> bool: ...

    def allows(self, principal: str, agent_id: str, permission: str) -> bool: ...

    def is_store_admin(self, principal: str) -> bool: ...

    def reaches(self, principal: str, namespace: str, permission: str = "read") -> bool: ...

    def reaches_prefix(
        self, principal: str, agent_prefix: str, permission: str = "read"
    ) -> bool: ...

    def check_namespace(
        self, principal: str, namespace: str, permission: str, operation: str
    ) -> None: ...

    def check(
        self, principal: str, agent_id: str | None, permission: str, operation: str
    ) -> None: ...

    def to_dict(self) -> dict[str, Any]: ...


class AuditSink(Protocol):
    """Where the store records what it did (:class:`statekeeper.governance.AuditLog`)."""

    reads: bool

    async def record(
        self,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None = None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        outcome: str = "ok",
        detail: Mapping[str, Any] | None = None,
    ) -> int: ...


class AtomicAuditSink(AuditSink, Protocol):
    """An audit sink that can commit an entry together with the append it records
    (:meth:`statekeeper.governance.AuditLog.record_with`)."""

    @property
    def records_with_writes(self) -> bool: ...

    async def record_with(
        self,
        request: AppendRequest,
        operation: str,
        *,
        principal: str | None,
        detail: Mapping[str, Any] | None = None,
    ) -> AppendResult: ...


class ChangeAuditSink(AtomicAuditSink, Protocol):
    """An audit sink that commits an entry together with a delete or a snapshot
    (:meth:`statekeeper.governance.AuditLog.record_with_change`)."""

    async def record_with_change(
        self,
        change: StreamChange,
        operation: str,
        *,
        principal: str | None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        detail: Mapping[str, Any] | None = None,
        outcome: str = "ok",
        preceding: Sequence[Mapping[str, Any]] = (),
        appends: Sequence[AppendRequest] = (),
    ) -> None: ...


class AheadAuditSink(AtomicAuditSink, Protocol):
    """An audit sink that also records mutations ahead of them and batches of appends
    with their entries (:class:`statekeeper.governance.AuditLog`)."""

    async def write_with(
        self, requests: Sequence[AppendRequest], marks: Sequence[Sequence[Any]]
    ) -> list[AppendResult | BaseException]: ...

    async def record_ahead(
        self,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        ahead: Any = True,
        detail: Mapping[str, Any] | None = None,
        outcome: str = "ok",
    ) -> int: ...

    async def void(
        self,
        entry_seq: int,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None,
        exc: BaseException,
    ) -> None: ...


class AuditSettings(Protocol):
    """How to open the audit log on the store's backend
    (:class:`statekeeper.governance.Audit`)."""

    def open(self, backend: Backend, keyring: Keyring | None) -> AuditSink: ...
