"""The shared checks of leases, fences, batches, expiry, prunes and rewrites, and the
small helpers engines share (append outcomes, prefix ranges)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ...arguments import check_stored_id
from ...errors import (
    ConfigurationError,
    ConflictError,
    InvalidArgument,
    LeaseHeld,
    LeaseLost,
    RewriteBelowPrunedBase,
)
from ...records import (
    AppendRequest,
    AppendResult,
    Fence,
    LeaseInfo,
)
from .requests import validate_request


def released_with(current: LeaseInfo | None, token: int) -> bool:
    """``current`` is a lease nobody holds whose token is ``token``: it was released
    with that token (a grant would have moved the token on)."""
    return current is not None and current.holder is None and current.token == token


def check_lease_grant(agent_id: str, lease: Any, current: LeaseInfo | None, now: float) -> None:
    """The checks of a lease grant (:class:`~statekeeper.records.LeaseChange`) against
    the agent's stored lease ``current`` at ``now`` on the engine's clock: another
    holder's running lease raises :class:`~statekeeper.errors.LeaseHeld`; a token
    that is not the stored one plus one raises
    :class:`~statekeeper.errors.ConflictError` (expected: the token before the
    grant, current: the stored one)."""
    if (
        current is not None
        and current.holder is not None
        and current.holder != lease.holder
        and current.expires_at > now
    ):
        raise LeaseHeld(agent_id, current.holder, current.expires_at)
    stored = current.token if current is not None else 0
    if stored + 1 != lease.token:
        raise ConflictError(agent_id, lease.token - 1, stored)


def validate_batch(
    requests: Sequence[AppendRequest],
) -> tuple[list[AppendResult | BaseException | None], list[tuple[int, AppendRequest]]]:
    """The first step of an engine's ``append_batch``: each malformed request's slot of
    the answer holds its ``ConfigurationError`` (the batch goes on without it), and the
    well-formed ones come back with their index, in order, for the engine to write."""
    out: list[AppendResult | BaseException | None] = [None] * len(requests)
    valid: list[tuple[int, AppendRequest]] = []
    for i, request in enumerate(requests):
        try:
            validate_request(request)
            valid.append((i, request))
        except ConfigurationError as exc:
            out[i] = exc
    return out, valid


def check_expiry(agent_id: str | None, before: float) -> float:
    """The checks of :meth:`Backend.expire_keys`' arguments, made by every engine
    before it touches storage: an agent id (or None) and a finite time; ``before``."""
    if agent_id is not None:
        check_stored_id(agent_id)
    if isinstance(before, bool) or not isinstance(before, int | float) or not math.isfinite(before):
        raise InvalidArgument(
            "before", f"expire_keys: before must be a finite epoch time, not {before!r}"
        )
    return float(before)


def check_fence(agent_id: str, fence: Fence, current: LeaseInfo | None) -> None:
    """Raise :class:`~statekeeper.errors.LeaseLost` unless ``fence`` is the agent's
    current (not released) lease. Expiry alone does not fail the check: while nobody
    took the lease over, no newer token exists, and the write is safe."""
    holder, token = fence
    if (
        current is None
        or current.holder is None
        or (current.holder, current.token)
        != (
            holder,
            token,
        )
    ):
        raise lease_lost(agent_id, holder, token, current)


def append_outcome(
    request: AppendRequest,
    reply: Sequence[Any],
    holder: Callable[[Any], str | None] | None = None,
) -> AppendResult:
    """The result of an engine's one-round-trip append (a script or a statement) from
    its reply ``(status, a, b[, newest holder])``: status 0, stored as seqs ``a..b``; 1,
    a duplicate of the earlier append ``a..b`` with the same key; 3, the fence is stale
    (:class:`~statekeeper.errors.LeaseLost`: ``a`` is the newest token, its holder as
    ``holder`` decodes it, as is without); else a conflict (``a`` is the head)."""
    status, a, b = int(reply[0]), int(reply[1]), int(reply[2])
    if status == 0:
        return AppendResult(request.agent_id, a, b)
    if status == 1:
        return AppendResult(request.agent_id, a, b, duplicate=True)
    if status == 3:
        assert request.fence is not None
        newest = reply[3] if holder is None else holder(reply[3])
        raise LeaseLost(request.agent_id, request.fence[0], request.fence[1], a, newest)
    raise ConflictError(request.agent_id, request.expected_seq, a)


def lease_lost(agent_id: str, holder: str, token: int, current: LeaseInfo | None) -> LeaseLost:
    """The :class:`~statekeeper.errors.LeaseLost` of ``holder``'s ``token`` when the
    agent's newest lease is ``current`` (None: the agent has none)."""
    return LeaseLost(
        agent_id,
        holder,
        token,
        current.token if current is not None else 0,
        current.holder if current is not None else None,
    )


