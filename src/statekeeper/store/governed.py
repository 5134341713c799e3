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
above this one); the store only calls them, through the protocols below.

(Why one module over 600 lines: it must override every public call of
:class:`StateStore` — a guard test checks that — and the write paths' audit hooks,
sync, group and write-behind, share the per-task pending mutation kept here.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from ..arguments import check_agent_id, check_principal
from ..backends.base import Health
from ..errors import (
    AccessDenied,
    AgentLost,
    ConfigurationError,
    ConflictError,
    RetriesExhausted,
)
from ..namespaces import namespace_of
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    AuditMark,
    Event,
    RawSnapshot,
    Snapshot,
    StreamChange,
)
from . import conditional, feed_deletes, feed_intents, observing
from .feed import FeedAccess, Subscription
from .feed_cursor import FeedBounds, FeedCursor
from .store import StateStore

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..codec.keys import Keyring
    from .digests import StreamDigest
    from .feed_intent_repair import FeedIntent, SettledIntent
    from .heads import AgentHead, StoredSize
    from .verification import Problem, VerifyReport

__all__ = ["AccessPolicy", "AuditSettings", "AuditSink", "Governance", "GovernedStateStore"]


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


class _Pending:
    """The mutation this task is making (see :meth:`GovernedStateStore._mutate`):
    ``recorded`` once its audit entry committed with its append."""

    __slots__ = ("agent_id", "operation", "recorded")

    def __init__(self, operation: str, agent_id: str) -> None:
        self.operation = operation
        self.agent_id = agent_id
        self.recorded = False


_PENDING: ContextVar[_Pending | None] = ContextVar("statekeeper_audit_pending", default=None)
#: the delete or snapshot this task is making (see :meth:`GovernedStateStore.delete`)
_CHANGE: ContextVar[_Pending | None] = ContextVar("statekeeper_audit_change", default=None)
_CHANGE_RETRIES = 100
# voids of cancelled mutations still being written (see Governance.voided)
_VOIDING: set[asyncio.Future[Any]] = set()
#: entries to commit just before the entry of this task's next delete, in its commit
_PRECEDING: ContextVar[tuple[Mapping[str, Any], ...]] = ContextVar(
    "statekeeper_audit_preceding", default=()
)


@contextlib.contextmanager
def entries_before_delete(entries: Sequence[Mapping[str, Any]]) -> Iterator[None]:
    """Within: a governed store's delete (on an engine with one commit for two
    streams) commits ``entries`` (each ``{"op", "outcome", "detail", "first_seq",
    "last_seq"}``) just before its own entry, in ONE commit with the delete: a
    retention purge and the delete that makes it, both or neither."""
    token = _PRECEDING.set(tuple(entries))
    try:
        yield
    finally:
        _PRECEDING.reset(token)


class AuditSettings(Protocol):
    """How to open the audit log on the store's backend
    (:class:`statekeeper.governance.Audit`)."""

    def open(self, backend: Backend, keyring: Keyring | None) -> AuditSink: ...


