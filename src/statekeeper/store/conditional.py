"""A delete made only while the stream is as it was seen: a retention TTL purge
decides on a listing of the agents (head, last write), and a writer that appends
between that listing and the delete has made the agent no longer idle. Deleting
it anyway would lose that acknowledged write without an error.

Within :func:`delete_only_at` the store's ``delete`` of the task is conditional on
the head it names: a :class:`~statekeeper.errors.ConflictError` (nothing deleted)
when the head moved (``Backend.delete_agent_at``: one commit on memory, SQLite,
PostgreSQL, Redis and a Redis Cluster; tiered: its durable tier's; S3: a conditional
claim of the commit slot after that head, which an append there would need) — and,
given the head event's stored checksum (the record the caller looked at), on that
record's identity too, checked in the same atomic step: an agent deleted and written
again up to the same head by another process is another stream, never deleted.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

from ..backends.base import Backend
from ..errors import CapabilityUnsupported, ConflictError
from ..records import StreamChange

_DELETE_AT: ContextVar[tuple[int, bytes | None] | None] = ContextVar(
    "statekeeper_delete_at", default=None
)


@contextlib.contextmanager
def delete_only_at(head: int, checksum: bytes | None = None) -> Iterator[None]:
    """Within: this task's store ``delete`` deletes only a stream whose head is
    ``head`` (>= 1) and, given ``checksum``, whose head event's stored checksum is that
    one, else raises :class:`~statekeeper.errors.ConflictError`."""
    token = _DELETE_AT.set((head, checksum))
    try:
        yield
    finally:
        _DELETE_AT.reset(token)


def expected_head() -> int | None:
    """The head this task's delete is conditional on (None: unconditional)."""
    expected = _DELETE_AT.get()
    return expected[0] if expected is not None else None


def expected_checksum() -> bytes | None:
    """The head event's checksum this task's delete is conditional on (None: any)."""
    expected = _DELETE_AT.get()
    return expected[1] if expected is not None else None


async def delete_at(
    backend: Backend, agent_id: str, head: int, checksum: bytes | None = None
) -> bool:
    """Delete ``agent_id`` (a stored id) only if its head is ``head`` (and its head
    event's stored checksum ``checksum``, when given): True; False when
    the stream is already gone (head 0: this delete's own first try, whose reply was
    lost and which the engine sent again, or another delete — either way nothing
    written is lost, and a purge is done); else
    :class:`~statekeeper.errors.ConflictError` with nothing deleted (a stream written
    since, even one deleted and written again, is never deleted)."""
    try:
        if checksum is None:  # (an engine whose override predates the checksum)
            return await backend.delete_agent_at(agent_id, head)
        return await backend.delete_agent_at(agent_id, head, checksum)
    except ConflictError as exc:
        if exc.agent_id == agent_id and exc.current_seq == 0:
            return False
        raise
    except TypeError as exc:  # (raised by the call itself: nothing was deleted)
        old = _without_checksum(backend)
        if old is None:
            raise
        raise CapabilityUnsupported(
            f"{old.__module__}.{old.__qualname__}",
            "a delete conditional on the head record's identity",
            "its delete_agent_at(agent_id, head) override takes no checksum (the head"
            " event's stored checksum, Backend.delete_agent_at's third argument): add"
            " 'checksum: bytes | None = None' and compare it in the delete's atomic step"
            " (statekeeper.testing.BackendConformance checks it). Nothing was deleted",
        ) from exc


async def prune_at(
    backend: Backend,
    agent_id: str,
    base_seq: int,
    drop_snapshots: Sequence[int],
    head: int,
    checksum: bytes | None,
) -> None:
    """``backend.prune`` only while ``agent_id``'s head is ``head`` and (given) its head
    event's stored checksum ``checksum`` — the stream the prune was planned on, checked
    in the engine's atomic step (:meth:`Backend.prune`): a stream deleted and written
    again up to the same seq since the plan raises
    :class:`~statekeeper.errors.ConflictError`, nothing removed. An engine whose
    ``prune`` override predates these arguments is refused with
    :class:`~statekeeper.errors.CapabilityUnsupported` naming it (nothing removed: a
    prune without them would cut whichever stream is there)."""
    try:
        await backend.prune(agent_id, base_seq, drop_snapshots, head, checksum)
    except TypeError as exc:  # (raised by the call itself: nothing was removed)
        old = _without(backend, "prune", ("", 1, (), 1, b""))
        if old is None:
            raise
        raise CapabilityUnsupported(
            f"{old.__module__}.{old.__qualname__}",
            "a prune conditional on the head record's identity",
            "its prune(agent_id, base_seq, drop_snapshots) override takes no head (the"
            " head the prune was planned on and its event's stored checksum,"
            " Backend.prune's fourth and fifth arguments): add 'head: int | None = None,"
            " checksum: bytes | None = None' and compare them in the prune's atomic step"
            " (statekeeper.testing.BackendConformance checks it). Nothing was removed",
        ) from exc


def check_together_at(backend: Backend, changes: Sequence[StreamChange]) -> None:
    """Before ``backend.append_together(..., changes)``: a change pruning at a head's
    identity (``StreamChange.prune_head``) is refused with
    :class:`~statekeeper.errors.CapabilityUnsupported` naming the engine class (the one
    an instrumented backend wraps) when the engine does not declare
    ``prunes_together_at_head`` — its ``append_together`` predates those fields and
    would make the prune on whichever stream is there, the one deleted and made again
    since the prune was planned included. Nothing is written."""
    if backend.prunes_together_at_head or all(c.prune_head is None for c in changes):
        return
    engine: object = backend
    seen: set[int] = set()
    while (inner := getattr(engine, "inner", None)) is not None and id(inner) not in seen:
        seen.add(id(inner))
        engine = inner
    cls = type(engine)
    raise CapabilityUnsupported(
        f"{cls.__module__}.{cls.__qualname__}",
        "a prune at the head's identity committed with its audit entry",
        "its append_together does not declare prunes_together_at_head (a change's"
        " prune_head and prune_checksum: the head the prune was planned on and its"
        " event's stored checksum): compare them in the commit as prune compares its head"
        " and checksum, then set 'prunes_together_at_head = True'"
        " (statekeeper.testing.BackendConformance checks it). Nothing was written",
    )


def _without_checksum(backend: object) -> type | None:
    """The engine class (``backend`` or one it wraps: an instrumented backend's inner
    engine, a tiered one's durable tier) whose ``delete_agent_at`` cannot take a
    checksum (an override written before it was added), else None."""
    return _without(backend, "delete_agent_at", ("", 1, b""))


def _without(backend: object, name: str, args: tuple[object, ...]) -> type | None:
    """The engine class (``backend`` or one it wraps) whose method ``name`` cannot be
    called with ``args`` (an override written before its last arguments), else None."""
    seen: set[int] = set()
    while backend is not None and id(backend) not in seen:
        seen.add(id(backend))
        method = getattr(type(backend), name, None)
        if method is not None:
            try:
                inspect.signature(method).bind(backend, *args)
            except TypeError:
                return type(backend)
        backend = getattr(backend, "inner", None) or getattr(backend, "durable", None)
    return None


async def erase(backend: Backend, agent_id: str) -> bool:
    """The engine's delete of ``agent_id``, conditional within :func:`delete_only_at`."""
    expected = _DELETE_AT.get()
    if expected is None:
        return await backend.delete_agent(agent_id)
    return await delete_at(backend, agent_id, *expected)
