"""Legal holds kept in the store, so that every purge sees them.

A legal hold exempts an agent (``acme/alice``) or a whole namespace (``legal/*``: the
agents whose namespace is ``legal``, as in a retention policy file) from every purge.
Holds placed with :func:`add_hold` (``statekeeper hold add PATTERN --reason ...``) are
records of the store itself — a stream of its own
(:data:`~statekeeper.arguments.HOLDS_STREAM`, hidden from listings), sealed and chained
by the store's codec like an agent's stream, so backups carry them — not lines of a
file a caller may forget to pass. Every way an agent goes refuses a held one with
:class:`~statekeeper.errors.AgentOnHold`, naming the agent and the hold: ``forget``
(before its data key is touched), the store's one ``delete`` (so also ``forget
--purge``, the CLI's ``delete``, the LangGraph saver's thread deletion and prune);
schema expiry and ``retention apply`` pass over a held agent (retention reports it
``held``; the policy file's ``hold`` lines still count as well).

There is no per-call override: releasing a hold is its own act (:func:`remove_hold`,
``statekeeper hold remove``), which needs ``admin`` on the namespace and is audited like
placing one; a purge after it is an ordinary purge. A flag on each purge would let any
script skip a hold without anyone deciding to release it.

A hold is checked when a purge starts: a hold placed by another process while a purge
of the same agent is already under way does not stop that purge.

On an engine that expires agents by itself (Redis with ``ttl=``, or an agent given a
TTL with ``set_ttl``, as schema expiry does) the expiry is a purge the server runs: a
hold stops it. Placing one marks the keys of every stored agent it covers as held (they
never expire: ``PERSIST``; saves and reads of a held agent set no expiry, and a stream
created later under a held pattern is marked as it is created), before the hold is
recorded; releasing one lets their TTL apply again at once (the full TTL, from the
release). Placing a hold that is already in force marks the keys again: the way to
bring holds placed before this existed to the engine.

Placing or releasing a hold first checks that the store's keys open what the store holds
(:func:`~statekeeper.governance.keycheck.check_keys`): the holds records themselves,
else the audit log, else the first agent that is not forgotten. A hold sealed under keys
the store's other users lack would make every purge of theirs fail closed, so a wrong
key is refused (:class:`~statekeeper.errors.DecryptionError`) before anything is
written."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..arguments import HOLDS_STREAM
from ..backends.base import Capability
from ..errors import (
    AccessDenied,
    AgentOnHold,
    ConflictError,
    InvalidArgument,
    RetriesExhausted,
)
from ..records import AppendRequest, RawEvent
from ..store.holds import HOLD_ADD, HOLD_REMOVE, HOLDS_MARKER, Hold, check_pattern, find_hold
from ..store.holds import list_holds as _in_force
from ..store.holds import read_holds as _read
from ..store.keyguard import key_family
from ..store.namespaced import NamespacedStateStore
from .hooks import (
    AuditSink,
    GovernanceEvent,
    announce,
    emit,
    require,
    store_sink,
)
from .keycheck import check_keys

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = [
    "HOLDS_STREAM",
    "Hold",
    "add_hold",
    "carry_hold",
    "check_keys",
    "check_pattern",
    "find_hold",
    "list_holds",
    "refuse_if_held",
    "remove_hold",
]

_RETRIES = 8
#: what a hold placed under keys that do not open the store would do (check_keys)
_SEALED_UNREADABLE = (
    "a legal hold sealed under these keys would be unreadable to the store's other users"
    " (every purge of theirs would fail)"
)


async def refuse_if_held(store: StateStore, agent_id: str, operation: str) -> None:
    """Raise :class:`~statekeeper.errors.AgentOnHold` when a hold of the store covers
    ``agent_id`` (its stored id), naming it as the caller's store does; the refusal
    goes to the audit log of a store opened as a principal."""
    hold = await find_hold(store, agent_id)
    if hold is None:
        return
    await emit(
        await store_sink(store, None),
        GovernanceEvent(operation, agent_id, "refused", details={"hold": hold.pattern}),
    )
    shown = store.relative(agent_id) if isinstance(store, NamespacedStateStore) else agent_id
    raise AgentOnHold(shown, hold.pattern, hold.reason, operation)


async def list_holds(store: StateStore) -> tuple[Hold, ...]:
    """The holds in force, in the order they were placed. On a store opened as a
    principal, only the holds on agents and namespaces it may ``read``: a hold names
    an agent or a namespace and the matter it is for, another tenant's business (a
    principal the policy does not name is refused, audited). Every purge still sees
    every hold (:func:`find_hold`)."""
    holds = await _in_force(store)
    gov = getattr(store, "_governance", None)
    policy = getattr(gov, "policy", None)
    if gov is None or policy is None:
        return holds
    if not policy.knows(gov.principal or ""):
        await gov.require(None, "read", "list-holds")  # refused: names it, audited
    # a NAMESPACE/* pattern's namespace is NAMESPACE: readable as its agents are
    return tuple(h for h in holds if gov.can_read(h.pattern))


async def add_hold(
    store: StateStore, pattern: str, reason: str, *, audit: AuditSink | None = None
) -> bool:
    """Place a legal hold on ``pattern`` (an agent id or ``NAMESPACE/*``: full ids, as
    in a policy file, also through a store opened in a namespace). ``reason`` (the
    matter it is for) is required. Needs ``admin`` on the namespace on a store opened
    as a principal; audited. False when the pattern was held already (nothing
    written)."""
    return await _change(store, pattern, reason, HOLD_ADD, audit)


async def carry_hold(
    store: StateStore, hold: Hold, backup_id: str, *, audit: AuditSink | None = None
) -> bool:
    """Place ``hold`` (a hold in force in the backup ``backup_id``) in ``store`` as it
    was placed: its reason, who placed it and when are kept, and the hold names the
    backup (``restored_from``). Needs ``admin`` and is audited as :func:`add_hold`
    (the entry names whoever runs the restore, and the backup). False when the
    pattern was held already."""
    return await _change(store, hold.pattern, hold.reason, HOLD_ADD, audit, (hold, backup_id))


async def remove_hold(
    store: StateStore, pattern: str, reason: str = "", *, audit: AuditSink | None = None
) -> bool:
    """Release the hold on ``pattern``; False when there was none (nothing written).
    Needs ``admin`` as :func:`add_hold` does; audited."""
    return await _change(store, pattern, reason, HOLD_REMOVE, audit)


async def _require_admin(store: StateStore, pattern: str, operation: str) -> None:
    """``admin`` on the held agent, or on the namespace whose agents ``NAMESPACE/*``
    holds; a refusal (audited) names what was asked about: the agent, or the pattern
    and its namespace."""
    if not pattern.endswith("/*"):
        await require(store, pattern, "admin", operation)
        return
    gov = getattr(store, "_governance", None)
    policy = getattr(gov, "policy", None)
    if gov is None or policy is None:
        return
    namespace, principal = pattern[:-2], gov.principal or ""
    if policy.allows(principal, f"{namespace}/-", "admin"):  # (an agent of the namespace)
        return
    why = (
        f"holding {pattern!r} needs admin on namespace {namespace!r}"
        if policy.knows(principal)
        else "the policy does not name it"
    )
    exc = AccessDenied(principal, "admin", operation, None, why, namespace=namespace)
    await gov.refuse(exc, None, {"pattern": pattern, "namespace": namespace})


async def _change(
    store: StateStore,
    pattern: str,
    reason: str,
    kind: str,
    audit: AuditSink | None,
    carried: tuple[Hold, str] | None = None,
) -> bool:
    check_pattern(pattern)
    if not isinstance(reason, str):
        raise InvalidArgument("reason", f"reason must be a str, not {type(reason).__name__}")
    reason = " ".join(reason.split())
    if kind == HOLD_ADD and not reason:
        raise InvalidArgument("reason", "a legal hold needs a reason (the matter it is for)")
    operation = "hold" if kind == HOLD_ADD else "release-hold"
    await _require_admin(store, pattern, operation)
    principal = getattr(getattr(store, "_governance", None), "principal", None)
    await check_keys(store, _SEALED_UNREADABLE)
    adding = kind == HOLD_ADD
    if adding:  # the engine's own expiry stopped before the hold is recorded
        await _expiry(store, pattern, True)
    given = audit
    audit = await store_sink(store, audit)
    last = ConflictError(HOLDS_STREAM, 0, 0)
    for _ in range(_RETRIES):
        seq, tag = await store.backend.head_tag(HOLDS_STREAM)
        holds, link = await _read(store, seq, tag) if seq else ((), None)
        if any(h.pattern == pattern for h in holds) == adding:
            if not adding:  # (a release recorded by a run that stopped before its keys)
                await _expiry(store, pattern, False)
            return False  # already so: nothing to record
        at = time.time()
        details: dict[str, Any] = {"pattern": pattern, "reason": reason}
        doc = {"pattern": pattern, "reason": reason, "principal": principal}
        if carried is not None:  # placed as it was in the backup, naming the backup
            hold, backup_id = carried
            doc.update(principal=hold.principal, placed_at=hold.at, restored_from=backup_id)
            details.update(placed_by=hold.principal, placed_at=hold.at, restored_from=backup_id)
        event = GovernanceEvent(
            operation, None if pattern.endswith("/*") else pattern, "ok", details=details, at=at
        )
        # into the store's audit log the entry goes first (a crash cannot change holds
        # unrecorded), naming no principal on a store opened without one
        announced = await announce(store, given, event)
        try:
            await _append(store, seq, tag, link, kind, at, doc)
        except ConflictError as exc:
            if announced is not None:
                await announced.failed(exc)
            last = exc
            continue  # another process changed the holds first: read them again
        except BaseException as exc:
            if announced is not None:
                await announced.failed(exc)
            raise
        if announced is None:
            await emit(audit, event)
        if adding:  # again: a release of the same pattern may have run in between
            await _expiry(store, pattern, True)
        else:
            await _expiry(store, pattern, False)
            if any(h.pattern == pattern for h in await _in_force(store)):
                await _expiry(store, pattern, True)  # placed again meanwhile
        return True
    raise RetriesExhausted(HOLDS_STREAM, _RETRIES, last)


async def _expiry(store: StateStore, pattern: str, held: bool) -> None:
    """On an engine that expires agents by itself (Redis ``ttl=``, ``set_ttl``): stop
    (``held``) or let go again the expiry of the agents ``pattern`` covers
    (:meth:`~statekeeper.backends.base.Backend.hold_keys`)."""
    backend = store.backend
    if backend.supports(Capability.TTL):
        await backend.hold_keys(pattern, held)


async def _append(
    store: StateStore,
    seq: int,
    tag: bytes | None,
    link: bytes | None,
    kind: str,
    at: float,
    doc: dict[str, Any],
) -> None:
    """Append one hold record after the head ``seq`` (compare-and-set on it and ``tag``)."""
    from ..codec.pipeline import ZERO_LINK

    codec = store.codec
    await key_family(store.backend, codec)  # (a store's first use may be a hold)
    sealed = codec.seal(HOLDS_STREAM, seq + 1, kind, at, codec.serialize(doc), link or ZERO_LINK)
    backend = store.backend
    await backend.append(
        AppendRequest(
            HOLDS_STREAM,
            seq,
            [RawEvent(seq + 1, kind, at, sealed.payload, sealed.checksum)],
            head_tag=codec.head_tag(HOLDS_STREAM, seq + 1, sealed.link),
            expected_tag=tag,
            check_tag=backend.compares_head_tag,
        )
    )
    # once a record is committed (never before: a store marked without one would refuse
    # every purge), the store says it keeps holds, so that losing them all is seen
    if await backend.read_marker(HOLDS_MARKER) is False:
        await backend.set_marker(HOLDS_MARKER)
