"""What a write asks of a backend and what it answers: :class:`AppendRequest` (under a
:data:`Fence`), the changes committed with appends (:class:`StreamChange`,
:class:`LeaseChange`, :class:`RewriteRequest`), the :class:`AuditMark` an append is
recorded with, :class:`AppendResult` and :class:`LeaseInfo`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from .raw import RawEvent, RawSnapshot

__all__ = [
    "AppendRequest",
    "AppendResult",
    "AuditMark",
    "Fence",
    "LeaseChange",
    "LeaseInfo",
    "RewriteRequest",
    "StreamChange",
]


@dataclass(frozen=True, slots=True)
class AuditMark:
    """The audit entry one append is recorded with
    (:meth:`statekeeper.governance.AuditLog.write_with`): who made which operation on
    which seqs of which agent."""

    operation: str
    principal: str | None
    agent_id: str
    first_seq: int
    last_seq: int


#: ``(holder, token)``: the lease a write is made under (see :class:`AppendRequest`)
Fence: TypeAlias = tuple[str, int]


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Append ``events`` to ``agent_id`` if and only if its head is ``expected_seq``.

    The events' ``seq`` values must be ``expected_seq + 1 …`` without gaps. When
    ``idempotency_key`` was already used for this agent, nothing is written and the
    result of the first append is returned with ``duplicate=True``. ``snapshot``, when
    given, is stored in the same atomic write.

    ``fence`` is ``(holder, token)`` of the lease the write is made under: the backend
    accepts the append only if that is still the agent's newest lease, checked in the
    same atomic step as the append, and otherwise raises
    :class:`~statekeeper.errors.LeaseLost` (checked before the idempotency key and the
    head). ``None`` writes without a lease (optimistic concurrency only).

    ``head_tag`` is the authenticated stream head after this append (opaque bytes made
    by the codec): the backend stores it with the head in the same atomic write,
    replacing the previous one (``None`` stores no tag), and returns it from
    :meth:`~statekeeper.backends.base.Backend.head_tag`. A duplicate or failed append
    leaves the stored tag unchanged.

    With ``check_tag`` the head must also still carry the tag ``expected_tag``
    (``None`` matching a stream stored without a tag), compared in the same atomic
    step as the head seq, else :class:`~statekeeper.errors.ConflictError`: the tag
    commits to the whole chain, so a stream deleted and re-created up to the same seq
    by another writer is told from the one the writer folded (its *incarnation*).
    Only a backend whose ``compares_head_tag`` is true is given ``check_tag``.
    """

    agent_id: str
    expected_seq: int
    events: Sequence[RawEvent]
    snapshot: RawSnapshot | None = None
    idempotency_key: str | None = None
    fence: Fence | None = None
    head_tag: bytes | None = None
    expected_tag: bytes | None = None
    check_tag: bool = False


@dataclass(frozen=True, slots=True)
class StreamChange:
    """A change of one stream other than an append, committed in the same transaction
    as appends (``Backend.append_together(requests, changes)``): the governed store
    writes a delete or a snapshot and its audit entry as one commit.

    Either ``delete_at`` alone: the stream (events, snapshots, idempotency keys) is
    deleted if and only if its head is still that seq, else
    :class:`~statekeeper.errors.ConflictError` (so the entry names the head it
    erased) — and, with ``delete_checksum``, only if its head event's stored checksum
    is still that one (the head record's identity: a stream deleted and written again
    up to the same seq has another, so it is not deleted); or ``snapshot`` and/or
    ``prune_to``: ``snapshot`` is stored (its event must
    exist, else :class:`~statekeeper.errors.ConflictError`), then the stream is pruned
    as by ``Backend.prune(agent_id, prune_to, drop_snapshots)`` (history up to
    ``prune_to`` removed, 0: none; the snapshots ``drop_snapshots`` removed), so a
    retention run's compaction or thinning commits with its entry. A prune whose
    preconditions fail (``check_prune``) raises
    :class:`~statekeeper.errors.ConfigurationError` and nothing is written. With
    ``prune_head`` (and ``prune_checksum``), the snapshot and the prune are made only
    while the head is still that seq (and its event's stored checksum that one: the
    head record's identity, as ``Backend.prune`` takes them), else
    :class:`~statekeeper.errors.ConflictError` and nothing is written — a stream
    deleted and written again up to the same seq since the prune was planned is
    another stream.

    Or ``lease`` alone (engines with leases): the agent's lease granted or released
    as :class:`LeaseChange` says, so a lease and its audit entry are one commit. Or
    ``rewrite`` alone (engines with ``rewrite``): the :class:`RewriteRequest` of the
    same agent applied as by ``Backend.rewrite`` (a stale head raises
    :class:`~statekeeper.errors.ConflictError`), so a key rotation or a schema
    migration of an agent commits with its entry.

    Or ``absent=True`` alone (engines with ``checks_absence_together``): nothing is
    changed, the commit is made only while the stream has no events (head 0), else
    :class:`~statekeeper.errors.ConflictError` naming it (expected 0, its head) and
    nothing is written — a write of another stream (a feed tombstone of an agent an
    import writes anew) conditional on the agent not existing at its commit."""

    agent_id: str
    delete_at: int | None = None
    snapshot: RawSnapshot | None = None
    prune_to: int | None = None
    drop_snapshots: tuple[int, ...] = ()
    lease: LeaseChange | None = None
    rewrite: RewriteRequest | None = None
    delete_checksum: bytes | None = None
    prune_head: int | None = None
    prune_checksum: bytes | None = None
    absent: bool = False


