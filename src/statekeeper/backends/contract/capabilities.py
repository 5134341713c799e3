"""Capability (the contract's optional parts), the results Health and LatestRead, and
the declarations an engine sets as it opens (OPENED_FLAGS)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ...records import (
    RawEvent,
    RawSnapshot,
)


class Capability(enum.StrEnum):
    """Optional parts of the backend contract. An engine declares the ones it offers in
    :attr:`Backend.capabilities`; the others raise a typed error when called."""

    #: ``acquire_lease``/``renew_lease``/``release_lease``/``get_lease`` and fenced
    #: appends (also ``supports_leases``); refused with ``LeasesUnsupported``
    LEASES = "leases"
    #: ``idempotency_keys(agent)`` lists the agent's keys as ``(key, first, last)``;
    #: importing them is the core contract (append the same ranges with the same keys)
    KEY_EXPORT = "idempotency key export"
    #: ``rewrite(request)``: replace stored record bytes (key rotation)
    REWRITE = "rewrite"
    #: ``set_ttl(agent, seconds | None)``: agents expire after a time without writes
    TTL = "ttl"
    #: ``drop_all()``: delete everything this backend stored (tests, benchmarks)
    DROP_ALL = "drop_all"
    #: ``schema_version()``: a versioned schema, migrated on open; a newer one is refused
    MIGRATIONS = "migrations"
    #: ``prune(agent, base_seq, drop_snapshots)``: remove history below a snapshot
    #: (retention: keep the last N events, thin snapshots)
    PRUNE = "prune"
    #: the change feed: every append gets a store-wide position committed with it;
    #: ``read_feed``, ``feed_bounds``, ``trim_feed`` and ``wait_feed``
    FEED = "change feed"
    #: ``append_from_base(request, base)``: create a stream compacted at a snapshot
    #: (what a restore of a retained stream writes: its base, then the events after it)
    BASE_IMPORT = "compacted stream import"
    #: ``list_leases(after, limit)``: every agent's stored lease in id order (what
    #: ``audit verify`` compares with the log: a lease granted without its entry)
    LEASE_LIST = "lease listing"
    #: ``expire_keys(agent, before)``: forget idempotency records made before a time
    #: (retention's ``keys_ttl``); without it, records stay as long as their agent
    KEY_EXPIRY = "idempotency key expiry"
    #: ``rename_keys(agent, renames)``: store idempotency records under another form
    #: of their key, atomically (``rekey``: a record made before the store was
    #: encrypted, or under a key being retired, re-recorded under the active key)
    KEY_RENAME = "idempotency key rename"


@dataclass(frozen=True, slots=True)
class Health:
    """Result of :meth:`Backend.health`."""

    ok: bool
    backend: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LatestRead:
    """One agent's latest stored state as :meth:`Backend.read_latest_many` reads it:
    the head seq and head tag, the newest snapshot (None when the agent has none) and
    every event after it up to the head, in seq order."""

    head: int
    tag: bytes | None
    snapshot: RawSnapshot | None
    events: list[RawEvent]


#: the declarations an engine sets as it opens (PostgreSQL learns whether row-level
#: security is on only then): a wrapper of an engine (observed, tiered) reads each one
#: from the engine as it is now, never a copy taken before it opened (a tiered store
#: over PostgreSQL under row-level security kept ``tombstones_by_namespace`` False and
#: wrote no feed tombstone: its deletes reached no read model)
OPENED_FLAGS = (
    "audit_links",
    "reads_audit_log",
    "tombstones_by_namespace",
    "intents_by_namespace",
    "opened_new",
)