class Governance:
    """The principal, its policy and the audit log of one store."""

    def __init__(
        self, principal: str | None, policy: AccessPolicy | None, audit: AuditSink | None
    ) -> None:
        self.principal = principal
        self.policy = policy
        self.audit = audit

    async def require(self, agent_id: str | None, permission: str, operation: str) -> None:
        """Raise :class:`AccessDenied` (audited) unless the policy allows it."""
        if self.policy is None:
            return
        try:
            self.policy.check(self.principal or "", agent_id, permission, operation)
        except AccessDenied as exc:
            await self.refuse(exc, agent_id)

    async def require_namespace(self, namespace: str, permission: str, operation: str) -> None:
        """Raise :class:`AccessDenied` (audited, naming the namespace) unless the
        policy grants ``permission`` on ``namespace`` and every namespace below it
        (:meth:`Policy.check_namespace`; ``""``: the whole store, ``**``)."""
        if self.policy is None:
            return
        try:
            self.policy.check_namespace(self.principal or "", namespace, permission, operation)
        except AccessDenied as exc:
            await self.refuse(exc, None, {"namespace": namespace})

    async def require_reach(self, namespace: str, permission: str, operation: str) -> None:
        """Raise :class:`AccessDenied` (audited) unless the policy grants
        ``permission`` somewhere in ``namespace`` or below it: a listing of a
        namespace in which the principal could never see an agent is refused, not
        answered with an empty page."""
        policy, principal = self.policy, self.principal or ""
        if policy is None:
            return
        if not policy.knows(principal):
            await self.require(None, permission, operation)  # refused: names it, audited
        if not policy.reaches(principal, namespace, permission):
            where = f"namespace {namespace!r} or below" if namespace else "any namespace"
            exc = AccessDenied(
                principal, permission, operation, None, f"may {permission} no agent in {where}",
                namespace=namespace,
            )  # fmt: skip
            await self.refuse(exc, None, {"namespace": namespace})

    async def refuse(
        self, exc: AccessDenied, agent_id: str | None, detail: Mapping[str, Any] | None = None
    ) -> None:
        """Audit the refusal ``exc`` (outcome ``denied``) and raise it."""
        if self.audit is not None:
            await self.audit.record(
                exc.operation,
                principal=self.principal,
                agent_id=agent_id,
                outcome="denied",
                detail={"needs": exc.permission, **(detail or {})},
            )
        raise exc from None

    def can_read(self, agent_id: str) -> bool:
        return self.policy is None or self.policy.allows(self.principal or "", agent_id, "read")

    def store_admin(self) -> bool:
        return self.policy is None or self.policy.is_store_admin(self.principal or "")

    async def record(
        self,
        operation: str,
        agent_id: str | None = None,
        result: AppendResult | None = None,
        *,
        outcome: str = "ok",
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Audit a mutation (no-op without an audit log)."""
        if self.audit is None:
            return
        first = last = None
        if result is not None:
            first, last = result.first_seq, result.last_seq
            if result.duplicate:
                detail = {**(detail or {}), "duplicate": True}
        await self.audit.record(
            operation,
            principal=self.principal,
            agent_id=agent_id,
            first_seq=first,
            last_seq=last,
            outcome=outcome,
            detail=detail,
        )

    async def ahead(
        self,
        operation: str,
        agent_id: str | None,
        detail: Mapping[str, Any] | None = None,
        *,
        mark: Any = True,
    ) -> int | None:
        """Record a mutation BEFORE making it (an entry marked ``ahead``; see
        :meth:`AuditLog.record_ahead`); its seq, for :meth:`voided`. None without an
        audit log (or one that cannot: the caller records after, with :meth:`record`)."""
        audit = self.audit
        record_ahead = getattr(audit, "record_ahead", None)
        if record_ahead is None:
            return None
        seq: int = await record_ahead(
            operation, principal=self.principal, agent_id=agent_id, detail=detail, ahead=mark
        )
        return seq

    async def voided(
        self, entry: int | None, operation: str, agent_id: str | None, exc: BaseException
    ) -> None:
        """The mutation announced by entry ``entry`` (:meth:`ahead`) failed (None: no
        entry was written). A cancellation is a failure too (was: only an ``Exception``
        voided, so an acquire cancelled after its entry left the log saying a lease was
        granted that never was); the void is then shielded: cancelled again while it is
        written, it goes on in the background (held in ``_VOIDING``)."""
        void = getattr(self.audit, "void", None)
        if void is None or entry is None:
            return
        written = void(entry, operation, principal=self.principal, agent_id=agent_id, exc=exc)
        if isinstance(exc, Exception):
            await noting_failure(exc, written)
            return
        done = asyncio.ensure_future(written)
        _VOIDING.add(done)
        done.add_done_callback(_VOIDING.discard)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(done)

    def voiding(
        self, operation: str, agent_id: str | None
    ) -> Callable[[int | None], Awaitable[None]]:
        """:meth:`voided` for an entry whose writer was cancelled while it was written
        (a ``give_back`` for ``lease_grants.granting``)."""
        return lambda entry: self.voided(entry, operation, agent_id, asyncio.CancelledError())

    async def failed(self, operation: str, agent_id: str | None, exc: BaseException) -> None:
        """Audit a mutation that raised (nothing, or not all of it, was written)."""
        if self.audit is not None and isinstance(exc, Exception):
            recording = self.record(operation, agent_id, outcome=f"error:{type(exc).__name__}")
            await noting_failure(exc, recording)


async def noting_failure(exc: BaseException, recording: Awaitable[Any]) -> None:
    """Await the audit record of the failure ``exc`` (which its caller raises next); an
    audit record that fails too is noted on ``exc`` (was: its error replaced ``exc``,
    and the caller never learned what failed first)."""
    try:
        await recording
    except Exception as audit_exc:
        exc.add_note(f"its audit record failed too: {type(audit_exc).__name__}: {audit_exc}")


def governance_of(store: object) -> Governance | None:
    """The governance of a store (None for a plain store): for tools that drive one
    (rekey, migrate, leases, repair) to check and audit what they do."""
    return getattr(store, "_governance", None)


class GovernedStateStore(StateStore):
    """A :class:`StateStore` opened as a principal (see the module documentation)."""

    _governance: Governance

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
        self._atomic_sink: AtomicAuditSink | None = None
        self._change_sink: ChangeAuditSink | None = None
        self._ahead_sink: AheadAuditSink | None = None
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

    # -- reading --------------------------------------------------------------------

    async def get(self, agent_id: str) -> Snapshot | None:
        await self._check_read(agent_id, "get")
        return await super().get(agent_id)

    async def get_many(self, agent_ids: Sequence[str]) -> list[Snapshot | None]:
        # all or nothing: one unreadable id refuses the whole call before any read
        ids = list(agent_ids)
        for agent_id in ids:
            await self._check_read(agent_id, "get")
        return await super().get_many(ids)

    async def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> Snapshot:
        await self._check_read(agent_id, "load")
        return await super().load(agent_id, at_seq=at_seq, at_time=at_time)

    async def head(self, agent_id: str) -> int:
        await self._check_read(agent_id, "head")
        return await super().head(agent_id)

    async def _head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        await self._check_read(agent_id, "head")
        return await super()._head_tag(agent_id)

    async def head_state(self, agent_id: str) -> AgentHead | None:
        await self._check_read(agent_id, "head")
        return await super().head_state(agent_id)

    async def head_states(self, agent_ids: Sequence[str]) -> list[AgentHead | None]:
        ids = list(agent_ids)  # once: an iterator is checked AND read
        for agent_id in ids:
            await self._check_read(agent_id, "head")
        return await super().head_states(ids)

    async def stored_size(self, agent_id: str) -> StoredSize:
        await self._check_read(agent_id, "size")
        return await super().stored_size(agent_id)

    async def history(
        self, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
    ) -> AsyncIterator[Event]:
        await self._check_read(agent_id, "history")
        async for event in super().history(agent_id, after_seq=after_seq, to_seq=to_seq):
            yield event

    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """One page of the agents this principal may read (the others are never seen)."""
        gov = self._governance
        if gov.policy is not None and not gov.policy.knows(gov.principal or ""):
            await gov.require(None, "read", "list")  # refused (and audited)
        out: list[AgentInfo] = []
        cursor = after
        while len(out) < limit:
            page = await super().list_agents(after=cursor, limit=limit)
            out.extend(info for info in page if gov.can_read(info.agent_id))
            if len(page) < limit:
                break
            cursor = page[-1].agent_id
        return out[:limit]

    async def unlisted_agents(self) -> list[str]:
        """Those this principal may read (as listed: the others are never seen)."""
        gov = self._governance
        return [a for a in await super().unlisted_agents() if gov.can_read(a)]

    async def health(self) -> Health:
        """The backend's health: ``ok`` and the engine's name for every principal; its
        ``detail`` (the file's size, the engine's agent count, paths, pools: figures
        over every namespace) for an admin on ``**`` only; the others get its
        ``error``, if any, alone."""
        health = await super().health()
        if self._governance.store_admin():
            return health
        kept = {k: v for k, v in health.detail.items() if k == "error"}
        return Health(ok=health.ok, backend=health.backend, detail=kept)

    async def count_agents(self) -> int:
        """How many agents this principal may read."""
        if self._governance.policy is None:
            return await super().count_agents()
        return len([info async for info in self.iter_agents()])

    async def find_key(self, agent_id: str, key: str) -> AppendResult | None:
        await self._check_read(agent_id, "find_key")
        return await super().find_key(agent_id, key)

    async def digest(self, agent_id: str, at_seq: int | None = None) -> StreamDigest:
        await self._check_read(agent_id, "digest")
        return await super().digest(agent_id, at_seq)

    async def check_digest(self, expected: StreamDigest) -> str | None:
        agent_id = getattr(expected, "agent_id", None)
        if isinstance(agent_id, str):
            await self._check_read(agent_id, "digest")
        return await super().check_digest(expected)

    async def verify(self, agent_ids: list[str] | None = None) -> VerifyReport:
        """:meth:`StateStore.verify` of the agents this principal may read."""
        if agent_ids is None and not self._governance.store_admin():
            agent_ids = [info.agent_id async for info in self.iter_agents()]
        elif isinstance(agent_ids, Iterable) and not isinstance(agent_ids, str):
            agent_ids = list(agent_ids)  # once: an iterator is checked AND verified
            for agent_id in agent_ids:
                await self._check_read(agent_id, "verify")
        return await super().verify(agent_ids)

    async def witness_problems(self, agent_ids: list[str] | None = None) -> list[Problem]:
        if agent_ids is None:
            if not self._governance.store_admin():
                agent_ids = [info.agent_id async for info in self.iter_agents()]
        elif isinstance(agent_ids, Iterable) and not isinstance(agent_ids, str):
            agent_ids = list(agent_ids)  # once: an iterator is checked AND checked again
            for agent_id in agent_ids:
                await self._check_read(agent_id, "verify")
        return await super().witness_problems(agent_ids)

    async def orphan_problems(self, verified: Collection[str] = ()) -> list[Problem]:
        """:meth:`StateStore.orphan_problems` of the agents this principal may read."""
        found = await super().orphan_problems(verified)
        return [p for p in found if self._governance.can_read(p.agent_id)]

    def subscribe(self, from_position: int | FeedCursor | str = 0, **options: Any) -> Subscription:
        """The change feed, filtered by the policy: only the events of agents this
        principal may read are delivered (``namespace=``, ``agent_prefix=`` and
        ``event_types=`` still apply); the positions of the others are passed over like
        filtered-out ones, so :attr:`Subscription.position` resumes with no gap and no
        duplicate. The policy is asked per event: a :meth:`set_policy` applies to
        running subscriptions from the next event on.

        A subscription that could never deliver anything — an unknown principal, or
        one that may read no namespace under the ``namespace=`` / ``agent_prefix=``
        asked for — is refused with :class:`AccessDenied` (audited) when it starts
        (its first ``__anext__`` / ``next_batch``), rather than waiting forever on an
        empty feed. With ``Audit(reads=True)`` the start of each subscription is
        recorded (one entry, not one per event)."""
        return super().subscribe(from_position, **options)

    def _feed_access(
        self, from_position: int | FeedCursor | str, namespace: str | None, agent_prefix: str | None
    ) -> FeedAccess:
        return _FeedAccess(self._governance, namespace, agent_prefix, from_position)

    async def feed_bounds(self) -> tuple[int, int]:
        """:meth:`StateStore.feed_bounds` for a principal that may ``read`` every
        namespace (``**``) only: positions are store-wide, so the head counts every
        tenant's events (their write volume); anyone else is refused
        (:class:`AccessDenied`, audited) rather than shown figures over agents it may
        not read."""
        await self._governance.require_namespace("", "read", "feed_bounds")
        return await super().feed_bounds()

    async def feed_cursor_bounds(self) -> FeedBounds:
        """:meth:`StateStore.feed_cursor_bounds`, on :meth:`feed_bounds`'s terms."""
        await self._governance.require_namespace("", "read", "feed_cursor_bounds")
        return await super().feed_cursor_bounds()

    async def trim_feed(self, through: int | FeedCursor | str) -> int:
        gov = await self._allowed(None, "admin", "trim_feed")
        dropped = await super().trim_feed(through)
        mark = through if isinstance(through, int) else str(through)
        await gov.record("trim_feed", detail={"through": mark, "dropped": dropped})
        return dropped

    async def feed_intents(self) -> list[FeedIntent]:
        """:meth:`StateStore.feed_intents`: ``admin`` on the whole store (every tenant's
        deletes)."""
        await self._allowed(None, "admin", "feed_intents")
        return await super().feed_intents()

    async def settle_feed_intents(
        self,
        agent_ids: Collection[str] | None = None,
        *,
        older_than: float | None = None,
        force: bool = False,
    ) -> list[SettledIntent]:
        """:meth:`StateStore.settle_feed_intents`: ``admin`` on the whole store; audited
        (what each intent became)."""
        from .feed_intent_repair import SETTLING

        gov = await self._allowed(None, "admin", "settle_feed_intents")
        so_far: list[SettledIntent] = []
        token = SETTLING.set(so_far)
        try:
            done = await super().settle_feed_intents(agent_ids, older_than=older_than, force=force)
        except Exception as exc:
            # what it wrote before the failure, audited too (was: no entry at all)
            if so_far:
                detail = {"force": force, "intents": _settled(so_far), "error": type(exc).__name__}
                recording = gov.record("settle_feed_intents", outcome="failed", detail=detail)
                await noting_failure(exc, recording)
            raise
        finally:
            SETTLING.reset(token)
        detail = {"force": force, "intents": _settled(done)}
        await gov.record("settle_feed_intents", detail=detail)
        return done

    # -- writing --------------------------------------------------------------------

    async def _mutate(
        self, operation: str, agent_id: str, call: Any, *args: Any, **kw: Any
    ) -> AppendResult:
        gov = await self._allowed(agent_id, "write", operation)
        actor = kw.get("actor")
        if actor is None:
            kw["actor"] = gov.principal  # the stream itself says who wrote
        elif actor != gov.principal and gov.policy is not None and gov.principal is not None:
            try:
                await self._as_another(gov, agent_id, operation, actor)
            except AccessDenied as exc:
                self._observe_denied(operation, agent_id, exc)
                raise
        pending = _Pending(operation, agent_id)
        token = _PENDING.set(pending)
        try:
            result: AppendResult = await call(agent_id, *args, **kw)
        except BaseException as exc:
            await gov.failed(operation, agent_id, exc)
            raise
        finally:
            _PENDING.reset(token)
        if not pending.recorded:  # committed with the append already, or record it now
            await gov.record(operation, agent_id, result)
        return result

    async def _as_another(
        self, gov: Governance, agent_id: str, operation: str, actor: object
    ) -> None:
        """An ``actor=`` other than the principal writes history as someone else wrote
        it (an import does, as a restore does): ``admin``'s, never ``write``'s, else
        the stream would name a writer the audit log does not (refused, audited)."""
        policy = gov.policy
        assert policy is not None and gov.principal is not None
        if not policy.allows(gov.principal, agent_id, "admin"):
            exc = AccessDenied(
                gov.principal, "admin", operation, agent_id,
                f"writing as actor {str(actor)!r:.60} (not itself) needs admin on namespace"
                f" {namespace_of(agent_id)!r}",
            )  # fmt: skip
            await gov.refuse(exc, agent_id, {"actor": str(actor)[:128]})

    async def _submit_with_entry(self, request: AppendRequest) -> AppendResult:
        """The write pipeline's append: the mutation :meth:`_mutate` is making, with
        its audit entry, in one commit (:meth:`AuditLog.record_with`), or the entry
        first where the engine has no such commit (:meth:`AuditLog.write_with`)."""
        pending = _PENDING.get()
        if pending is None or pending.recorded or pending.agent_id != request.agent_id:
            return await self.backend.append(request)
        sink = self._atomic_sink
        if sink is not None:
            result = await sink.record_with(
                request, pending.operation, principal=self._governance.principal
            )
        else:
            ahead = self._ahead_sink
            assert ahead is not None
            events = request.events
            mark = _mark(pending, self._governance.principal, events[0].seq, events[-1].seq)
            (out,) = await ahead.write_with([request], [[mark]])
            if isinstance(out, BaseException):
                raise out
            result = out
        pending.recorded = not result.duplicate
        return result

    # -- the group committer's and the write-behind buffer's batches (BatchAuditor) -----

    def label(self, request: AppendRequest) -> list[Any] | None:
        """The entry ``request`` is to be recorded with, taken when it is queued (in
        the task of the call that makes it); with write-behind the entry goes with the
        flush, so the call itself records nothing more."""
        pending = _PENDING.get()
        if pending is None or pending.recorded or pending.agent_id != request.agent_id:
            return None
        events = request.events
        marks = [(pending, _mark(pending, self._governance.principal, events[0].seq,
                                 events[-1].seq))]  # fmt: skip
        if self._writes.behind is not None:
            pending.recorded = True
        return marks

    async def commit(
        self, requests: Sequence[AppendRequest], labels: Sequence[Sequence[Any]]
    ) -> list[AppendResult | BaseException]:
        """One batch of the group committer or of a write-behind flush, each append with
        its entries (:meth:`AuditLog.write_with`: one commit where the engine can)."""
        sink = self._ahead_sink
        assert sink is not None
        results = await sink.write_with(requests, [[m for _, m in pairs] for pairs in labels])
        failed = []
        for result, pairs in zip(results, labels, strict=True):
            for pending, mark in pairs:
                if isinstance(result, BaseException):
                    failed.append((mark, result))
                elif not result.duplicate:
                    pending.recorded = True
        if failed and self._writes.behind is not None:
            # acknowledged, never stored: the call that made it has returned long ago,
            # so the log says it here (sync and group calls raise, and _mutate records)
            # (one whose record fails too: the write's error stays the one reported,
            # the audit failure noted on it, and the other failures are still recorded)
            for mark, exc in failed:
                recording = self._governance.record(
                    mark.operation, mark.agent_id, outcome=f"error:{type(exc).__name__}",
                    detail={"seqs": [mark.first_seq, mark.last_seq], "write_behind": True},
                )  # fmt: skip
                await noting_failure(exc, recording)
        return results

    async def create(
        self, agent_id: str, data: Mapping[str, Any] | None = None, **kw: Any
    ) -> AppendResult:
        return await self._mutate("create", agent_id, super().create, data, **kw)

    async def save(self, agent_id: str, data: Mapping[str, Any], **kw: Any) -> AppendResult:
        operation = "transition" if kw.get("fsm_state") is not None else "save"
        return await self._mutate(operation, agent_id, super().save, data, **kw)

    async def append(
        self,
        agent_id: str,
        event_type: str,
        info: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> AppendResult:
        operation = "transition" if kw.get("fsm_state") is not None else "append"
        return await self._mutate(operation, agent_id, super().append, event_type, info, **kw)

    async def settle(self, agent_id: str) -> int | None:
        """:meth:`StateStore.settle` needs ``write``; a governed store settles nothing
        (its snapshots and removals carry audit entries of their own: None)."""
        await self._allowed(agent_id, "write", "settle")
        return await super().settle(agent_id)

    async def _idle_settle(self, agent_id: str) -> int | None:
        """An idle settle (``settle_after``) writes in this store's principal's name:
        only while the policy lets it ``write`` the agent, as :meth:`settle` requires
        (write revoked since the agent's last save: nothing stored, no refusal to
        audit — no call of the principal's was refused)."""
        gov = self._governance
        if gov.policy is not None and not gov.policy.allows(gov.principal or "", agent_id, "write"):
            return None
        return await super()._idle_settle(agent_id)

    async def snapshot(self, agent_id: str) -> int:
        gov = await self._allowed(agent_id, "write", "snapshot")
        if self._ahead_sink is None:
            seq = await super().snapshot(agent_id)
            await gov.record("snapshot", agent_id, AppendResult(agent_id, seq, seq))
            return seq
        # stored by _save_snapshot_with_entry, under the agent's lock, with its entry
        stored: int = await self._change("snapshot", agent_id, super().snapshot)
        return stored

    async def delete(self, agent_id: str) -> bool:
        gov = await self._allowed(agent_id, "write", "delete")
        if self._ahead_sink is None:
            try:
                existed = await super().delete(agent_id)
            except BaseException as exc:
                await gov.failed("delete", agent_id, exc)
                raise
            await gov.record("delete", agent_id, outcome="ok" if existed else "ok:absent")
            return existed
        # erased by _delete_with_entry, under the agent's lock, with its entry
        erased: bool = await self._change("delete", agent_id, super().delete)
        return erased

    async def _change(self, operation: str, agent_id: str, call: Any) -> Any:
        """``call(agent_id)`` (the store's delete or snapshot), whose engine write the
        hooks below make with its audit entry; a failure before any entry was
        written is recorded here."""
        change = _Pending(operation, agent_id)
        token = _CHANGE.set(change)
        try:
            result = await call(agent_id)
        except BaseException as exc:
            if not change.recorded:
                await self._governance.failed(operation, agent_id, exc)
            raise
        finally:
            _CHANGE.reset(token)
        if not change.recorded:  # (the engine write was not reached: nothing to record)
            await self._governance.record(operation, agent_id)
        return result

    def _changing(self, operation: str, agent_id: str) -> _Pending | None:
        change = _CHANGE.get()
        if change is None or change.operation != operation or change.agent_id != agent_id:
            return None
        return change

    async def _save_snapshot_with_entry(self, agent_id: str, raw: RawSnapshot) -> None:
        """The store's write of an explicit snapshot: with its entry in one commit
        where the engine has one (memory, SQLite, PostgreSQL), else the entry first
        (voided when the write fails). The entry names the snapshot record (seq and
        checksum), which ``audit verify`` looks for."""
        change = self._changing("snapshot", agent_id)
        if change is None:
            await self.backend.save_snapshot(agent_id, raw)
            return
        principal = self._governance.principal
        named = [raw.seq, raw.checksum.hex()]
        together = self._change_sink
        if together is not None:
            await together.record_with_change(
                StreamChange(agent_id, snapshot=raw), "snapshot", principal=principal,
                first_seq=raw.seq, last_seq=raw.seq, detail={"snapshot": named},
            )  # fmt: skip
            change.recorded = True
            return
        sink = self._ahead_sink
        assert sink is not None
        entry = await sink.record_ahead(
            "snapshot", principal=principal, agent_id=agent_id, first_seq=raw.seq,
            last_seq=raw.seq, ahead={"snapshot": named},
        )  # fmt: skip
        change.recorded = True
        try:
            await self.backend.save_snapshot(agent_id, raw)
        except BaseException as exc:
            await self._void(entry, "snapshot", agent_id, exc)
            raise

    async def _delete_with_entry(self, agent_id: str) -> bool:
        """The store's delete of a stream: with its entry in one commit where the
        engine has one (the delete conditional on the head the entry names: a writer
        that appended meanwhile makes it read the head again), else the entry first,
        naming the head event it removes (a crash between the two leaves an entry
        ``audit verify`` reports as not applied, never a delete without its entry)."""
        change = self._changing("delete", agent_id)
        if change is None:  # (with its feed tombstone: in one commit where it can be)
            return await feed_deletes.erase(self.backend, self.codec, agent_id)
        gov = self._governance
        feed = feed_deletes.has_feed(self.backend)
        if feed and self._change_sink is not None:  # (with_intent settles them itself)
            await feed_intents.settle(self.backend, self.codec)  # a forget's a crash left
        forgotten = feed_deletes.forgetting.get()
        last: ConflictError | None = None
        expected = conditional.expected_head()  # a retention purge's: no retry
        identity = conditional.expected_checksum()  # (its head record's, when given)
        for _ in range(_CHANGE_RETRIES):
            try:
                seq = await self.backend.head(agent_id)
            except AgentLost:  # its data is gone (evicted...): deleting acknowledges it
                seq = 0
            if expected is not None and seq != expected:
                raise ConflictError(agent_id, expected, seq)
            raws = await self.backend.read(agent_id, after_seq=seq - 1, to_seq=seq) if seq else []
            if not raws:  # nothing stored to delete: recorded after
                existed = await self.backend.delete_agent(agent_id)
                for first in _PRECEDING.get():
                    await gov.record(
                        first["op"], agent_id, outcome=first["outcome"], detail=first["detail"]
                    )
                await gov.record("delete", agent_id, outcome="ok" if existed else "ok:absent")
                change.recorded = True
                if existed and feed:  # (none after an agent created again since)
                    await feed_deletes.record_unless_created(
                        self.backend, self.codec, agent_id, seq, forgotten=forgotten
                    )
                return existed
            checksum = raws[-1].checksum  # the head record this entry names, deleted alone
            if identity is not None and checksum != identity:  # deleted, written again
                raise ConflictError(agent_id, seq, seq)
            erased = [seq, checksum.hex()]
            together = self._change_sink
            tombstone = feed_deletes.stream_of(self.backend, agent_id) if feed else None
            try:
                if together is None:  # the entry first, then the delete at the head it names
                    if not feed:
                        return await self._delete_ahead(agent_id, seq, checksum, change)
                    return await feed_intents.with_intent(  # (its tombstone after it)
                        self.backend, self.codec, agent_id, seq, forgotten,
                        functools.partial(self._delete_ahead, agent_id, seq, checksum, change),
                    )  # fmt: skip
                # the delete, its entry and its feed tombstone: one commit
                appends: list[AppendRequest] = []
                if tombstone is not None:
                    appends.append(
                        await feed_deletes.tombstone_request(
                            self.backend, self.codec, agent_id, seq, forgotten
                        )
                    )
                await together.record_with_change(
                    StreamChange(agent_id, delete_at=seq, delete_checksum=checksum), "delete",
                    principal=gov.principal,
                    detail={"erased": erased}, preceding=_PRECEDING.get(), appends=appends,
                )  # fmt: skip
            except ConflictError as exc:
                if exc.agent_id == tombstone and exc.agent_id is not None:
                    last = exc  # another delete's tombstone first: nothing written, again
                    continue
                if exc.agent_id != agent_id or expected is not None:
                    raise
                last = exc  # another process wrote (or deleted) meanwhile: look again
                continue
            change.recorded = True
            return True
        assert last is not None
        raise RetriesExhausted(agent_id, _CHANGE_RETRIES, last)

    async def _delete_ahead(
        self, agent_id: str, seq: int, checksum: bytes, change: _Pending
    ) -> bool:
        """The entry naming the head event (at ``seq``, ``checksum``), then the delete only
        at that head record (:func:`conditional.delete_at`): an append landing in between makes
        it a :class:`ConflictError` with nothing deleted and the entry voided (an
        unconditional delete erased that append too, under an entry naming the head
        before it)."""
        sink = self._ahead_sink
        assert sink is not None
        entry = await sink.record_ahead(
            "delete", principal=self._governance.principal, agent_id=agent_id,
            ahead={"gone": [seq, checksum.hex()]},
        )  # fmt: skip
        change.recorded = True
        try:
            return await conditional.delete_at(self.backend, agent_id, seq, checksum)
        except BaseException as exc:
            await self._void(entry, "delete", agent_id, exc)
            raise

    async def _void(self, entry: int, operation: str, agent_id: str, exc: BaseException) -> None:
        sink = self._ahead_sink
        if sink is not None and isinstance(exc, Exception):
            await sink.void(
                entry, operation, principal=self._governance.principal, agent_id=agent_id,
                exc=exc,
            )  # fmt: skip


def _mark(pending: _Pending, principal: str | None, first: int, last: int) -> AuditMark:
    return AuditMark(pending.operation, principal, pending.agent_id, first, last)


class _FeedAccess:
    """The policy as a filter of one subscription (:class:`~.feed.FeedAccess`)."""

    __slots__ = ("gov", "namespace", "prefix", "start")

    def __init__(
        self,
        gov: Governance,
        namespace: str | None,
        agent_prefix: str | None,
        start: int | FeedCursor | str,
    ) -> None:
        self.gov = gov
        self.namespace = namespace
        self.prefix = agent_prefix
        self.start = start

    async def admit(self) -> None:
        gov = self.gov
        policy, principal = gov.policy, gov.principal or ""
        if policy is None:
            return
        if not policy.knows(principal):
            await gov.require(None, "read", "subscribe")  # refused: names it, audited
        scope = self.namespace or ""
        if not policy.reaches(principal, scope, "read"):
            where = f"namespace {scope!r} or below" if scope else "any namespace"
            exc = AccessDenied(
                principal, "read", "subscribe", None, f"may read no agent in {where}"
            )
            await gov.refuse(exc, None, {"namespace": scope})
        # (a prefix may end inside a segment, crossing namespaces: 'glo' is the root
        # namespace's agents 'glo...' and every namespace 'glo...', not "anywhere")
        if self.prefix is not None and not policy.reaches_prefix(principal, self.prefix, "read"):
            exc = AccessDenied(
                principal, "read", "subscribe", None,
                f"may read no agent whose id starts with agent_prefix {self.prefix!r:.80}",
            )  # fmt: skip
            await gov.refuse(exc, None, {"agent_prefix": self.prefix})
        if gov.audit is not None and gov.audit.reads:
            detail: dict[str, Any] = {
                "from_position": self.start if isinstance(self.start, int) else str(self.start)
            }
            if self.namespace is not None:
                detail["namespace"] = self.namespace
            if self.prefix is not None:
                detail["agent_prefix"] = self.prefix
            await gov.record("subscribe", detail=detail)

    def readable(self, agent_id: str) -> bool:
        return self.gov.can_read(agent_id)


def _settled(done: Sequence[SettledIntent]) -> list[dict[str, Any]]:
    """The audit entry's list of settled feed intents."""
    return [
        {"agent_id": s.intent.agent_id, "head": s.intent.head, "outcome": s.outcome} for s in done
    ]
