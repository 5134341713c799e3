"""The locks of a PostgreSQL ``append_together`` with changes, taken in one order first.

Its changes (a delete, a prune, a rewrite, a lease change) took their agents' locks in
the caller's order, then its appends (``sk_append_batch``) theirs in agent order: a
governed delete of ``b`` with its audit entry (an append to the audit log, whose id,
``\\x01sk-audit/log``, comes first in agent order) held ``b``'s head and waited for the
log's, while a governed save to ``b`` (a set-based batch ``[log, b]``, migration 16)
held the log's head and waited for ``b``'s: a deadlock, PostgreSQL aborting one after
``deadlock_timeout`` (the library runs the victim again: a second lost). So did a
schema migration's page (``rewrite_with``: its rewrites as changes, in page order).
So before its changes the transaction locks the lease rows of its lease changes and
fenced appends, then the head rows of every agent it names, each in agent order — the
order of a batch (leases, migration 17, then heads) and of a page of rewrites
(``rw_many_lock``) — and takes every later lock of those rows as their holder. A
transaction of one agent, or of appends alone (the batch orders its own), takes none.
A governed change so holds the audit log's head from its start, not from its entry's
append on: other processes' governed writes wait for it (each appends at that head
anyway), where before they moved the head meanwhile and the change, its entry then
refused at the old head, was made again whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...records import AppendRequest, StreamChange

__all__ = ["lock_together"]


async def lock_together(
    sql: Mapping[str, Any],
    conn: Any,
    requests: Sequence[AppendRequest],
    changes: Sequence[StreamChange],
) -> None:
    """In ``conn``'s transaction, before ``changes``: the leases, then the heads, of the
    agents of ``requests`` and ``changes`` (an absence check's excepted: it claims its
    own) locked in agent order, when the changes name any and there are two agents."""
    changed = [c for c in changes if not c.absent]
    if not changed:
        return
    agents = sorted({c.agent_id for c in changed} | {r.agent_id for r in requests})
    if len(agents) < 2:
        return
    leased = sorted(
        {c.agent_id for c in changed if c.lease is not None}
        | {r.agent_id for r in requests if r.fence is not None}
    )
    if leased:
        await conn.execute(sql["together_leases"], {"agents": leased})
    await conn.execute(sql["rw_many_lock"], {"agents": agents})
