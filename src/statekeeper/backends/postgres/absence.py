"""An absence check in a PostgreSQL ``append_together`` (``StreamChange.absent``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ConflictError


async def absent_in(sql: Mapping[str, Any], conn: Any, agent_id: str) -> None:
    """The check in ``conn``'s transaction: the agent's head row claimed at 0 and
    removed again (the queries ``absent_claim`` and ``absent_release``), so a creation
    of the agent racing the transaction is either seen — committed before the claim,
    or waited for by it — and raises :class:`ConflictError` (the caller rolls back),
    or waits for the transaction's end, its events after what the transaction wrote.
    A plain read would miss a creation still to commit, whose events then come before
    the transaction's in the feed."""
    while True:
        cur = await conn.execute(sql["absent_claim"], (agent_id,))
        if cur.rowcount == 1:
            await conn.execute(sql["absent_release"], (agent_id,))
            return
        cur = await conn.execute(sql["absent_head"], (agent_id,))
        row = await cur.fetchone()
        if row is None:
            # deleted between the claim and this read: nothing held, so claim again
            # (was: passed, and a creation committed meanwhile came before the commit)
            continue
        head = int(row[0])
        if head:
            raise ConflictError(agent_id, 0, head)
        return