@dataclass(frozen=True, slots=True)
class LeaseChange:
    """A lease grant or release made in an ``append_together`` commit
    (:class:`StreamChange`).

    A grant (``ttl`` given): the lease goes to ``holder`` for ``ttl`` seconds with
    fencing token ``token``, which must be the stored token plus one (1 for an agent
    never leased), else :class:`~statekeeper.errors.ConflictError` (the token the
    audit entry names is the one granted); another holder's running lease raises
    :class:`~statekeeper.errors.LeaseHeld`. A release (``ttl`` None): ``(holder,
    token)`` must be the current lease, else :class:`~statekeeper.errors.LeaseLost`.
    Either way nothing of the commit is written when it fails."""

    holder: str
    token: int
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class RewriteRequest:
    """Replace the stored bytes of existing records of ``agent_id`` (key rotation,
    format upgrades), atomically, if and only if its head is still ``expected_seq``
    with head tag ``expected_tag`` (``None`` matching a stream stored without a tag).

    Each event in ``events`` replaces the payload and checksum of the stored event with
    the same seq (its type and timestamp are not changed; its seq must be within
    ``1..expected_seq``, and it must be stored: one below the stream's pruned base
    raises :class:`~statekeeper.errors.ConfigurationError` naming the agent and the seq,
    and nothing of the request is written); each snapshot in ``snapshots`` is stored as by
    ``save_snapshot`` (replacing one at the same seq; one below the stream's pruned
    base, which the prune removed, is refused the same way — the one AT the base is
    kept by the prune and rewrites); ``head_tag``, when not None,
    replaces the stored head tag (the head seq never changes). A stale head raises
    :class:`~statekeeper.errors.ConflictError` and writes nothing.
    """

    agent_id: str
    expected_seq: int
    expected_tag: bytes | None
    events: Sequence[RawEvent] = ()
    snapshots: Sequence[RawSnapshot] = ()
    head_tag: bytes | None = None


@dataclass(frozen=True, slots=True, init=False)
class AppendResult:
    """Where an append landed: ``first_seq``..``last_seq`` of ``agent_id``."""

    agent_id: str
    first_seq: int
    last_seq: int
    duplicate: bool = False

    def __init__(
        self, agent_id: str, first_seq: int, last_seq: int, duplicate: bool = False
    ) -> None:
        # (the generated __init__ of a frozen dataclass, without its four
        # ``object.__setattr__(self, name, value)``: each slot's own setter, bound once
        # below, skips the lookup of the name; made on every save, measured 2.5x faster
        # by timeit — docs/benchmarks.md, "seqfloor")
        _set_agent_id(self, agent_id)
        _set_first_seq(self, first_seq)
        _set_last_seq(self, last_seq)
        _set_duplicate(self, duplicate)


# (the slots' member descriptors, from the class's namespace)
_set_agent_id = vars(AppendResult)["agent_id"].__set__
_set_first_seq = vars(AppendResult)["first_seq"].__set__
_set_last_seq = vars(AppendResult)["last_seq"].__set__
_set_duplicate = vars(AppendResult)["duplicate"].__set__


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """An agent's lease as a backend stores it.

    ``token`` is the fencing token: it grows by at least one with every grant and never
    goes back for an agent (not even after the agent is deleted). ``expires_at`` is in
    seconds since the epoch on the backend's clock (see each backend); a released
    lease has ``holder`` None.
    """

    agent_id: str
    holder: str | None
    token: int
    expires_at: float

    @property
    def fence(self) -> Fence:
        """``(holder, token)`` to put on writes made under this lease."""
        return (self.holder or "", self.token)
