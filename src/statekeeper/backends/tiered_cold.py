"""Is a cold tier's copy of a demoted agent the stream this tiered store demoted?

A demotion writes a marker to the durable tier (``COLD_MARKER + agent_id``, one event
whose JSON body this module reads): the head it demoted (``head``), the times of the
first and last records it demoted (``created``, ``updated``) and, since it was recorded,
a digest of the head record (``last``). :func:`check_demoted_copy` holds the cold copy
to that before anything reads it as the agent — a rehydration, and the in-place reads
of ``verify``, a backup and a read-only store (``show``, ``history``) — so that a copy
altered, cut short, deleted or swapped for another (another store's sharing the cold
tier, another agent's renamed) raises :class:`~statekeeper.errors.IntegrityError`
naming the agent instead of being served, verified or backed up as it.

What each check binds, and what it leaves to the store:

* a marker with a digest: the copy's head record is the demoted one (its checksum and
  payload). The checksum is the record's authenticator and, through its chain link,
  commits to every record before it, which the store checks wherever it opens records
  (a load from its snapshot on, ``verify`` and ``history`` from the first): a record
  altered below the head then fails there, as in the durable tier;
* a marker of an earlier version (no digest, nothing to compare the head record with):
  the copy's first and last records carry the times the demotion kept; another store's
  or another agent's copy (written at other instants) fails, an altered record is
  found by the store's checks above. Without a store key, records are authenticated
  against corruption only (``docs/security.md``): a copy rewritten whole by someone
  who can write the cold tier and keeps the times is not detectable by anyone.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from ..errors import IntegrityError
from ..records import RawEvent
from .base import Backend

__all__ = [
    "check_demoted_copy",
    "head_is_demoted",
    "marker_body",
    "record_digest",
    "same_record",
]

_NOT_OURS = (
    "the cold copy is not the stream this store demoted (altered, or replaced by another"
    " store sharing the cold tier or by another agent's copy)"
)


def record_digest(event: RawEvent) -> str:
    """A digest of what makes a stored record this one: its checksum and payload (its
    time is left out: a tier may keep it less exactly)."""
    return hashlib.sha256(event.checksum + b"\x00" + event.payload).hexdigest()[:32]


def same_record(one: RawEvent, other: RawEvent) -> bool:
    return (one.checksum, one.payload) == (other.checksum, other.payload)


def marker_body(events: list[RawEvent]) -> dict[str, Any] | None:
    """The JSON body of a marker stream's event (None: no marker)."""
    if not events:
        return None
    body = orjson.loads(events[0].payload)
    return body if isinstance(body, dict) else None


def head_is_demoted(held: RawEvent | None, marker: dict[str, Any]) -> bool | None:
    """Is ``held``, the cold copy's head record, the head a demotion that wrote
    ``marker`` (a marker with a digest) demoted — :func:`check_demoted_copy` from a
    batch of head reads? None for a marker of an earlier version (no digest): only
    :func:`check_demoted_copy` can tell."""
    kept = marker.get("last")
    if not isinstance(kept, str) or not kept:
        return None
    return held is not None and held.seq == marker.get("head") and record_digest(held) == kept


def _same_time(stored: float, kept: Any) -> bool:
    try:
        return abs(float(stored) - float(kept)) <= 1e-6
    except (TypeError, ValueError):
        return False


async def check_demoted_copy(
    cold: Backend, agent_id: str, marker: dict[str, Any], what: str = "nothing was rehydrated"
) -> None:
    """:class:`~statekeeper.errors.IntegrityError` unless ``cold`` holds the stream the
    demotion that wrote ``marker`` demoted, whole (see the module documentation);
    ``what`` ends the error's reason (what was not done because of it)."""
    head = int(marker["head"])
    held = await cold.head(agent_id)
    if held != head:
        found = "missing" if held == 0 else f"at seq {held}, not {head}"
        # (a delete removes the cold copy first, then the marker: one cut short between
        # the two — a killed process — leaves exactly this; the delete is to be finished)
        cut = (
            "; a delete of the agent cut short after its cold copy was deleted leaves"
            " this — if it was being deleted, deleting it again finishes the delete"
            if held == 0
            else ""
        )
        raise IntegrityError(
            agent_id,
            head,
            f"the cold copy of a demoted agent is {found} (the demotion's marker says"
            f" {head}): {what}{cut}",
        )
    last = await cold.read(agent_id, head - 1, head)
    kept = marker.get("last")
    if isinstance(kept, str) and kept:
        if not last or record_digest(last[0]) != kept:
            raise IntegrityError(agent_id, head, f"{_NOT_OURS}: {what}")
        return
    # a marker of an earlier version: the times of the records it demoted
    first = await cold.read(agent_id, 0, None, limit=1)
    if (
        not first
        or not last
        or not _same_time(first[0].timestamp, marker.get("created"))
        or not _same_time(last[0].timestamp, marker.get("updated"))
    ):
        raise IntegrityError(
            agent_id,
            head,
            f"{_NOT_OURS} — its first or last record is not of the time the demotion's"
            f" marker (an earlier version's, without a digest) kept: {what}",
        )
