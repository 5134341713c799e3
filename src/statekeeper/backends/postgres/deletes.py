"""PostgreSQL's conditional delete (``delete_agent_at``), exact when it is sent again.

A delete whose COMMIT reply is lost (the connection dies around the commit) is sent
again by the backend's reconnecting retry. Sent blindly, the second try meets the
stream as it is *now*: gone (its own delete, reported as a conflict), or created again
by another writer up to the same head — which it would delete, with that writer's
acknowledged events, and report as done. So each try first learns its transaction id
(``txid_current()``, before it changes anything), and a retry first asks the server
what became of the earlier tries (``txid_status``, PostgreSQL >= 10): one committed is
the delete done — nothing is sent again; only when none committed (the connection died
before the COMMIT reached the server) is the conditional delete sent again.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ...errors import BackendError
from ...records import StreamChange

if TYPE_CHECKING:
    from .backend import PostgresBackend

__all__ = ["delete_at"]

#: polls of a transaction still "in progress" (its connection died, the server has not
#: ended it yet) before the outcome is reported unknown; the pause doubles from 10 ms
#: to at most 1 s, so about 40 s in all
_POLLS = 48


async def delete_at(backend: PostgresBackend, agent_id: str, head: int) -> bool:
    """Delete ``agent_id`` if its head is ``head``, in one transaction: True, or
    :class:`~statekeeper.errors.ConflictError` with nothing deleted; a retry after a
    lost reply returns True when an earlier try committed, never deleting again."""
    tries: list[int] = []

    async def op() -> bool:
        for txid in tries:
            if await _committed(backend, agent_id, txid):
                return True  # an earlier try's delete landed: its reply was lost
        async with backend._connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT txid_current()")
            row = await cur.fetchone()
            assert row is not None
            tries.append(int(row[0]))
            await backend._change(conn, StreamChange(agent_id, delete_at=head))
        return True

    return await backend._retrying("delete_agent_at", op)


async def _committed(backend: PostgresBackend, agent_id: str, txid: int) -> bool:
    """Whether transaction ``txid`` committed (waiting while it is still in progress)."""
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
        f"delete of agent {agent_id!r}: transaction {txid} is still in progress on the "
        "server after its connection was lost; whether the delete landed is unknown",
        maybe_applied=True,
    )
