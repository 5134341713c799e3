"""Absence checks in a PostgreSQL ``append_together`` (``StreamChange.absent``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from ...errors import AccessDenied, BackendError, ConflictError
from .deletes import refusal
from .rolled_back import RolledBack

if TYPE_CHECKING:
    from .part import PostgresPart

#: claims of an agent at most, each after its row was there at the claim and gone at its
#: head's read (see :func:`absent_in`): a create and delete of it repeated by other
#: writers between the two kept the check from ever ending
CLAIMS = 16


class ClaimAgain(RolledBack):
    """An absence check must claim an agent again while it holds other claims or locks
    (see :func:`absent_in`): the try is rolled back whole and run again
    (:func:`.rolled_back.run_again`). Internal; never reaches a caller."""


async def absent_in(
    sql: Mapping[str, Any],
    conn: Any,
    agent_ids: Sequence[str],
    also: Sequence[str] = (),
    again: bool = False,
) -> None:
    """The checks of ``agent_ids`` in ``conn``'s transaction, a few statements for all
    of them (was: two an agent, record_restored of 5,000 agents ~4x slower): the
    agents' head rows claimed at 0 in agent order (``absent_claim``; was the order
    given: two checks of ``p, q`` and ``q, p`` deadlocked), with those of ``also`` (the
    new agents the transaction creates, claimed with the checks and not checked:
    :mod:`.together_locks`), and those claimed removed again (``absent_release``), so a
    creation of one racing the transaction is either seen — committed before the
    claim, or waited for by it — and raises :class:`ConflictError` (the caller rolls
    back), or waits for the transaction's end, its events after what the transaction
    wrote. The head of an
    agent whose row was there is read ``FOR UPDATE`` (``absent_heads``): one of
    events conflicts; one deleted between the claim and that read is claimed again
    (was, one agent at a time: passed holding nothing, and a creation committed
    meanwhile came before the commit). A plain read would miss a creation still to
    commit, whose events then come before the transaction's in the feed. An agent
    claimed :data:`CLAIMS` times so raises :class:`BackendError` naming it (was: claimed
    again for as long as other writers created and deleted it).

    A claim again while the transaction holds others, or the lock of a head row at 0
    (one a failed write left, which ``absent_heads`` locked: taken over by a creation
    after its claims, as a head), broke the one order of claims before heads: a
    creation of the agent claimed meanwhile, then waiting on that lock, and this
    transaction waiting on its claim, deadlocked
    (``test_postgres_absence_reclaim_order.py``). So, given ``again`` (a try
    :func:`.rolled_back.run_again` runs again), it raises :class:`ClaimAgain` instead:
    the try rolled back holds nothing, and the next claims everything in one order.
    (Without ``again``: the last try, or a caller that holds other locks before its
    check anyway, claims again in place, as before.)"""
    todo = sorted(set(agent_ids))
    claiming = sorted(set(todo) | set(also))
    held = False
    for _ in range(CLAIMS):
        cur = await conn.execute(sql["absent_claim"], (claiming,))
        claimed = {row[0] for row in await cur.fetchall()}
        if claimed:
            await conn.execute(sql["absent_release"], (list(claimed),))
            held = True
        there = [a for a in todo if a not in claimed]
        if not there:
            return
        cur = await conn.execute(sql["absent_heads"], (there,))
        heads = {row[0]: int(row[1]) for row in await cur.fetchall()}
        for agent_id in there:
            if heads.get(agent_id):
                raise ConflictError(agent_id, 0, heads[agent_id])
        held = held or bool(heads)  # (head rows at 0, locked)
        todo = [a for a in there if a not in heads]  # deleted meanwhile: claim again
        if not todo:
            return
        if held and again:
            raise ClaimAgain(f"the absence check of agent {todo[0]!r} claims it again")
        claiming = todo
    raise BackendError(
        f"postgresql: the absence check of agent {todo[0]!r} gave up after {CLAIMS} "
        "claims: each time its head row was there when claimed and gone when read (the "
        "agent created and deleted again by other writers meanwhile); nothing was written"
    )


async def refused_check(backend: PostgresPart, agent_ids: Sequence[str]) -> AccessDenied | None:
    """(An absence check of ``agent_ids`` failed for a privilege.) The AccessDenied of
    the first of them row-level security refuses the role (its claim is a write of the
    agent's head row), looked up on a connection of its own (the check's transaction
    is aborted); None when none is refused or it cannot be told. Was: the refusal
    named the agent of the transaction's first append, one the role may write."""
    try:
        async with backend._connection() as conn:
            for agent_id in dict.fromkeys(agent_ids):
                if (refused := await refusal(backend, conn, agent_id, "append")) is not None:
                    return refused
    except psycopg.Error:
        return None
    return None