def check_prune_at(
    agent_id: str,
    head: int,
    expected: int | None,
    checksum: bytes | None,
    stored: Callable[[], bytes | None],
) -> None:
    """The identity precondition of :meth:`Backend.prune` (``expected``: the head the
    caller planned on, None for none; ``checksum``: that head event's, None for any;
    ``stored``: the stored head event's checksum, read only when needed), checked by
    each engine inside its atomic step before :func:`check_prune`."""
    if expected is None:
        if checksum is not None:
            raise ConfigurationError("a prune's checksum is its head's identity: give head too")
        return
    if head != expected:
        raise ConflictError(agent_id, expected, head)
    if checksum is not None and stored() != checksum:
        raise ConflictError(agent_id, expected, head)  # deleted and made again since


def check_prune(
    agent_id: str,
    head: int,
    base_seq: int,
    has_base: bool,
    drop_snapshots: Sequence[int],
    current_base: int,
) -> None:
    """The preconditions of :meth:`Backend.prune`, checked by each engine inside its
    atomic step (``has_base``: a snapshot is stored at ``base_seq``; ``current_base``:
    the stream's base as stored in that step — the seq before its first stored event —
    which an engine may read only when ``drop_snapshots`` is not empty, passing 0
    otherwise: it matters only then)."""
    if not 0 <= base_seq < head:
        raise ConfigurationError(
            f"agent {agent_id!r}: cannot prune to base seq {base_seq} with head {head}"
        )
    if base_seq and not has_base:
        raise ConfigurationError(
            f"agent {agent_id!r}: no snapshot at seq {base_seq} to become the stream's base"
        )
    if base_seq and base_seq in drop_snapshots:
        raise ConfigurationError(
            f"agent {agent_id!r}: cannot drop the snapshot at seq {base_seq}: the prune's base"
        )
    if current_base >= base_seq and current_base and current_base in drop_snapshots:
        # (compacted already, maybe by another process since the caller looked: the
        # snapshot at its base is the only record of the state there)
        raise ConfigurationError(
            f"agent {agent_id!r}: cannot drop the snapshot at seq {current_base}:"
            " it is the stream's base (its events up to it are pruned)"
        )


def unstored_rewrite(agent_id: str, seq: int, base: int) -> RewriteBelowPrunedBase:
    """The error of a rewrite naming event ``seq`` of ``agent_id``, not stored: pruned
    (its events up to ``base`` are gone). Every engine raises it before writing any of
    the rewrite: a rewrite that reported success with nothing changed (a redaction, a
    key rotation) would be a silent failure. A ``ConfigurationError``
    (:class:`~statekeeper.errors.RewriteBelowPrunedBase`): planned again, it applies."""
    return RewriteBelowPrunedBase(agent_id, seq, base, "event")


def prefix_end(prefix: str) -> str:
    """The smallest string above every string starting with ``prefix`` (non-empty):
    ``[prefix, prefix_end(prefix))`` is the range of ids with that prefix, in code
    point order (SQLite's BINARY and PostgreSQL's ``"C"`` collation order UTF-8 bytes,
    which is the same order)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
