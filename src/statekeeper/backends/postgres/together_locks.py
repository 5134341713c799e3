"""The locks of a PostgreSQL ``append_together``, taken in one order first: its claims,
then its leases, then its heads, each in agent order (the audit log's head last).

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

Before those: its claims (:func:`.absence.absent_in`), in agent order — its absence
checks', and, when it checks or locks anything, its new agents' (a head row inserted at
0 and removed again: a creation of the agent by another transaction waits on it until
the transaction ends), as a batch claims its new agents before its locks (migration
20). The checks claimed in the order given, before the locks, and a transaction
creating an agent took its row only at its append, after its locks: two checks of
``p, q`` and ``q, p`` deadlocked, and so did a check of ``x`` with an append to ``y``
(holding ``x``, waiting on ``y``) and a delete of ``y`` creating ``x`` (holding ``y``,
waiting on ``x``) — ``test_postgres_absence_lock_order.py``.

The audit log's head is the last of the heads (``rw_many_lock``; a batch's too,
migration 20), though its id comes first: a governed change holds it from its locks on,
not from its entry's append on (other processes' governed writes wait for it — each
appends at that head anyway — where before they moved the head meanwhile and the
change, its entry then refused at the old head, was made again whole), but not while it
waits on another agent's head: a change of ``b`` waiting on a transaction of ``b``'s
(idle with its row locked; no ``lock_timeout``) held the log meanwhile, and every
governed write of the store waited behind it (``test_postgres_audit_head_last.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from ...records import AppendRequest, StreamChange
from .absence import absent_in

__all__ = ["lock_together"]


async def lock_together(
    sql: Mapping[str, Any],
    conn: Any,
    requests: Sequence[AppendRequest],
    changes: Sequence[StreamChange],
    checking: list[str],
    again: bool = False,
) -> None:
    """In ``conn``'s transaction, before ``changes``: the claims (the absence checks of
    ``changes``, and the new agents of ``requests`` when there are checks or locks to
    take), then the leases, then the heads of the agents of ``requests`` and ``changes``
    (when the changes name any and there are two agents), in agent order. ``checking``
    holds the checks while they alone are claimed (a refusal of one is looked up:
    :func:`.absence.refused_check`). ``again``: the try is run again if it rolls back
    (:func:`.absence.absent_in`)."""
    absent = sorted({c.agent_id for c in changes if c.absent})
    changed = [c for c in changes if not c.absent]
    agents = sorted({c.agent_id for c in changed} | {r.agent_id for r in requests})
    locking = bool(changed) and len(agents) >= 2
    new = sorted({r.agent_id for r in requests if r.expected_seq == 0})
    if new and (absent or locking):
        try:
            async with conn.transaction():  # (a savepoint)
                await absent_in(sql, conn, absent, new, again)
            absent = []
        except psycopg.errors.InsufficientPrivilege:
            # row security refused a claim: the checks claimed again alone (a refusal
            # of one named: refused_check), the new agents not (their appends, after
            # the changes, are refused as they were: a change's refusal named first)
            pass
    if absent:
        checking[:] = absent
        await absent_in(sql, conn, absent, again=again)
        checking.clear()
    if not locking:
        return
    leased = sorted(
        {c.agent_id for c in changed if c.lease is not None}
        | {r.agent_id for r in requests if r.fence is not None}
    )
    if leased:
        await conn.execute(sql["together_leases"], {"agents": leased})
    await conn.execute(sql["rw_many_lock"], {"agents": agents})
