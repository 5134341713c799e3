"""PostgreSQL's deletes (``delete_agent``, ``delete_agent_at``), exact when sent again.

A delete whose COMMIT reply is lost (the connection dies around the commit) is sent
again by the backend's reconnecting retry. Sent blindly, the second try meets the
stream as it is *now*: gone (its own delete, reported as a conflict, or as "it did not
exist"), or created again by another writer up to the same head — which the
conditional delete would delete, with that writer's acknowledged events. So each try
first learns its transaction id (``txid_current()``) and its answer (before its COMMIT
is sent), and a retry first asks the server what became of the earlier tries
(``txid_status``, PostgreSQL >= 10): one committed is the delete done, with that try's
answer, and nothing is sent again; only when none committed (the connection died
before the COMMIT reached the server) is the delete sent again.

Under row-level security a DELETE the role may not make is not an error: the server
filters the rows away, and the delete matched nothing — a stream the role may read but
not write was reported as absent (or its conditional delete as a conflict), still
there. A delete that matched no row asks the policy (:func:`refusal`): a role that may
not write the agent's namespace is refused with
:class:`~statekeeper.errors.AccessDenied` naming the agent, like a refused write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ...arguments import RUN_LOCKS
from ...errors import AccessDenied, BackendError
from ...records import StreamChange
from .refusals import row_security_refusal

if TYPE_CHECKING:
    from .part import PostgresPart

__all__ = ["committed", "delete", "delete_at", "refusal", "row_security_binds"]

T = TypeVar("T")

#: the prefix of a namespace's feed tombstone stream (statekeeper.store.feed_deletes),
#: which no role bound by row-level security may change but by appending (its policy,
#: sql/row_security.sql, filters such a change to nothing: refused, not "absent")
TOMBSTONES_IN = "\x01sk-feed/deleted/in/"

#: polls of a transaction still "in progress" (its connection died, the server has not
#: ended it yet) before the outcome is reported unknown; the pause doubles from 10 ms
#: to at most 1 s, so about 40 s in all
_POLLS = 48


async def delete_at(
    backend: PostgresPart, agent_id: str, head: int, checksum: bytes | None = None
) -> bool:
    """Delete ``agent_id`` if its head is ``head`` (and its head event's checksum
    ``checksum``, when given), in one transaction: True, or
    :class:`~statekeeper.errors.ConflictError` with nothing deleted; a retry after a
    lost reply returns True when an earlier try committed, never deleting again."""

    async def body(conn: Any) -> bool:
        change = StreamChange(agent_id, delete_at=head, delete_checksum=checksum)
        await backend._change(conn, change)
        return True

    return await _exactly_once(backend, f"delete_agent_at of {agent_id!r}", agent_id, body)


async def delete(backend: PostgresPart, agent_id: str) -> bool:
    """Delete ``agent_id``'s stream in one transaction: True if it existed (also when
    it is answered by a retry after a lost reply: the committed try's answer)."""
    sql = backend._sql

    async def body(conn: Any) -> bool:
        cur = await conn.execute(sql["del_agent"], (agent_id,))
        existed = bool(cur.rowcount > 0)
        if not existed and (refused := await refusal(backend, conn, agent_id)) is not None:
            raise refused
        for name in ("del_events", "del_snaps", "del_keys"):
            await conn.execute(sql[name], (agent_id,))
        return existed

    return await _exactly_once(backend, f"delete_agent of {agent_id!r}", agent_id, body)


async def refusal(
    backend: PostgresPart, conn: Any, agent_id: str, operation: str = "delete"
) -> AccessDenied | None:
    """Why ``operation`` (a delete, a prune, a rewrite, a lease's release...) of
    ``agent_id`` in ``conn`` matched no row when row-level security refused it (the
    role may not write the agent's namespace, the stream there or not), else None: it
    was not there (or is hidden from the role). Asked only once a statement matched
    fewer rows than it should have: a write that found its rows costs nothing more."""
    if not await row_security_binds(backend, conn):
        return None
    if agent_id.startswith(TOMBSTONES_IN):  # a namespace's feed tombstones: appended only
        return row_security_refusal(backend.dsn, operation, agent_id)
    query = backend._sql["rls_may_write"]
    if agent_id.startswith(RUN_LOCKS):  # (its own policies: a lost lock is no refusal)
        cur = await conn.execute(backend._sql["rls_run_locks"])
        row = await cur.fetchone()
        if row is None or not row[0]:  # (row security of an older statekeeper)
            return row_security_refusal(backend.dsn, operation, agent_id)
        query = backend._sql["rls_may_lock"]
    cur = await conn.execute(query, (agent_id,))
    row = await cur.fetchone()
    if row is not None and row[0]:
        return None
    return row_security_refusal(backend.dsn, operation, agent_id)


async def row_security_binds(backend: PostgresPart, conn: Any) -> bool:
    """Whether row-level security binds ``conn``'s role (installed on the schema, and
    the role not its owner nor a superuser): its policies may filter a DELETE or an
    UPDATE to nothing rather than fail it."""
    cur = await conn.execute(backend._sql["rls_applies"])
    row = await cur.fetchone()
    return row is not None and bool(row[0])


async def _exactly_once(
    backend: PostgresPart, what: str, agent_id: str, body: Callable[[Any], Awaitable[T]]
) -> T:
    """``body(conn)`` in one transaction, retried on a lost connection; a retry whose
    earlier try committed returns that try's answer (taken before its COMMIT was sent)
    and sends nothing again."""
    tries: list[tuple[int, T]] = []

    async def op() -> T:
        for txid, answer in tries:
            if await committed(backend, f"delete of agent {agent_id!r}", txid):
                return answer  # an earlier try landed: its reply was lost
        async with backend._connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT txid_current()")
            row = await cur.fetchone()
            assert row is not None
            answer = await body(conn)
            tries.append((int(row[0]), answer))
        return answer

    return await backend._retrying(what, op)


async def committed(backend: PostgresPart, what: str, txid: int) -> bool:
    """Whether transaction ``txid`` (of ``what``) committed (waiting while it is still
    in progress)."""
    pause = 0.01
    for _ in range(_POLLS):
        async with backend._connection() as conn:
            cur = await conn.execute("SELECT txid_status(%s)", (txid,))
            row: Any = await cur.fetchone()
        status = row[0] if row is not None else None
        if status != "in progress":
            return bool(status == "committed")
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)
    raise BackendError(
        f"{what}: transaction {txid} is still in progress on the server after its"
        " connection was lost; whether it landed is unknown",
        maybe_applied=True,
    )
