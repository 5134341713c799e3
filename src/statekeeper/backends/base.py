"""The backend contract: the small set of operations every storage engine provides.

A backend stores two things per agent — an append-only stream of encoded events with
gap-free sequence numbers, and snapshots at some of those sequence numbers — plus, on
engines that support them, one lease per agent whose fencing token every append made
under it is checked against — and knows nothing else. Encoding, checksums, caching,
snapshot policy and durability modes live above it, in :mod:`statekeeper.store`, so a
new engine is small. Every backend passes
the shared conformance suite, ``statekeeper.testing.BackendConformance``, unmodified.

Beyond the core, an engine may offer optional :class:`Capability` s. It lists them in
``Backend.capabilities``; every capability it does not list is refused with a typed
error (:class:`~statekeeper.errors.CapabilityUnsupported`, or
:class:`~statekeeper.errors.LeasesUnsupported` for leases) — never ignored — and the
conformance suite checks both: each declared capability works, each undeclared one is
refused. Callers that need one (the tiered backend's cold tier needs key export) check
``supports()`` or call ``require()`` up front.

The contract is assembled here from parts of one job each in
:mod:`statekeeper.backends.contract`: capabilities, the abstract API by area (appends,
reads, copies, rewrites and prune, leases, idempotency records, the feed,
administration), the agent-id check wrapping and the shared request checks. Every
name stays importable from this module.
"""

from __future__ import annotations

import abc
from typing import Any

from ..arguments import MAX_ID_BYTES
from ..errors import CapabilityUnsupported
from .contract.admin import AdminContract
from .contract.appends import AppendsContract
from .contract.capabilities import OPENED_FLAGS, Capability, Health, LatestRead
from .contract.checks import (
    append_outcome,
    check_expiry,
    check_fence,
    check_lease_grant,
    check_prune,
    lease_lost,
    prefix_end,
    unstored_rewrite,
    validate_batch,
)
from .contract.checks import check_prune_at as check_prune_at
from .contract.checks import released_with as released_with
from .contract.copies import CopiesContract
from .contract.feed import FeedContract
from .contract.id_checks import _AGENT_ID_METHODS, _checking_agent_id, _checking_batch
from .contract.id_checks import _failed as _failed
from .contract.keys import KeysContract
from .contract.leases import LeasesContract
from .contract.reads import ReadsContract
from .contract.requests import _MAX_ID as _MAX_ID
from .contract.requests import _TAKES_GUARD as _TAKES_GUARD
from .contract.requests import (
    KeptKeys,
    KeyedRow,
    NextRow,
    StoreRequest,
    next_request,
    takes_from_base_guard,
    takes_rename_guard,
    validate_from_base,
    validate_from_base_guard,
    validate_next,
    validate_rename_guard,
    validate_request,
    validate_rewrite,
    validate_ttl,
)
from .contract.requests import _takes_guard as _takes_guard
from .contract.requests import _validate_lease_change as _validate_lease_change
from .contract.requests import validate_together as validate_together
from .contract.rewrites import RewritesContract

__all__ = [
    "OPENED_FLAGS",
    "Backend",
    "Capability",
    "Health",
    "KeptKeys",
    "KeyedRow",
    "LatestRead",
    "NextRow",
    "StoreRequest",
    "append_outcome",
    "check_expiry",
    "check_fence",
    "check_lease_grant",
    "check_prune",
    "lease_lost",
    "next_request",
    "prefix_end",
    "takes_from_base_guard",
    "takes_rename_guard",
    "unstored_rewrite",
    "validate_batch",
    "validate_from_base",
    "validate_from_base_guard",
    "validate_next",
    "validate_rename_guard",
    "validate_request",
    "validate_rewrite",
    "validate_ttl",
]


