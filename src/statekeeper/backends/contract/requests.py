"""The request checks every engine shares before it writes: appends, the next of a
run, compacted imports and their guards, appends together with changes."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

from ...arguments import MAX_ID_BYTES, check_name, check_stored_id
from ...errors import (
    CapabilityUnsupported,
    ConfigurationError,
    InvalidArgument,
)
from ...records import (
    AppendRequest,
    EventType,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)

if TYPE_CHECKING:
    from ..base import Backend


#: idempotency records of appends a prune removed: ``(key, first_seq, last_seq)``
KeptKeys: TypeAlias = Sequence[tuple[str, int, int]]


class StoreRequest(AppendRequest):
    """An append built by the store's write pipeline, valid by construction: its agent
    id, event kind and idempotency key were checked when the store's method was
    called, its one event is numbered ``expected_seq + 1`` and its snapshot sits on
    that seq. :func:`validate_request` lets it through without checking it again (the
    checks were ~150 of a save's ~2,600 bytecodes, measured by
    ``benchmarks/bench_save_instructions.py --bytecodes``)."""

    __slots__ = ()


def validate_request(request: AppendRequest) -> None:
    """Reject a malformed append before any engine touches it.

    Events must be non-empty and numbered ``expected_seq + 1`` onward without gaps; a
    snapshot, if any, must sit on one of the appended seqs. The agent id and the
    idempotency key follow the agent-id rule. A :class:`StoreRequest` was checked
    when it was built.
    """
    if type(request) is StoreRequest:
        return
    check_stored_id(request.agent_id)
    if request.idempotency_key is not None:
        check_name(request.idempotency_key, "idempotency_key")
    if request.expected_seq < 0:
        raise ConfigurationError(f"expected_seq must be >= 0, got {request.expected_seq}")
    if not request.events:
        raise ConfigurationError("an append needs at least one event")
    for offset, event in enumerate(request.events, start=1):
        check_name(event.type, "event type")
        if event.seq != request.expected_seq + offset:
            raise ConfigurationError(
                f"event seq {event.seq} does not follow expected_seq {request.expected_seq}"
                f" at position {offset}"
            )
    snap = request.snapshot
    if snap is not None and not (request.expected_seq < snap.seq <= request.events[-1].seq):
        raise ConfigurationError(f"snapshot seq {snap.seq} is not one of the appended seqs")


_MAX_ID = MAX_ID_BYTES // 4
#: the arguments of :meth:`Backend.append_next`, in order: ``(agent_id, seq, timestamp,
#: payload, checksum, head_tag, expected_tag, snapshot)``
NextRow: TypeAlias = tuple[
    str, int, float, bytes, bytes, bytes | None, bytes | None, RawSnapshot | None
]
#: the event :meth:`Backend.commit_keyed` commits, in order: ``(agent_id, seq, event_type,
#: timestamp, payload, checksum, head_tag, expected_tag, key)`` — ``event_type`` the event's
#: type, ``key`` its idempotency key as stored (``idempotency.stored_key``) or None
KeyedRow: TypeAlias = tuple[
    str, int, str, float, bytes, bytes, bytes | None, bytes | None, str | None
]


def next_request(row: NextRow, check_tag: bool = True) -> StoreRequest:
    """The append :meth:`Backend.append_next` makes of ``row`` (checked with
    :func:`validate_next`), as a request: for an engine's default, a queue's batch, a
    group commit."""
    agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot = row
    return StoreRequest(
        agent_id,
        seq - 1,
        (RawEvent(seq, EventType.PATCH, timestamp, payload, checksum),),
        snapshot,
        None,
        None,
        head_tag,
        expected_tag,
        check_tag,
    )


def validate_next(agent_id: str, seq: int, snapshot: RawSnapshot | None) -> None:
    """:func:`validate_request` of :meth:`Backend.append_next`'s arguments (for an
    engine that overrides it): the agent id, ``seq >= 1``, a snapshot on ``seq``."""
    if not (  # the common case of check_stored_id, inline (as there: every save)
        agent_id.__class__ is str
        and 0 < len(agent_id) <= _MAX_ID
        and agent_id.isascii()
        and agent_id[0] != "\x01"
        and "\x00" not in agent_id
    ):
        check_stored_id(agent_id)
    if seq.__class__ is not int or seq < 1:
        raise ConfigurationError(f"append_next: seq must be an int >= 1, got {seq!r}")
    if snapshot is not None and snapshot.seq != seq:
        raise ConfigurationError(f"snapshot seq {snapshot.seq} is not the appended seq {seq}")


def validate_from_base(request: AppendRequest, base: RawSnapshot, kept_keys: KeptKeys = ()) -> None:
    """Reject a malformed :meth:`Backend.append_from_base` before any engine touches
    it: the events follow the base (``expected_seq == base.seq >= 1``), no fence, each
    kept key a distinct non-empty name of a range ``1 <= first <= last <= base.seq``,
    or (one at most: the append a compaction cut in two) ``first <= base.seq < last``
    with ``last`` within ``request.events`` and no key on the request (its range
    would overlap the record's)."""
    names = set()
    cut = 0
    top = base.seq + len(request.events)
    for name, first, last in kept_keys:
        if not isinstance(name, str) or not name or name in names:
            raise ConfigurationError(f"agent {request.agent_id!r}: kept key {name!r} is not valid")
        if not (type(first) is int and type(last) is int and 1 <= first <= min(last, base.seq)):
            raise ConfigurationError(
                f"agent {request.agent_id!r}: kept key {name!r} claims seqs {first}..{last},"
                f" which do not start within 1..{base.seq} (the base)"
            )
        if last > base.seq:  # an append the compaction cut in two
            cut += 1
            if last > top or cut > 1 or request.idempotency_key is not None:
                raise ConfigurationError(
                    f"agent {request.agent_id!r}: kept key {name!r} claims seqs"
                    f" {first}..{last} across the base {base.seq}: only one record may,"
                    f" ending at or before the request's last seq {top}, and the request"
                    " then carries no key of its own"
                )
        names.add(name)
        if name == request.idempotency_key:
            raise ConfigurationError(
                f"agent {request.agent_id!r}: kept key {name!r} is also the append's key"
            )
    if base.seq < 1 or request.expected_seq != base.seq:
        raise ConfigurationError(
            f"agent {request.agent_id!r}: a stream from base seq {base.seq} needs"
            f" expected_seq {base.seq}, not {request.expected_seq}"
        )
    if request.fence is not None or request.check_tag:
        raise ConfigurationError("a stream created from a base takes no fence or tag check")
    validate_request(request)


def takes_from_base_guard(engine: Backend) -> bool:
    """Does ``engine``'s :meth:`Backend.append_from_base` take a ``guard``: it declares
    :attr:`~Backend.guards_from_base` and its method has the argument? A subclass of an
    engine that does (SQLite's, say) whose override was written before the argument
    inherits the declaration but not the argument: a caller that passed it one raised
    ``TypeError`` (a tiered store's rehydration of a compacted agent failed). Callers
    pass a guard only when this is true, as :func:`validate_from_base_guard`'s
    refusal would."""
    return engine.guards_from_base and _takes_guard(engine, "append_from_base")


def takes_rename_guard(engine: Backend) -> bool:
    """Does ``engine``'s :meth:`Backend.rename_keys` take a ``guard``: it declares
    :attr:`~Backend.guards_renames` and its method has the argument (an override
    written before it inherits the declaration, not the argument: see
    :func:`takes_from_base_guard`)?"""
    return engine.guards_renames and _takes_guard(engine, "rename_keys")


def _takes_guard(engine: Backend, method: str) -> bool:
    """Does ``engine``'s class's ``method`` have a ``guard`` argument (or ``**kwargs``)?
    Read once per class and method."""
    key = (type(engine), method)
    taken = _TAKES_GUARD.get(key)
    if taken is None:
        params = inspect.signature(getattr(type(engine), method)).parameters
        taken = _TAKES_GUARD[key] = "guard" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
    return taken


_TAKES_GUARD: dict[tuple[type[Backend], str], bool] = {}


def validate_from_base_guard(
    request: AppendRequest, guard: StreamChange | None, engine: Backend
) -> None:
    """Reject a ``guard`` of :meth:`Backend.append_from_base` ``engine`` cannot make
    (:class:`~statekeeper.errors.CapabilityUnsupported`: no
    :attr:`~Backend.guards_from_base`) or that is not a check of another stream's head
    (:class:`~statekeeper.errors.ConfigurationError`): only ``StreamChange(other,
    rewrite=RewriteRequest(other, seq, tag[, head_tag=...]))``, no records rewritten."""
    if guard is None:
        return
    if not engine.guards_from_base:
        raise CapabilityUnsupported(
            engine.name, "append_from_base(guard=...)", "a check of another stream in its commit"
        )
    rw = guard.rewrite
    alone = StreamChange(guard.agent_id, rewrite=rw)
    if (
        rw is None
        or guard != alone
        or rw.agent_id != guard.agent_id
        or rw.events
        or rw.snapshots
        or guard.agent_id == request.agent_id
    ):
        raise ConfigurationError(
            f"agent {request.agent_id!r}: append_from_base's guard must be a check of"
            " another stream's head (StreamChange(other, rewrite=RewriteRequest(other,"
            f" seq, tag)), no records), not {guard!r}"
        )
    validate_rewrite(rw)


def validate_rename_guard(agent_id: str, guard: StreamChange | None, engine: Backend) -> None:
    """Reject a ``guard`` of :meth:`Backend.rename_keys` ``engine`` cannot make
    (:class:`~statekeeper.errors.CapabilityUnsupported`: no
    :attr:`~Backend.guards_renames`) or that is not a check of another stream
    (:class:`~statekeeper.errors.ConfigurationError`): only ``StreamChange(other,
    absent=True)`` or ``StreamChange(other, rewrite=RewriteRequest(other, seq, tag[,
    head_tag=...]))``, no records rewritten."""
    if guard is None:
        return
    if not engine.guards_renames:
        raise CapabilityUnsupported(
            engine.name, "rename_keys(guard=...)", "a check of another stream in its step"
        )
    rw = guard.rewrite
    if guard != StreamChange(guard.agent_id, absent=True) and (
        rw is None
        or guard != StreamChange(guard.agent_id, rewrite=rw)
        or rw.agent_id != guard.agent_id
        or rw.events
        or rw.snapshots
    ):
        raise ConfigurationError(
            f"agent {agent_id!r}: rename_keys' guard must be a check of another stream"
            " (StreamChange(other, absent=True), or StreamChange(other,"
            f" rewrite=RewriteRequest(other, seq, tag)), no records), not {guard!r}"
        )
    if guard.agent_id == agent_id:
        raise ConfigurationError(
            f"agent {agent_id!r}: rename_keys' guard is a check of another stream"
        )
    check_stored_id(guard.agent_id)
    if rw is not None:
        validate_rewrite(rw)


def validate_together(
    requests: Sequence[AppendRequest],
    changes: Sequence[StreamChange] = (),
    engine: Backend | None = None,
) -> None:
    """The checks of every engine's ``append_together`` before it writes: each
    request well-formed, one request or change per stream, each change a delete, or
    a snapshot and/or a prune, or (``engine`` with ``changes_leases_and_rewrites``) a
    lease change or a rewrite alone, or (``engine`` with ``checks_absence_together``)
    an absence check alone; another ``engine`` refuses those with
    :class:`~statekeeper.errors.CapabilityUnsupported` (never ignores them) — and
    changes with no append, unless it declares ``changes_alone_together`` (was: passed
    on to an ``append_together`` that may need an append to commit)."""
    if changes and not requests and engine is not None and not engine.changes_alone_together:
        raise CapabilityUnsupported(
            engine.name, "append_together", "changes with no append in the commit"
        )
    for request in requests:
        validate_request(request)
    ids = [r.agent_id for r in requests]
    for change in changes:
        check_stored_id(change.agent_id)
        if change.delete_checksum is not None and change.delete_at is None:
            raise ConfigurationError("delete_checksum is part of a delete: give delete_at too")
        pruning = change.prune_to is not None
        if (
            (change.lease is not None or change.rewrite is not None)
            and engine is not None
            and not engine.changes_leases_and_rewrites
        ):
            raise CapabilityUnsupported(
                engine.name, "append_together", "a lease change or a rewrite in the same commit"
            )
        if change.absent:
            if engine is not None and not engine.checks_absence_together:
                raise CapabilityUnsupported(
                    engine.name, "append_together", "a check of a stream's absence in the commit"
                )
            if (
                change.delete_at is not None
                or change.snapshot is not None
                or change.prune_to is not None
                or change.lease is not None
                or change.rewrite is not None
                or change.drop_snapshots
                or change.prune_head is not None
                or change.prune_checksum is not None
                or change.delete_checksum is not None
            ):
                raise ConfigurationError(
                    "an absence check is made alone: no delete, snapshot, prune, lease or rewrite"
                )
            ids.append(change.agent_id)
            continue
        if change.lease is not None:
            _validate_lease_change(change)
            ids.append(change.agent_id)
            continue
        if change.rewrite is not None:
            if (
                change.delete_at is not None
                or change.snapshot is not None
                or change.prune_to is not None
            ):
                raise ConfigurationError("a rewrite is made alone: no delete, snapshot or prune")
            if change.rewrite.agent_id != change.agent_id:
                raise ConfigurationError("a stream change's rewrite is of its own stream")
            validate_rewrite(change.rewrite)
            ids.append(change.agent_id)
            continue
        if (
            change.prune_head is not None
            and engine is not None
            and not engine.prunes_together_at_head
        ):
            raise CapabilityUnsupported(
                engine.name, "append_together", "a prune at the head's identity in the same commit"
            )
        if change.drop_snapshots and not pruning:
            raise ConfigurationError("drop_snapshots is part of a prune: give prune_to too")
        if (change.prune_head is not None or change.prune_checksum is not None) and (
            not pruning or change.prune_head is None
        ):
            raise ConfigurationError(
                "prune_head and prune_checksum are part of a prune: give prune_to and prune_head"
            )
        if (change.delete_at is None) == (change.snapshot is None and not pruning):
            raise ConfigurationError(
                "a stream change is a delete, or a snapshot and/or a prune: one of the two"
            )
        if change.delete_at is not None and change.delete_at < 1:
            raise ConfigurationError(f"delete_at must be >= 1, got {change.delete_at}")
        ids.append(change.agent_id)
    if len(set(ids)) != len(ids):
        raise ConfigurationError("append_together: one request per stream")


def _validate_lease_change(change: StreamChange) -> None:
    lease = change.lease
    assert lease is not None
    if (
        change.delete_at is not None
        or change.snapshot is not None
        or change.prune_to is not None
        or change.rewrite is not None
    ):
        raise ConfigurationError("a lease change is made alone: no delete, snapshot or prune")
    check_name(lease.holder, "holder")
    if type(lease.token) is not int or lease.token < 1:
        raise ConfigurationError(f"a lease token is an int >= 1, got {lease.token!r}")
    if lease.ttl is not None:
        validate_ttl(lease.ttl)


def validate_ttl(ttl: float) -> float:
    """A lease duration must be a positive, finite number of seconds."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise InvalidArgument("ttl", f"lease ttl must be a finite number of seconds, not {ttl!r}")
    if ttl <= 0:
        raise InvalidArgument("ttl", f"lease ttl must be > 0 seconds, not {ttl!r}")
    return float(ttl)


def validate_rewrite(request: RewriteRequest) -> None:
    """Reject a malformed rewrite before any engine touches it: every replaced record
    must sit within ``1..expected_seq``, each event at most once."""
    check_stored_id(request.agent_id)
    if request.expected_seq < 1:
        raise ConfigurationError(f"cannot rewrite a stream with head {request.expected_seq}")
    seen: set[int] = set()
    for event in request.events:
        if not 1 <= event.seq <= request.expected_seq or event.seq in seen:
            raise ConfigurationError(
                f"rewrite of event seq {event.seq} is outside 1..{request.expected_seq} or repeated"
            )
        seen.add(event.seq)
    for snap in request.snapshots:
        if not 1 <= snap.seq <= request.expected_seq:
            raise ConfigurationError(
                f"rewrite of snapshot seq {snap.seq} is outside 1..{request.expected_seq}"
            )
