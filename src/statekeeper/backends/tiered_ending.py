"""A rehydration's end announced in the durable tier, so a demotion made since cannot
finish over a cold copy that end deletes (:class:`~statekeeper.backends.tiered.TieredBackend`).

A rehydration ends by deleting the cold copy, then its claim (the marker). The cold
copy's delete is conditional on the cold tier's head record alone — two engines, no one
atomic step — and a copy of a new agent of that id with the same records (deleted and
written again, e.g. restored from a backup) has that same record. Was: a rehydration
that looked at its claim, then was held while the agent was deleted, written again and
demoted (its copy whole), deleted that demotion's copy; the demotion's last step then
deleted the stream — the new agent in no tier, every load an ``IntegrityError``.

Now, where the durable tier commits several streams at once with a check of a stream's
absence (:func:`announces_ends`), the end is announced first: a record of the agent's
*ending* stream (``ENDING + agent_id``), appended only while the marker is still the
rehydration's claim (one commit), deleted after the cold copy's delete. A demotion's
last step commits only while that stream is absent, and only after it saw it absent
and then its cold copy whole. Why that closes the window: the announcement is made
while the claim is the marker, so a demotion that claims the agent since (its marker
a new stream: the claim deleted first) reads the ending stream after it was written;
if it reads it absent, the rehydration's cold delete has landed already (before the
announcement's delete), so the demotion's look at its copy sees it gone; if it reads it
there, it does not make its last step (the agent stays in the durable tier, whole). An
announcement whose process is provably gone, older than ``CLAIM_STALE``, is deleted by
the next demotion (its cold delete can no longer land)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from typing import Any

import orjson

from ..errors import ConflictError
from ..records import AppendRequest, RawEvent, RewriteRequest, StreamChange
from .base import Backend
from .tiered_claims import CLAIM_STALE, COLD_MARKER
from .tiered_owner import IN_FLIGHT, claim_owner, owner_gone

__all__ = [
    "ENDING",
    "announce_end",
    "announces_ends",
    "ending_absent",
    "ending_check",
    "withdraw_end",
]

#: durable-tier ids of the ending streams of rehydrations (``ENDING + agent_id``)
ENDING = "\x01sk-cend/"  # (no longer than COLD_MARKER: the same longest agent id)


def announces_ends(durable: Backend) -> bool:
    """Does ``durable`` commit an append with a check of another stream's head tag, and
    a change with a check of a stream's absence (SQLite, memory, PostgreSQL, Redis not a
    cluster)? Elsewhere the window is left (``docs/backends.md``)."""
    return bool(
        durable.appends_together
        and durable.compares_head_tag
        and durable.checks_absence_together
        and durable.changes_leases_and_rewrites
    )


async def announce_end(
    durable: Backend, agent_id: str, claim: dict[str, Any], now: float
) -> bytes | None:
    """Announce the end of the rehydration whose claim is ``claim`` (the marker's body,
    with ``_seq`` and ``_token``): its token, or None — the marker is no longer that
    claim (a delete of the agent ended it: its cold copy is not this one's to delete),
    or another end is announced."""
    marker_id = COLD_MARKER + agent_id
    token = secrets.token_bytes(16)
    body = orjson.dumps({"claimed": now, "owner": claim_owner()})
    held = RewriteRequest(marker_id, claim["_seq"], bytes.fromhex(claim["_token"]))
    IN_FLIGHT.add(token)
    try:
        await durable.append_together(
            [AppendRequest(ENDING + agent_id, 0, (RawEvent(1, "end", now, body, token),))],
            [StreamChange(marker_id, rewrite=held)],
        )
    except ConflictError:
        IN_FLIGHT.discard(token)
        return None
    except BaseException:
        IN_FLIGHT.discard(token)
        raise
    return token


async def withdraw_end(durable: Backend, agent_id: str, token: bytes) -> None:
    """Delete the announcement ``token`` made (after the cold copy's delete)."""
    try:
        with contextlib.suppress(ConflictError):  # (gone: taken over)
            await durable.delete_agent_at(ENDING + agent_id, 1, token)
    finally:
        IN_FLIGHT.discard(token)


def ending_check(agent_id: str) -> StreamChange:
    """The check a demotion's last step commits with: no end announced."""
    return StreamChange(ENDING + agent_id, absent=True)


async def ending_absent(durable: Backend, agent_id: str, clock: Callable[[], float]) -> bool:
    """Is no rehydration's end of ``agent_id`` announced? One announced by a process
    provably gone, older than ``CLAIM_STALE``, is deleted (conditional on its record)
    and counts as absent."""
    events = await durable.read(ENDING + agent_id, 0, 1)
    if not events:
        return True
    held = events[0]
    try:
        body = orjson.loads(held.payload)
    except orjson.JSONDecodeError:
        return False
    claimed = body.get("claimed") if isinstance(body, dict) else None
    if not isinstance(claimed, int | float) or clock() - claimed < CLAIM_STALE:
        return False
    if not owner_gone(body.get("owner"), held.checksum):
        return False
    try:
        await durable.delete_agent_at(ENDING + agent_id, 1, held.checksum)
    except ConflictError:
        return False
    return True