class Backend(
    AppendsContract,
    ReadsContract,
    CopiesContract,
    RewritesContract,
    FeedContract,
    KeysContract,
    LeasesContract,
    AdminContract,
    abc.ABC,
):
    """Storage engine contract. All methods are coroutines; implementations must be
    safe to call concurrently from one event loop.

    Agent ids follow one rule on every engine (:func:`statekeeper.arguments.check_agent_id`):
    every method that takes an agent id refuses a bad one with
    :class:`~statekeeper.errors.InvalidAgentId` before touching storage — appends and
    rewrites in :func:`validate_request` / :func:`validate_rewrite`, the other methods
    through a check this class wraps around every engine's implementation of them.
    """

    #: short engine name, e.g. ``"sqlite"``
    name: str = "backend"

    #: True when :meth:`append` honours ``AppendRequest.check_tag`` (compares the
    #: stored head tag with ``expected_tag`` in its compare-and-set); the store then
    #: writes on its cached head without reading it first
    compares_head_tag: bool = False

    #: True when the audit log's appends carry the link of their last entry, sealed
    #: under the audit key (:mod:`statekeeper.governance.audit`), for writers that may
    #: not read the log's entries: PostgreSQL under row-level security
    #: (:mod:`statekeeper.backends.postgres.row_security`), set as the backend opens
    audit_links: bool = False

    #: False when this connection may append to the audit log but not read its entries
    #: (PostgreSQL row-level security, a tenant's role): listing or verifying the log
    #: through it is refused (:class:`~statekeeper.errors.AccessDenied`) rather than
    #: reported empty or truncated. Set as the backend opens
    reads_audit_log: bool = True

    #: True under row-level security whose policy knows the namespaces' feed tombstone
    #: streams (:mod:`statekeeper.store.feed_deletes`); ``intents_by_namespace``: and
    #: their forget intents (:mod:`statekeeper.store.feed_intents`). Set as the backend
    #: opens (PostgreSQL)
    tombstones_by_namespace: bool = False

    intents_by_namespace: bool = False

    #: True when opening the backend created its store (a new SQLite file, empty then):
    #: a store over it takes an agent it has not written, read nor lost from its cache
    #: for a new one, and creates it without reading its head first, the create's
    #: compare-and-set (no head yet; a :class:`~statekeeper.errors.ConflictError`
    #: otherwise) being the check, as a cached head's is: a conflict reads the head and
    #: writes again. Only with :attr:`compares_head_tag`.
    opened_new: bool = False

    #: True when concurrent :meth:`append` calls share commits by themselves (group
    #: commit inside the engine); ``durability="group"`` then adds no queue of its own
    groups_appends: bool = False

    #: how many ``durability="group"`` batches the store may have committing at once
    #: (each on its own connection; an agent's appends still commit in order): 1 for an
    #: engine with one writer, more where commits run in parallel (PostgreSQL's pool)
    batches_in_flight: int = 1

    #: True when :meth:`copy_out` streams a bulk copy (PostgreSQL); a backup asks it
    #: only then (no target file opened for an engine without one)
    copies_out: bool = False

    #: the longest agent id this engine stores, in UTF-8 bytes: :data:`MAX_ID_BYTES`
    #: (the rule of every engine), or less where the engine's own keys cannot hold more
    #: (S3: its 1,024-byte object keys hold the id hex-encoded and a suffix); a longer
    #: valid id is refused with :class:`~statekeeper.errors.InvalidAgentId` before
    #: anything is written. The conformance suite's longest ids are this long.
    max_id_bytes: int = MAX_ID_BYTES

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for method in _AGENT_ID_METHODS:
            fn = cls.__dict__.get(method)
            if fn is not None and not getattr(fn, "__statekeeper_checked__", False):
                setattr(cls, method, _checking_agent_id(fn))
        fn = cls.__dict__.get("append_batch")
        if fn is not None and not getattr(fn, "__statekeeper_checked__", False):
            setattr(cls, "append_batch", _checking_batch(fn))  # noqa: B010

    #: the optional capabilities this engine offers (see :class:`Capability`); every
    #: other one is refused with a typed error. ``LEASES`` is listed iff
    #: ``supports_leases`` is True.
    capabilities: frozenset[Capability] = frozenset()

    @property
    def expires_agents(self) -> bool:
        """True when this instance deletes agents by itself after a while (a TTL is
        set): it can then never be a tier of record."""
        return False

    def supports(self, capability: Capability) -> bool:
        """True when the engine offers ``capability``."""
        return capability in self.capabilities

    def require(self, capability: Capability, why: str = "") -> None:
        """Raise :class:`~statekeeper.errors.CapabilityUnsupported` unless the engine
        offers ``capability`` (``why``: what needed it, for the message)."""
        if capability not in self.capabilities:
            raise CapabilityUnsupported(self.name, capability.value, why)

    #: True when :meth:`append_together` is offered (one atomic commit for several
    #: streams' appends); the governed store then writes a mutation and its audit
    #: entry in the same commit
    appends_together: bool = False

    #: True when :meth:`append_together` also takes lease changes and rewrites
    #: (``StreamChange(lease=...)``, ``StreamChange(rewrite=...)``): leases, key
    #: rotation and schema migrations then commit with their audit entries. An engine
    #: without it refuses such a change (``validate_together(..., engine=self)``)
    changes_leases_and_rewrites: bool = False

    #: True when :meth:`append_from_base` takes a ``guard`` (a check of another
    #: stream's head and tag, :func:`validate_from_base_guard`) made in the same
    #: commit: a tiered store's rehydration copies a compacted agent's base page back
    #: only while its claim still holds. An engine without it refuses a guard
    #: (:class:`~statekeeper.errors.CapabilityUnsupported`, nothing written)
    guards_from_base: bool = False

    #: True when :meth:`rename_keys` takes a ``guard`` (a check of another stream made
    #: in the rename's own atomic step: see :func:`validate_rename_guard`): a tiered
    #: store's key rename is committed only while the agent's cold marker is absent or
    #: its demotion's claim fenced — a demotion's last step then never deletes the
    #: renamed stream. An engine without it refuses a guard
    #: (:class:`~statekeeper.errors.CapabilityUnsupported`, nothing renamed)
    guards_renames: bool = False

    #: True when :meth:`append_together` makes a change's snapshot and prune only at
    #: the head it names (``StreamChange.prune_head`` and ``prune_checksum``, compared in
    #: the commit as :meth:`prune` compares its ``head`` and ``checksum``): a governed
    #: store's compaction then commits with its audit entry. An engine without it (an
    #: ``append_together`` written before those fields, which would prune whichever
    #: stream is there) is refused such a change with
    #: :class:`~statekeeper.errors.CapabilityUnsupported` naming it, nothing written
    #: (``validate_together(..., engine=self)``, and the store before it calls)
    prunes_together_at_head: bool = False

    #: True when :meth:`append_together` takes an absence check
    #: (``StreamChange(agent_id, absent=True)``: the commit is made only while that
    #: stream has no events, checked in the commit): an import's feed tombstones then
    #: cannot follow the events of an agent created since it looked. An engine without
    #: it (an ``append_together`` written before the field, which would ignore it) is
    #: refused such a change with :class:`~statekeeper.errors.CapabilityUnsupported`
    #: (``validate_together(..., engine=self)``), and the store does not send one
    checks_absence_together: bool = False

    #: True when :meth:`rewrite_many` is answered natively (many rewrites in one
    #: transaction); callers rewrite agents one by one, concurrently, otherwise
    rewrites_many: bool = False

    #: True when the engine overrides :meth:`replace_snapshot` (one commit): the store's
    #: settle then calls it; else one ``append_together`` change checked at the head,
    #: where the engine takes one (:mod:`.settle_row`), or no settle at all
    replaces_snapshots: bool = False

    #: seconds a reader waits between polls of the feed when nothing woke it up
    feed_poll_interval: float = 0.05

    #: True when :meth:`read_latest_many` is answered natively (one consistent read of
    #: many agents); the store reads agents one by one otherwise
    reads_latest_many: bool = False

    #: True when :meth:`list_agents_before` is answered natively (an index range read)
    lists_backwards: bool = False

    #: True when :meth:`list_agents_by_write` is answered (an index on the last write)
    lists_by_write: bool = False

    #: True when :meth:`append_together` takes changes with no append (memory, SQLite)
    changes_alone_together: bool = False

    #: True when the engine grants leases and checks fencing tokens on append
    supports_leases: bool = False
