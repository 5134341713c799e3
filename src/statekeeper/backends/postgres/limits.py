"""The largest write a PostgreSQL server takes, checked before it is sent.

A server reads one message of the protocol up to 1 GB (``PQ_LARGE_MESSAGE_LIMIT``,
``MaxAllocSize - 1``): an append's statement with its parameters (its records) is one
message, and a ``bytea`` value holds at most as much. A larger one is not refused with
an error: the server closes the connection while the request is being sent. The
backend took that for a lost connection, tried again for ``retry_timeout`` seconds and
raised a :class:`~statekeeper.errors.BackendError` "server closed the connection
unexpectedly" (a 1.1 GB record: after 42 s of sending it again). :func:`oversize`
refuses it first, with :class:`~statekeeper.errors.StateTooLarge` naming the limit.
The check sums the records' lengths: no copy, no round trip.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ...errors import StateTooLarge
from ...records import AppendRequest, RawSnapshot, StreamChange

__all__ = [
    "MESSAGE_LIMIT",
    "RECORDS_LIMIT",
    "oversize",
    "records_size",
    "snapshot_oversize",
    "together_oversize",
]

#: the largest message a PostgreSQL server reads (and the largest field value)
MESSAGE_LIMIT = (1 << 30) - 1

#: the records of one write at most: the message less room for its other parameters
#: (ids, idempotency key, head tags, fence: at most a few KB) and the protocol's framing
RECORDS_LIMIT = MESSAGE_LIMIT - (1 << 20)

_ENGINE = "PostgreSQL 1 GB message"


def records_size(request: AppendRequest) -> int:
    """The bytes of ``request``'s records (payloads, checksums, its snapshot)."""
    size = sum(len(e.payload) + len(e.checksum) for e in request.events)
    snap = request.snapshot
    return size if snap is None else size + len(snap.payload) + len(snap.checksum)


def oversize(requests: Iterable[AppendRequest], extra: int = 0) -> StateTooLarge | None:
    """The refusal of one write of ``requests`` (with ``extra`` bytes of other records
    in the same message: a compacted stream's base snapshot, the snapshots of
    ``append_together``'s changes) over what a server reads, else None."""
    total = extra
    agent_id = "*"
    for request in requests:
        total += records_size(request)
        agent_id = request.agent_id
    if total <= RECORDS_LIMIT:
        return None
    return StateTooLarge(agent_id, "write", total, RECORDS_LIMIT, engine=_ENGINE)


def snapshot_oversize(agent_id: str, snapshot: RawSnapshot) -> StateTooLarge | None:
    """The refusal of a snapshot's write over what a server reads, else None."""
    size = len(snapshot.payload)
    if size <= RECORDS_LIMIT:
        return None
    return StateTooLarge(agent_id, "snapshot", size, RECORDS_LIMIT, engine=_ENGINE)


def together_oversize(
    requests: Sequence[AppendRequest], changes: Sequence[StreamChange]
) -> StateTooLarge | None:
    """:func:`oversize` of an ``append_together`` (its changes' snapshots in the same
    message). Changes alone whose snapshots are one agent's (a settle's row at the
    head's identity, :mod:`statekeeper.store.settle`) name that agent and "snapshot",
    as :func:`snapshot_oversize` does (was: "a write", no agent)."""
    snaps = [c for c in changes if c.snapshot is not None]
    refused = oversize(requests, sum(len(c.snapshot.payload) for c in snaps if c.snapshot))
    owners = {c.agent_id for c in snaps}
    if refused is None or requests or len(owners) != 1:
        return refused
    return StateTooLarge(owners.pop(), "snapshot", refused.size, RECORDS_LIMIT, engine=_ENGINE)
