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

(Over 600 lines for a reason: the contract is one abstract class whose docstrings are
the specification every engine and the conformance suite follow, plus the few
request checks every engine shares; splitting it would scatter the specification.)
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ..arguments import MAX_ID_BYTES, check_name, check_stored_id
from ..errors import (
    CapabilityUnsupported,
    ConfigurationError,
    ConflictError,
    InvalidAgentId,
    InvalidArgument,
    LeaseHeld,
    LeaseLost,
    LeasesUnsupported,
    RewriteBelowPrunedBase,
    StoreClosed,
)
from ..records import (
    AgentInfo,
    AppendRequest,
    AppendResult,
    EventRow,
    EventType,
    FeedRecord,
    Fence,
    LeaseInfo,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
    StreamExport,
    StreamRows,
    event_rows,
)

if TYPE_CHECKING:
    from .sqlite.pages import PageSnapshot

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


#: idempotency records of appends a prune removed: ``(key, first_seq, last_seq)``
KeptKeys: TypeAlias = Sequence[tuple[str, int, int]]


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


#: the contract's methods whose first argument is an agent id (see Backend.__init_subclass__)
_AGENT_ID_METHODS = (
    "lookup_key",
    "head",
    "head_tag",
    "read",
    "seq_at",
    "save_snapshot",
    "latest_snapshot",
    "read_latest",
    "read_state",
    "read_state_rows",
    "delete_agent",
    "delete_agent_at",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "release_lease_again",
    "get_lease",
    "next_lease_token",
    "idempotency_keys",
    "rename_keys",
    "set_ttl",
    "prune",
    "replace_snapshot",
)


def _checking_agent_id(
    fn: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    # a plain function handing back the engine's own coroutine: no extra coroutine per
    # call on the hot path; a bad id still fails when awaited, like any other error
    @functools.wraps(fn)
    def checked(self: Backend, agent_id: str, *args: Any, **kwargs: Any) -> Awaitable[Any]:
        try:
            check_stored_id(agent_id)
        except InvalidAgentId as exc:
            return _failed(exc)
        return fn(self, agent_id, *args, **kwargs)

    checked.__statekeeper_checked__ = True  # type: ignore[attr-defined]
    return checked


async def _failed(exc: BaseException) -> Any:
    raise exc


def _checking_batch(
    fn: Callable[..., Awaitable[list[AppendResult | BaseException]]],
) -> Callable[..., Awaitable[list[AppendResult | BaseException]]]:
    """``append_batch``: a request with a bad agent id fails on its own (its error in
    its place of the results); the engine sees only the others."""

    @functools.wraps(fn)
    async def checked(
        self: Backend, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        refused: dict[int, BaseException] = {}
        for index, request in enumerate(requests):
            try:
                check_stored_id(request.agent_id)
            except InvalidAgentId as exc:
                refused[index] = exc
        if not refused:
            return await fn(self, requests)
        rest = [r for i, r in enumerate(requests) if i not in refused]
        done = iter(await fn(self, rest))
        return [refused[i] if i in refused else next(done) for i in range(len(requests))]

    checked.__statekeeper_checked__ = True  # type: ignore[attr-defined]
    return checked


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


class Backend(abc.ABC):
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

    @abc.abstractmethod
    async def append(self, request: AppendRequest) -> AppendResult:
        """Atomically append ``request.events`` (and its snapshot) if the head matches.

        Raises :class:`~statekeeper.errors.ConflictError` (nothing written) when the
        stored head is not ``request.expected_seq`` and the idempotency key is new.
        """

    async def append_batch(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | BaseException]:
        """Apply several appends, sharing one commit where the engine allows it.

        Each request succeeds or fails on its own (a conflict in one does not undo the
        others); the result list holds an :class:`AppendResult` or the exception for
        each request, in order. The default runs them one by one.
        """
        results: list[AppendResult | BaseException] = []
        for request in requests:
            try:
                results.append(await self.append(request))
            except StoreClosed:
                raise  # not a failure of one request: the whole backend is gone
            except Exception as exc:
                results.append(exc)
        return results

    async def append_next(
        self,
        agent_id: str,
        seq: int,
        timestamp: float,
        payload: bytes,
        checksum: bytes,
        head_tag: bytes | None,
        expected_tag: bytes | None,
        snapshot: RawSnapshot | None = None,
    ) -> None:
        """Append one ``patch`` event numbered ``seq`` to a head at ``seq - 1`` — the
        store's common save, in plain arguments: exactly :meth:`append` of
        ``AppendRequest(agent_id, seq - 1, (RawEvent(seq, "patch", timestamp, payload,
        checksum),), snapshot, head_tag=head_tag, expected_tag=expected_tag,
        check_tag=compares_head_tag)`` (which is what this default does), without
        the request objects. :class:`~statekeeper.errors.ConflictError`, nothing
        written, when the head moved (or, on an engine that compares head tags, carries
        another tag than ``expected_tag``); ``snapshot``, when given, sits on ``seq``.
        An engine overrides it where building the records costs (SQLite, memory)."""
        validate_next(agent_id, seq, snapshot)
        row = (agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot)
        await self.append(next_request(row, self.compares_head_tag))

    def commit_next(self, row: NextRow) -> bool:
        """:meth:`append_next` of ``row`` (its arguments, as :meth:`join_next` takes
        them) made now, as a plain call, when the engine can commit it on this thread
        without waiting: True once committed; False, with nothing done, when it cannot
        (the caller then awaits :meth:`append_next`, which handles every case: the
        default); the refusal raised as :meth:`append_next` raises it. The arguments
        are not checked (the store calls it only with a row it built on a cached
        record, as :meth:`append_next` would be called). For the store's common save
        with ``durability="sync"``: no coroutine of its own, none of
        :meth:`append_next` (docs/benchmarks.md, "seqfoot")."""
        return False

    def commit_keyed(self, row: KeyedRow) -> AppendResult | None:
        """The event ``row`` (:data:`KeyedRow`: of type ``event_type``, numbered ``seq`` > 1)
        appended now, as a plain call, to a head at ``seq - 1`` carrying
        ``expected_tag``, with the idempotency key ``key`` claimed in the same commit —
        :meth:`append` of that one-event request with ``check_tag``, when the engine
        can commit it on this thread without waiting: its result (a duplicate's, nothing
        written, when ``key`` was stored before); the
        :class:`~statekeeper.errors.ConflictError` raised, nothing written, when the
        head moved. None, with nothing done, when it cannot (the caller then makes the
        append by :meth:`append`, which handles every case): the default. The
        arguments are not checked (the store's lean append, ``store/lean.py``, builds
        them on a cached record)."""
        return None

    def join_next(self, row: NextRow) -> Awaitable[BaseException | None] | None:
        """:meth:`append_next` of ``row`` for an engine that groups appends
        (:attr:`groups_appends`), as a plain call when a commit of the running event loop
        is already filling up or in flight: the awaitable of the append's place in that
        commit (it gives None, or the refusal to raise — a
        :class:`~statekeeper.errors.ConflictError` —, without raising it). None, with
        nothing done, when the engine has no such commit open (the caller then awaits
        :meth:`append_next`): the default. The group committer's common save waits
        for it without a coroutine of its own and of :meth:`append_next`. The arguments
        are not checked, as :meth:`commit_next` does not check them (the store calls it
        only with a row it built on a cached record)."""
        return None

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

    async def append_together(
        self, requests: Sequence[AppendRequest], changes: Sequence[StreamChange] = ()
    ) -> list[AppendResult | None]:
        """Append every request (distinct streams) in ONE atomic commit: all of them
        or none, also across a crash. ``changes`` (other streams: deletes, snapshots;
        see :class:`~statekeeper.records.StreamChange`) are made in the same commit,
        checked before anything is written (a failed check raises
        :class:`~statekeeper.errors.ConflictError` naming its stream; nothing written).

        The first request that fails raises its error (a
        :class:`~statekeeper.errors.ConflictError` names its ``agent_id``) and nothing
        is written. A request whose idempotency key was already used writes nothing
        and makes the whole call write nothing: its result says ``duplicate=True``,
        the others' results are None. Engines without it
        (``appends_together`` false) raise
        :class:`~statekeeper.errors.CapabilityUnsupported`.
        """
        raise CapabilityUnsupported(self.name, "append_together", "an atomic multi-stream append")

    @abc.abstractmethod
    async def lookup_key(self, agent_id: str, key: str) -> AppendResult | None:
        """The result of the append that used idempotency ``key``, with
        ``duplicate=True``; None if no append of the agent used it."""

    @abc.abstractmethod
    async def head(self, agent_id: str) -> int:
        """The last seq of the agent's stream (0 when the agent has no stream)."""

    async def head_tag(self, agent_id: str) -> tuple[int, bytes | None]:
        """``(head seq, head tag)``: the stream head and the tag stored with it by the
        append (or rewrite) that set it — read together, in one consistent read.

        ``(0, None)`` when the agent has no stream; the tag is None when the head was
        written without one. The tag is opaque bytes made by the codec (the
        authenticated stream head, see :mod:`statekeeper.codec.pipeline`).

        The default returns no tag: an engine that does not store tags serves stores
        without a key only (a store with a key refuses a head it cannot authenticate).
        """
        return await self.head(agent_id), None

    async def rewrite(self, request: RewriteRequest) -> None:
        """Atomically replace the bytes of existing records (see :class:`RewriteRequest`):
        only if the head is still ``(expected_seq, expected_tag)``, else
        :class:`~statekeeper.errors.ConflictError` and nothing is written. An event
        not stored (pruned) raises :func:`unstored_rewrite`'s ConfigurationError, a
        snapshot below the stream's base :mod:`.pruned_snapshots`' (the one AT the base,
        which a prune keeps, rewrites), nothing written.

        Used by key rotation (``statekeeper rekey``). Capability ``REWRITE``; the
        default refuses.
        """
        raise CapabilityUnsupported(self.name, Capability.REWRITE.value)

    #: True when :meth:`rewrite_many` is answered natively (many rewrites in one
    #: transaction); callers rewrite agents one by one, concurrently, otherwise
    rewrites_many: bool = False

    async def rewrite_many(self, requests: Sequence[RewriteRequest]) -> list[bool]:
        """:meth:`rewrite` of many agents (a page of a schema migration): for each
        request, in order, True when it was applied and False when its head was not the
        expected one (nothing of it written). Each request is atomic on its own; an
        engine that sets :attr:`rewrites_many` commits them together (SQLite: one
        transaction). A malformed request (:func:`validate_rewrite`) is refused before
        any of them is written. A request naming an event not stored (pruned) or a
        snapshot below the base raises as :meth:`rewrite` does, nothing of it written (an
        engine that sets :attr:`rewrites_many` writes none of a page of distinct agents;
        the default applies them in turn: the requests before it may be)."""
        for request in requests:
            validate_rewrite(request)
        done: list[bool] = []
        for request in requests:
            try:
                await self.rewrite(request)
            except ConflictError:
                done.append(False)
            else:
                done.append(True)
        return done

    async def export_streams(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamExport]:
        """For each ``(agent_id, after_seq, to_seq)``: a :class:`StreamExport` of that
        slice (what a backup copies). The default reads each agent on its own; engines
        override it with a few statements per batch (SQLite).

        Each export is consistent on its own only as far as the engine's reads are:
        a caller checks that the events run gap-free up to ``to_seq``.
        """
        out: list[StreamExport] = []
        keyed = self.supports(Capability.KEY_EXPORT)
        for agent_id, after_seq, to_seq in ranges:
            events = await self.read(agent_id, max(after_seq - 1, 0), to_seq)
            snap = await self.latest_snapshot(agent_id, to_seq) if to_seq > 0 else None
            head, tag = await self.head_tag(agent_id)
            keys = await self.idempotency_keys(agent_id) if keyed else []
            out.append(StreamExport(agent_id, head, tag, events, snap, keys))
        return out

    async def copy_to_file(self, dest: str, prefix: str = "") -> bool:
        """Write a consistent point-in-time copy of the streams (as stored) whose ids
        start with ``prefix`` (``"ns/"``; every stream if empty) into the new file
        ``dest``, as a SQLite file of the SQLite backend's schema, without reading its
        rows into Python. False (nothing written) when the engine cannot (the
        default): a backup then reads rows (:meth:`export_rows`)."""
        return False

    async def import_image(
        self, image: str, expected: tuple[int, int, int], *, raise_floor: bool = False
    ) -> bool:
        """Write the streams of ``image`` (a SQLite store file a restore decrypted and
        checked: every record opened with this store's keys, every head tag its own)
        into this store, which holds no stream yet, as the engine's own bulk copy (no
        row read into Python, :mod:`~.sqlite_import`); ``expected`` is what the restore
        checked (agents, events, snapshots). False, nothing written, when the engine
        cannot (the default) or the store holds a stream: the restore then appends the
        records one stream at a time. ``raise_floor``: the change feed's floor raised
        through the first event of each stream compacted by retention in the same
        write, as :meth:`append_from_base` does for one."""
        return False

    async def page_snapshot(self, prefix: str = "") -> PageSnapshot | None:
        """An open point-in-time image of the store's file, read as pages, when the
        engine keeps its streams in one SQLite file and ``prefix`` is empty (the whole
        store): see :mod:`~.sqlite_pages` (the caller closes it). None (the default):
        a backup copies the streams instead (:meth:`copy_to_file`, :meth:`copy_out`,
        or rows)."""
        return None

    async def copy_out(self, prefix: str, write: Callable[[bytes], None]) -> dict[str, Any] | None:
        """Stream a consistent point-in-time copy of the streams (as stored) whose ids
        start with ``prefix`` (``"ns/"``; every stream if empty) to ``write``, as the
        engine's own bulk export (PostgreSQL: ``COPY ... TO STDOUT (FORMAT binary)``
        of the stream tables under one ``REPEATABLE READ`` snapshot, see
        :mod:`.postgres.export`), without reading its rows into Python; returns what
        the backup's manifest needs (``tables``: each section's name and size,
        ``heads``: ``(agent, head seq, head checksum)`` in id order, ``events``,
        ``snapshots``, ``compacted``: as
        :func:`~.sqlite_export.compacted_streams`), read in the same snapshot. None
        (nothing written) when the engine cannot (the default)."""
        return None

    def in_place(self) -> contextlib.AbstractContextManager[None]:
        """Within it, this task's reads leave every agent where it is stored: a tiered
        store answers a demoted agent from its cold tier instead of bringing it back
        (what ``verify`` and a backup need: reading is not using). The engines that
        keep an agent in one place have nothing to change (the default)."""
        return contextlib.nullcontext()

    async def export_rows(self, ranges: Sequence[tuple[str, int, int]]) -> list[StreamRows]:
        """:meth:`export_streams` with the records as plain tuples (what a backup
        packs). The default converts :meth:`export_streams`; SQLite reads its rows
        straight into them (one range scan per table for a page of whole streams)."""
        return [
            StreamRows(
                e.agent_id,
                e.head,
                bytes(e.head_tag) if e.head_tag is not None else None,
                [
                    (r.seq, r.type, r.timestamp, bytes(r.payload), bytes(r.checksum))
                    for r in e.events
                ],
                (
                    (
                        e.snapshot.seq,
                        e.snapshot.timestamp,
                        bytes(e.snapshot.payload),
                        bytes(e.snapshot.checksum),
                    )
                    if e.snapshot is not None
                    else None
                ),
                list(e.keys),
            )
            for e in await self.export_streams(ranges)
        ]

    # -- optional capabilities (see Capability); the defaults refuse -----------------

    async def prune(
        self,
        agent_id: str,
        base_seq: int,
        drop_snapshots: Sequence[int] = (),
        head: int | None = None,
        checksum: bytes | None = None,
    ) -> None:
        """Remove history, atomically: with ``base_seq > 0``, every event with seq
        ``<= base_seq`` and every snapshot below ``base_seq`` (the snapshot at
        ``base_seq`` becomes the stream's base); and the snapshots at the seqs of
        ``drop_snapshots``. The head,
        its tag, the events after ``base_seq`` and every idempotency record (also of
        the events removed: a retry still finds its append) are untouched.

        Refused with :class:`~statekeeper.errors.ConfigurationError`, nothing removed,
        unless ``0 <= base_seq < head`` and (for ``base_seq > 0``) a snapshot is stored at
        ``base_seq``, which ``drop_snapshots`` may not name; nor may it name the stream's
        current base (the seq before its first stored event, after an earlier prune) when
        this prune keeps it (``base_seq`` at or below it, 0 included): its events are
        gone, the snapshot is the only record of the state there. That is checked in the
        engine's atomic step — another process may have compacted the stream since the
        caller looked — and the error names the agent and the seq. Capability ``PRUNE``
        (retention); the default refuses.

        With ``head`` (the stream's head as the caller planned the prune on it) and
        ``checksum`` (that head event's stored checksum: the head record's identity, as
        :meth:`delete_agent_at` takes it), checked in the same atomic step:
        :class:`~statekeeper.errors.ConflictError`, nothing removed, when the head is
        another (``current_seq``: the stored one) or its event another record (a stream
        deleted and written again up to the same seq by another process since the plan:
        ``current_seq == head``) — its history is never cut by a plan made on the
        stream before it. An engine's override written before these arguments is
        refused by the store (:func:`~statekeeper.store.conditional.prune_at`) with
        :class:`~statekeeper.errors.CapabilityUnsupported` naming it.
        """
        raise CapabilityUnsupported(self.name, Capability.PRUNE.value)

    #: True when the engine overrides :meth:`replace_snapshot` (one commit): the store's
    #: settle then calls it; else it makes two commits of its own
    replaces_snapshots: bool = False

    async def replace_snapshot(
        self,
        agent_id: str,
        snapshot: RawSnapshot,
        drop_seq: int | None,
        head: int,
        checksum: bytes | None,
    ) -> bool:
        """Store ``snapshot`` (at ``head``, the stream's head) and remove the snapshot at
        ``drop_seq`` (None: none) in one commit — a settle (:mod:`statekeeper.store.settle`).
        Only while the head is ``head`` and its event's stored checksum ``checksum``
        (given): else :class:`~statekeeper.errors.ConflictError`, nothing written. The
        removal is left out, the snapshot still stored, when ``drop_seq`` is the
        stream's base (compacted to it meanwhile) or the engine's prune refuses it:
        True when it was removed. Offered by an engine that overrides it and sets
        :attr:`replaces_snapshots` (SQLite); the default refuses with
        :class:`~statekeeper.errors.CapabilityUnsupported`, nothing written (a settle
        on such an engine makes two commits of its own). Was: two commits here, never
        called by the store — the snapshot stored with no head check (a head moved
        since: no ConflictError, the row written), and a prune override older than its
        head arguments raised a raw TypeError."""
        check_stored_id(agent_id)  # (a bad id is InvalidAgentId first, as on every engine)
        raise CapabilityUnsupported(
            self.name, "replace_snapshot", "a snapshot stored and one removed in one commit"
        )

    async def stream_bases(self, agent_ids: Sequence[str]) -> list[int]:
        """Each agent's base: the seq before its first stored event (0 for a whole
        stream, or no agent; more after :meth:`prune`). An incremental backup reads
        it for every agent to tell a compaction since its parent. The default reads
        one event per agent; SQLite answers a page of agents in one statement."""

        async def one(agent_id: str) -> int:
            first = await self.read(agent_id, 0, None, limit=1)
            return first[0].seq - 1 if first else 0

        return list(await asyncio.gather(*(one(a) for a in agent_ids)))

    async def append_from_base(
        self,
        request: AppendRequest,
        base: RawSnapshot,
        kept_keys: KeptKeys = (),
        *,
        raise_floor: bool = False,
        guard: StreamChange | None = None,
    ) -> AppendResult:
        """Create ``request.agent_id`` as a stream compacted at ``base.seq`` — what
        :meth:`prune` leaves: the snapshot ``base`` is its base, no event at or below it
        — with ``request.events`` (seqs ``base.seq + 1`` onward; ``expected_seq`` is
        ``base.seq``) after it, in ONE atomic write (idempotency key, head tag and a
        later snapshot as :meth:`append`), with ``kept_keys`` — ``(key, first_seq,
        last_seq)``: the idempotency records :meth:`prune` keeps of the appends it
        removed, each range at or below ``base.seq``, and at most one of an append it
        cut in two (``first_seq <= base.seq < last_seq``, its events after the base the
        first of ``request.events``, which then carries no key of its own) — in the
        same write, stored as given. A restore of a backup of a retained stream writes
        it so.

        ``raise_floor`` (an engine with a change feed): the feed's floor is raised
        through the position of the first event written (in the agent's shard), in
        the SAME atomic write — the stream enters the feed without its history, so a
        subscriber behind it must get :class:`~statekeeper.errors.FeedPositionCompacted`
        (rebuild from the states), never its kept events folded onto nothing. Raised
        after the write instead (a second step), a subscriber that read the feed in
        between delivered them and moved past the floor, silently
        (:func:`~statekeeper.store.feed_retention.from_base_floored`).
        ``guard`` (an engine with :attr:`guards_from_base`; see
        :func:`validate_from_base_guard`): a check of another stream, its head still
        ``guard.rewrite``'s ``(expected_seq, expected_tag)``, made in the same atomic
        write (its ``head_tag``, if any, stored there too), else
        :class:`~statekeeper.errors.ConflictError` naming that stream and nothing
        written.

        :class:`~statekeeper.errors.ConflictError` (nothing written) when the agent
        exists. Capability ``BASE_IMPORT``; the default refuses.
        """
        raise CapabilityUnsupported(self.name, Capability.BASE_IMPORT.value)

    # The change feed (Capability.FEED). Every event appended gets a *position*: an
    # integer, store-wide, committed atomically with the append, greater than every
    # position committed before it (gaps are allowed: aborted appends, deleted agents,
    # trimmed ranges). ``read_feed`` returns only positions no append still in flight
    # can come before (its *safe frontier*), so a reader that resumes after the last
    # position it saw never skips an event that commits later with a smaller position.

    #: seconds a reader waits between polls of the feed when nothing woke it up
    feed_poll_interval: float = 0.05

    async def read_feed(self, after: int = 0, limit: int = 500) -> list[FeedRecord]:
        """Feed records with ``position > after``, in position order, at most ``limit``,
        none beyond the safe frontier. Records of deleted agents are gone (gaps).
        Capability ``FEED``."""
        raise CapabilityUnsupported(self.name, Capability.FEED.value)

    async def read_feed_page(
        self, after: int = 0, limit: int = 500
    ) -> tuple[list[FeedRecord], str | None]:
        """:meth:`read_feed`, and the feed's id (:meth:`feed_id`) as it stood when the
        page was read or later: a page holding a position of a renewed feed (a restore
        renews it before its first write) always comes with the new id, so a live
        subscription is told (``FeedChanged``) instead of delivering another numbering.
        The id is None when the page is empty (nothing to check) or the engine keeps
        none. Engines read it with the page (SQLite, PostgreSQL: the same statement;
        Redis: the same pipeline; memory); this default reads it after the page."""
        page = await self.read_feed(after, limit)
        return page, (await self.feed_id() if page else None)

    async def feed_bounds(self) -> tuple[int, int]:
        """``(floor, head)``: positions ``<= floor`` were trimmed away (0 when nothing
        was), ``head`` is the highest position within the safe frontier (0 when
        empty). Capability ``FEED``."""
        raise CapabilityUnsupported(self.name, Capability.FEED.value)

    async def trim_feed(self, through: int) -> int:
        """Forget feed positions ``<= through`` (the events themselves stay, readable
        per agent); the floor becomes ``through``. Returns how many records were
        dropped. Capability ``FEED``."""
        raise CapabilityUnsupported(self.name, Capability.FEED.value)

    async def feed_id(self) -> str | None:
        """The id of this store's change feed: 16 hex digits, made (durably) by the
        first call on a store that has none, kept across restarts; None on an engine
        that keeps none (this default: cursors are then not checked). A cursor carries
        it, and a cursor of another feed is refused
        (:class:`~statekeeper.errors.FeedChanged`; :mod:`statekeeper.store.feed_cursor`)."""
        return None

    async def renew_feed_id(self) -> str | None:
        """Give the feed a fresh id (after its events were numbered anew: a restore
        writes them again), durably; returns it. Every cursor taken before is refused
        from then on. None where the engine keeps none (this default)."""
        return None

    async def feed_position(self, agent_id: str, seq: int) -> int | None:
        """The feed position of ``agent_id``'s event ``seq`` (in the agent's shard's feed
        on a sharded store), or None when it has none (trimmed away, not stored) or the
        engine cannot say. Retention asks it before removing events, to raise the
        feed's floor over them (:mod:`statekeeper.store.feed_retention`): a subscriber
        behind them is told (``FeedPositionCompacted``) instead of passing over them.
        The default: None (the feed's floor is then left as it is)."""
        return None

    async def feed_positions(self, wanted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """:meth:`feed_position` of many ``(agent_id, seq)`` events at once: those with a
        position, by pair. Engines whose feed has no index by agent (SQLite, Redis) read
        the feed back from the head ONCE for all of them (retention asks it for a page of
        agents: one scan, not one per old agent). The default asks each in turn."""
        found: dict[tuple[str, int], int] = {}
        for agent_id, seq in wanted:
            position = await self.feed_position(agent_id, seq)
            if position is not None:
                found[(agent_id, seq)] = position
        return found

    async def wait_feed(self, after: int, max_wait: float) -> None:
        """Return when a position ``> after`` may have been committed, or after at
        most ``max_wait`` seconds: a wake-up hint (a reader re-reads ``read_feed``
        either way). The default sleeps ``min(max_wait, feed_poll_interval)``;
        engines with notifications return as soon as one arrives."""
        if Capability.FEED not in self.capabilities:
            raise CapabilityUnsupported(self.name, Capability.FEED.value)
        await asyncio.sleep(min(max_wait, self.feed_poll_interval))

    async def orphaned_events(self) -> list[tuple[str, int, int, int]] | None:
        """Stored events no head row accounts for — of an agent with no head row, or
        above its head (left by a hand edit or a damaged copy): invisible to every
        read and listing. One ``(agent_id, first_seq, last_seq, count)`` per agent, in
        id order; ``StateStore.verify`` of the whole store names them. None: this engine
        cannot tell (the default; SQLite and PostgreSQL answer with one scan; Redis
        names the agents its index does not list, which no listing sees either)."""
        return None

    async def unlisted_agents(self) -> list[str]:
        """The agents this engine stores (readable by id) that its listings do not
        show, in id order: Redis's taken off its agent index (by hand); a backup and an
        export copy them with the listed ones. Empty where a listing reads the stored
        streams themselves (the default)."""
        return []

    async def idempotency_keys(self, agent_id: str) -> list[tuple[str, int, int]]:
        """Every idempotency key of the agent as ``(key, first_seq, last_seq)``, in
        ``first_seq`` order (empty for an unknown agent). Capability ``KEY_EXPORT``."""
        raise CapabilityUnsupported(self.name, Capability.KEY_EXPORT.value)

    async def rename_keys(
        self,
        agent_id: str,
        renames: Sequence[tuple[str, str]],
        *,
        guard: StreamChange | None = None,
    ) -> int:
        """For each ``(old, new)`` of ``renames``: the agent's idempotency record stored
        as ``old`` is stored as ``new`` instead (its range and time kept), in ONE atomic
        step for all of them — after a crash, each record is under one of its two forms,
        never neither (a retry of its append is never stored again). An ``old`` not
        stored is passed over; when ``new`` is stored already, ``old`` is only dropped.
        Returns how many records were renamed. Capability ``KEY_RENAME`` (``rekey``:
        see :mod:`statekeeper.security.rekey_keys`).

        ``guard`` (an engine with :attr:`guards_renames`; see
        :func:`validate_rename_guard`): a check of another stream made in the same
        atomic step — its absence, or its head still ``guard.rewrite``'s
        ``(expected_seq, expected_tag)`` (its ``head_tag``, if any, stored there
        too) — else :class:`~statekeeper.errors.ConflictError` naming that stream and
        nothing renamed."""
        raise CapabilityUnsupported(self.name, Capability.KEY_RENAME.value)

    async def expire_keys(
        self, agent_id: str | None, before: float, *, count_only: bool = False
    ) -> int:
        """Forget the idempotency records of ``agent_id`` (of every agent when None)
        made before ``before`` (epoch seconds), in one atomic step; how many were
        forgotten. A record's time (``created_at``, epoch seconds) is the timestamp of
        the first event of the append that made it (the store's clock at the save), so
        a record copied with its events (a restore, a tier move) keeps it; a record
        stored without its append (the kept records of a compacted stream's import,
        :meth:`append_from_base`) has the time it was stored. Events, snapshots and the
        head are untouched: only a retry of an expired append is no longer recognised
        (it is stored again). A durable step's record (a key starting with
        :data:`~statekeeper.records.STEP_KEY_PREFIX`, ``"step:"``) is never forgotten:
        it is what makes the step run once, and a retry of the step after its record
        was forgotten would run its side effect again; it goes with the agent. With
        ``count_only``, nothing is forgotten: how many would be (a dry run).
        Capability ``KEY_EXPIRY``; the default refuses."""
        raise CapabilityUnsupported(self.name, Capability.KEY_EXPIRY.value)

    async def set_ttl(self, agent_id: str, ttl: float | None) -> bool:
        """Let the agent expire ``ttl`` seconds after its last write (None: never).
        False when the agent does not exist. Capability ``TTL``."""
        raise CapabilityUnsupported(self.name, Capability.TTL.value)

    async def hold_keys(self, pattern: str, held: bool) -> int:
        """Keep the agents ``pattern`` covers (an agent id or ``NAMESPACE/*``) from
        expiring by the engine's own TTL while a legal hold on it is ``held``; released,
        their TTL applies again. Returns how many stored agents it covers. An engine
        without a TTL (capability ``TTL``) expires nothing by itself: nothing to do, 0.
        Called by :mod:`statekeeper.governance.holds` as holds are placed and released."""
        return 0

    async def drop_all(self) -> int | None:
        """Delete everything this backend stored (tests, benchmarks; irreversible).
        Capability ``DROP_ALL``."""
        raise CapabilityUnsupported(self.name, Capability.DROP_ALL.value)

    async def schema_version(self) -> int:
        """The version of the stored schema (migrated up to the installed
        statekeeper's on open). Capability ``MIGRATIONS``."""
        raise CapabilityUnsupported(self.name, Capability.MIGRATIONS.value)

    # Store-level markers: named flags the engine keeps durably for the whole store,
    # set once and never cleared (but by ``drop_all``). ``"encrypted"``: the store holds
    # records encrypted with a key (:mod:`statekeeper.store.keyguard`). An engine that
    # keeps none answers None, and the caller falls back on what the records show.

    async def read_marker(self, name: str) -> bool | None:
        """Whether the store-level marker ``name`` is set: True or False on an engine
        that keeps markers; None on one that keeps none (this default)."""
        return None

    async def set_marker(self, name: str) -> None:
        """Set the store-level marker ``name``, durably (committed when this returns).
        Nothing on an engine that keeps none (this default)."""
        return None

    @abc.abstractmethod
    async def read(
        self,
        agent_id: str,
        after_seq: int = 0,
        to_seq: int | None = None,
        limit: int | None = None,
    ) -> list[RawEvent]:
        """Events with ``after_seq < seq <= to_seq`` in seq order (at most ``limit``)."""

    @abc.abstractmethod
    async def seq_at(self, agent_id: str, timestamp: float) -> int:
        """The last seq whose event timestamp is ``<= timestamp`` (0 if none)."""

    @abc.abstractmethod
    async def save_snapshot(self, agent_id: str, snapshot: RawSnapshot) -> None:
        """Store a snapshot (replacing one at the same seq). The event at its seq must exist."""

    @abc.abstractmethod
    async def latest_snapshot(
        self, agent_id: str, at_or_below: int | None = None
    ) -> RawSnapshot | None:
        """The snapshot with the highest seq ``<= at_or_below`` (any seq when None)."""

    async def read_latest(self, agent_id: str) -> tuple[RawSnapshot | None, list[RawEvent]]:
        """The agent's latest state in one call: ``(snapshot, events)`` — the snapshot
        with the highest seq (None when the agent has none) and every event after it
        (after seq 0 without a snapshot), in seq order.

        ``(None, [])`` for an unknown or deleted agent. The default composes
        :meth:`latest_snapshot` and :meth:`read` (two reads); engines override it with
        one consistent read (SQLite: one read transaction; PostgreSQL: one round trip;
        Redis: one script), so a concurrent append never splits the pair.
        """
        snapshot = await self.latest_snapshot(agent_id)
        events = await self.read(agent_id, after_seq=snapshot.seq if snapshot else 0)
        return snapshot, events

    async def read_state(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[RawEvent]]:
        """What a cold load of the latest state needs, in one call: ``(head, tag,
        snapshot, events)`` — :meth:`head_tag` and :meth:`read_latest` together.

        ``(0, None, None, [])`` for an unknown or deleted agent. The default makes the
        two calls (two reads: an append between them may put events, or a snapshot,
        past ``head``; the caller ignores those). Engines override it with one
        consistent read (SQLite and PostgreSQL: one statement), where then
        ``snapshot.seq <= head`` and the events end at ``head``.
        """
        head, tag = await self.head_tag(agent_id)
        if head == 0:
            return 0, None, None, []
        snapshot, events = await self.read_latest(agent_id)
        return head, tag, snapshot, events

    async def read_state_rows(
        self, agent_id: str
    ) -> tuple[int, bytes | None, RawSnapshot | None, list[EventRow]]:
        """:meth:`read_state` with the events as :data:`~statekeeper.records.EventRow`
        tuples: what a fold replays. The default converts :meth:`read_state`'s events;
        an engine whose cursor returns such rows hands them over as they are (SQLite),
        with no :class:`RawEvent` built per event."""
        head, tag, snapshot, events = await self.read_state(agent_id)
        return head, tag, snapshot, event_rows(events)

    #: True when :meth:`read_latest_many` is answered natively (one consistent read of
    #: many agents); the store reads agents one by one otherwise
    reads_latest_many: bool = False

    async def read_latest_many(self, agent_ids: Sequence[str]) -> list[LatestRead | None]:
        """Many agents' latest states in one call: for each of ``agent_ids`` (in order)
        a :class:`LatestRead` (head, head tag, latest snapshot, the events after it), or
        None for an agent without a stream. What a bulk pass over the store (a schema
        migration) needs instead of one head read and one latest read per agent.

        The default reads each agent in turn (:meth:`read_state`); an engine that
        answers in one consistent read sets :attr:`reads_latest_many` (SQLite: one read
        transaction per call; PostgreSQL: one statement)."""
        out: list[LatestRead | None] = []
        for agent_id in agent_ids:
            head, tag, snapshot, events = await self.read_state(agent_id)
            if head == 0:
                out.append(None)
                continue
            out.append(LatestRead(head, tag, snapshot, [e for e in events if e.seq <= head]))
        return out

    @abc.abstractmethod
    async def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """Agents ordered by id, strictly after ``after``, at most ``limit`` of them."""

    async def read_heads(self, agent_ids: Sequence[str]) -> list[RawEvent | None]:
        """The event at each agent's head (None for an agent without a stream), in the
        order of ``agent_ids``: what listing many agents' states needs. The default
        reads each agent's head and that event; SQLite and PostgreSQL answer in one
        statement."""
        out: list[RawEvent | None] = []
        for agent_id in agent_ids:
            head = await self.head(agent_id)
            last = await self.read(agent_id, head - 1, head) if head else []
            out.append(last[-1] if last and last[-1].seq == head else None)
        return out

    #: True when :meth:`list_agents_before` is answered natively (an index range read)
    lists_backwards: bool = False

    async def list_agents_before(
        self, before: str | None = None, limit: int = 100
    ) -> list[AgentInfo]:
        """Agents ordered by id **descending**, strictly before ``before`` (from the
        last id when None), at most ``limit`` of them: the backward page of
        :meth:`list_agents` (keyset pagination in both directions). Engines that can
        read their index backwards set :attr:`lists_backwards` and override this; the
        default refuses with :class:`~statekeeper.errors.CapabilityUnsupported`."""
        raise CapabilityUnsupported(self.name, "listing agents backwards")

    #: True when :meth:`list_agents_by_write` is answered (an index on the last write)
    lists_by_write: bool = False

    async def list_agents_by_write(
        self,
        cursor: tuple[float, str] | None = None,
        limit: int = 100,
        *,
        newest_first: bool = True,
    ) -> list[AgentInfo]:
        """Agents ordered by their last write (``updated_at``, then id): the most
        recently written first (``newest_first``) or the longest idle first, strictly
        beyond ``cursor`` = ``(updated_at, agent_id)`` of the last row of the previous
        page (from the start when None), at most ``limit`` of them — keyset pagination
        over an index on the last write. Engines with that index set
        :attr:`lists_by_write`; the default refuses with
        :class:`~statekeeper.errors.CapabilityUnsupported`."""
        raise CapabilityUnsupported(self.name, "listing agents by last write")

    @abc.abstractmethod
    async def delete_agent(self, agent_id: str) -> bool:
        """Delete the agent's events, snapshots and idempotency keys. True if it existed."""

    async def delete_agent_at(
        self, agent_id: str, head: int, checksum: bytes | None = None
    ) -> bool:
        """Delete the agent only if its head is still ``head`` (>= 1) and, with
        ``checksum``, its head event's stored checksum is still that one: True, or
        :class:`~statekeeper.errors.ConflictError` with nothing deleted (a retention
        purge decided on a listing; a write since must not be lost). The checksum is
        the head record's identity: a stream deleted and written again up to the same
        seq by another process has another one (its link binds the timestamp and every
        record before; an encrypted record's tag its random nonce), so a caller that
        read the head record deletes that stream and no other. Engines with
        :meth:`append_together` taking a change alone (memory, SQLite) make it one
        commit there; PostgreSQL and Redis (a cluster too: one slot) override it with
        one transaction / script, tiered with its durable tier's, S3 with a claim of
        the next commit slot. The default compares the head just before deleting (a
        write between those two calls is deleted with the agent)."""
        if head < 1:
            raise ConfigurationError(f"delete_agent_at needs a head >= 1, got {head}")
        if self.appends_together and self.changes_alone_together:
            change = StreamChange(agent_id, delete_at=head, delete_checksum=checksum)
            await self.append_together([], [change])
            return True
        current = await self.head(agent_id)
        if current != head:
            raise ConflictError(agent_id, head, current)
        if checksum is not None and await self.head_checksum(agent_id, head) != checksum:
            raise ConflictError(agent_id, head, head)
        return await self.delete_agent(agent_id)

    async def head_checksum(self, agent_id: str, head: int) -> bytes | None:
        """The stored checksum of ``agent_id``'s event at ``head`` (None: no such event)."""
        for event in await self.read(agent_id, head - 1, head):
            if event.seq == head:
                return event.checksum
        return None

    #: True when :meth:`append_together` takes changes with no append (memory, SQLite)
    changes_alone_together: bool = False

    @abc.abstractmethod
    async def health(self) -> Health:
        """Check the engine answers; never raises for an unhealthy engine."""

    async def count_agents(self) -> int:
        """How many agents have a stream. The default pages through :meth:`list_agents`."""
        total, after = 0, None
        while True:
            page = await self.list_agents(after=after, limit=1000)
            total += len(page)
            if len(page) < 1000:
                return total
            after = page[-1].agent_id

    async def count_prefix(self, prefix: str) -> int:
        """How many agents have a stream whose id starts with ``prefix`` (a store
        opened in a namespace counts ``"ns/"``). The default pages through
        :meth:`list_agents` from ``prefix`` and stops past it (O(agents counted));
        SQLite, PostgreSQL and Redis count an index range instead."""
        total, after = 0, prefix or None
        while True:
            page = await self.list_agents(after=after, limit=1000)
            for info in page:
                if not info.agent_id.startswith(prefix):
                    return total
                total += 1
            if len(page) < 1000:
                return total
            after = page[-1].agent_id

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads. Further calls raise ``StoreClosed``."""

    # -- leases and fencing (see docs/concurrency.md) ------------------------------
    #
    # One lease per agent. Its fencing token only ever grows (it survives release,
    # expiry and delete_agent), and an append whose ``request.fence`` is not the
    # agent's current (holder, token) is refused with LeaseLost atomically with the
    # append. Engines that cannot do this keep ``supports_leases = False``: every lease
    # call, and every append that carries a fence, raises LeasesUnsupported.

    #: True when the engine grants leases and checks fencing tokens on append
    supports_leases: bool = False

    async def acquire_lease(self, agent_id: str, holder: str, ttl: float) -> LeaseInfo:
        """Grant the agent's lease to ``holder`` for ``ttl`` seconds, with a new token.

        The lease is free when it was never granted, was released, has expired (on the
        backend's clock), or is already held by ``holder`` — re-acquiring hands out a
        new token, so an earlier incarnation of the same holder is fenced off too.
        The new token is greater than every token granted before for the agent.
        Raises :class:`~statekeeper.errors.LeaseHeld` when another holder's lease is
        still running.
        """
        raise LeasesUnsupported(self.name)

    async def renew_lease(self, agent_id: str, holder: str, token: int, ttl: float) -> LeaseInfo:
        """Extend the lease to ``ttl`` seconds from now, keeping its token.

        Succeeds while ``(holder, token)`` is still the agent's newest lease — also
        after it expired, as long as nobody took it (no newer token exists, so no
        write was fenced off). Raises :class:`~statekeeper.errors.LeaseLost` otherwise.
        """
        raise LeasesUnsupported(self.name)

    async def release_lease(self, agent_id: str, holder: str, token: int) -> bool:
        """Give the lease up so another holder can take it at once. Writes fenced with
        the released token are refused from now on. False (and nothing changes) when
        ``(holder, token)`` is no longer the current lease."""
        raise LeasesUnsupported(self.name)

    async def release_lease_again(self, agent_id: str, holder: str, token: int) -> bool:
        """:meth:`release_lease` sent again after a try whose outcome is unknown (it
        raised, or its caller was cancelled: it may have released the lease). True
        also for a lease nobody holds whose token is still ``token``: released with
        it (any grant since would have moved the token on), so the first try did it.
        False when the lease was taken over (a newer token).

        Engines answer it in one step; this default releases, then looks at the lease
        (exact unless a grant comes between the two: then False)."""
        if await self.release_lease(agent_id, holder, token):
            return True
        return released_with(await self.get_lease(agent_id), token)

    async def get_lease(self, agent_id: str) -> LeaseInfo | None:
        """The agent's newest lease (possibly expired or released), or None if it
        never had one."""
        raise LeasesUnsupported(self.name)

    async def next_lease_token(self, agent_id: str, current: LeaseInfo | None) -> int:
        """The fencing token the agent's next grant gives, ``current`` being its stored
        lease as just read: that token plus one (1 for an agent never leased). An engine
        whose tokens jump (PostgreSQL: past every token an earlier WAL timeline gave,
        after a failover) reads it from the server; an audited grant committed with
        its entry names it, and the engine refuses another."""
        return current.token + 1 if current is not None else 1

    async def list_leases(self, after: str = "", limit: int = 1000) -> list[LeaseInfo]:
        """The stored leases (possibly expired or released) of the agents whose id
        sorts after ``after``, in id order, at most ``limit`` (a page: call again
        with the last id until fewer come back). Capability ``LEASE_LIST``; the
        default refuses."""
        raise CapabilityUnsupported(self.name, Capability.LEASE_LIST.value)

    async def carry_lease_tokens(self, tokens: Sequence[tuple[str, int]]) -> None:
        """Raise each agent's fencing token to at least the one given, as a lease nobody
        holds: the newest token another store granted the agent, carried by an
        export/import or a backup/restore, so the next grant here is greater than every
        token the source ever granted. A stored token at or above it is left alone (a
        token never goes back); a lease held under a lower one is released (its writes
        are refused from then on). Engines without leases do nothing; one with leases
        that does not carry them refuses (:class:`~statekeeper.errors.CapabilityUnsupported`)
        rather than let its tokens start again below the source's."""
        if self.supports_leases and tokens:
            raise CapabilityUnsupported(self.name, "carrying lease tokens")

    def refuse_fence(self, request: AppendRequest) -> None:
        """For engines without leases: refuse a fenced append rather than store it
        unchecked."""
        if request.fence is not None and not self.supports_leases:
            raise LeasesUnsupported(self.name)

    # -- store existence (read-only opening and ``statekeeper init``) ---------------

    async def ensure_store(self) -> None:
        """Raise :class:`~statekeeper.errors.NotAStore` unless what this backend points
        at is a statekeeper store; writes nothing. Backends opened with
        ``readonly=True`` use it; the default accepts (nothing to check)."""
        return None

    async def initialize(self) -> None:
        """Create the store's structures now (idempotent), so that read-only openings
        accept it even before the first agent is written. The default does nothing
        (the engine creates them when it is opened)."""
        return None

    # -- the checks a write starts with ----------------------------------------------

    def _check_open(self) -> None:
        """Raise :class:`~statekeeper.errors.StoreClosed` once :meth:`close` ran (each
        engine that tracks it overrides this, naming itself); the default accepts."""
        return None

    def _check_writable(self) -> None:
        """Raise :class:`~statekeeper.errors.ReadOnlyStore` when opened with
        ``readonly=True`` (each engine that can be overrides this, naming itself); the
        default accepts."""
        return None

    def _check_can_write(self) -> None:
        """Both checks a write starts with: closed first, then read-only."""
        self._check_open()
        self._check_writable()


class StoreRequest(AppendRequest):
    """An append built by the store's write pipeline, valid by construction: its agent
    id, event kind and idempotency key were checked when the store's method was
    called, its one event is numbered ``expected_seq + 1`` and its snapshot sits on
    that seq. :func:`validate_request` lets it through without checking it again (the
    checks were ~150 of a save's ~2,600 bytecodes, measured by
    ``benchmarks/bench_save_instructions.py --bytecodes``)."""

    __slots__ = ()


def validate_request(request: AppendRequest) -> None:
    """Reject a malformed append before any engine touches it.

    Events must be non-empty and numbered ``expected_seq + 1`` onward without gaps; a
    snapshot, if any, must sit on one of the appended seqs. The agent id and the
    idempotency key follow the agent-id rule. A :class:`StoreRequest` was checked
    when it was built.
    """
    if type(request) is StoreRequest:
        return
    check_stored_id(request.agent_id)
    if request.idempotency_key is not None:
        check_name(request.idempotency_key, "idempotency_key")
    if request.expected_seq < 0:
        raise ConfigurationError(f"expected_seq must be >= 0, got {request.expected_seq}")
    if not request.events:
        raise ConfigurationError("an append needs at least one event")
    for offset, event in enumerate(request.events, start=1):
        check_name(event.type, "event type")
        if event.seq != request.expected_seq + offset:
            raise ConfigurationError(
                f"event seq {event.seq} does not follow expected_seq {request.expected_seq}"
                f" at position {offset}"
            )
    snap = request.snapshot
    if snap is not None and not (request.expected_seq < snap.seq <= request.events[-1].seq):
        raise ConfigurationError(f"snapshot seq {snap.seq} is not one of the appended seqs")


_MAX_ID = MAX_ID_BYTES // 4
#: the arguments of :meth:`Backend.append_next`, in order: ``(agent_id, seq, timestamp,
#: payload, checksum, head_tag, expected_tag, snapshot)``
NextRow: TypeAlias = tuple[
    str, int, float, bytes, bytes, bytes | None, bytes | None, RawSnapshot | None
]
#: the event :meth:`Backend.commit_keyed` commits, in order: ``(agent_id, seq, event_type,
#: timestamp, payload, checksum, head_tag, expected_tag, key)`` — ``event_type`` the event's
#: type, ``key`` its idempotency key as stored (``idempotency.stored_key``) or None
KeyedRow: TypeAlias = tuple[
    str, int, str, float, bytes, bytes, bytes | None, bytes | None, str | None
]


def next_request(row: NextRow, check_tag: bool = True) -> StoreRequest:
    """The append :meth:`Backend.append_next` makes of ``row`` (checked with
    :func:`validate_next`), as a request: for an engine's default, a queue's batch, a
    group commit."""
    agent_id, seq, timestamp, payload, checksum, head_tag, expected_tag, snapshot = row
    return StoreRequest(
        agent_id,
        seq - 1,
        (RawEvent(seq, EventType.PATCH, timestamp, payload, checksum),),
        snapshot,
        None,
        None,
        head_tag,
        expected_tag,
        check_tag,
    )


def validate_next(agent_id: str, seq: int, snapshot: RawSnapshot | None) -> None:
    """:func:`validate_request` of :meth:`Backend.append_next`'s arguments (for an
    engine that overrides it): the agent id, ``seq >= 1``, a snapshot on ``seq``."""
    if not (  # the common case of check_stored_id, inline (as there: every save)
        agent_id.__class__ is str
        and 0 < len(agent_id) <= _MAX_ID
        and agent_id.isascii()
        and agent_id[0] != "\x01"
        and "\x00" not in agent_id
    ):
        check_stored_id(agent_id)
    if seq.__class__ is not int or seq < 1:
        raise ConfigurationError(f"append_next: seq must be an int >= 1, got {seq!r}")
    if snapshot is not None and snapshot.seq != seq:
        raise ConfigurationError(f"snapshot seq {snapshot.seq} is not the appended seq {seq}")


def validate_from_base(request: AppendRequest, base: RawSnapshot, kept_keys: KeptKeys = ()) -> None:
    """Reject a malformed :meth:`Backend.append_from_base` before any engine touches
    it: the events follow the base (``expected_seq == base.seq >= 1``), no fence, each
    kept key a distinct non-empty name of a range ``1 <= first <= last <= base.seq``,
    or (one at most: the append a compaction cut in two) ``first <= base.seq < last``
    with ``last`` within ``request.events`` and no key on the request (its range
    would overlap the record's)."""
    names = set()
    cut = 0
    top = base.seq + len(request.events)
    for name, first, last in kept_keys:
        if not isinstance(name, str) or not name or name in names:
            raise ConfigurationError(f"agent {request.agent_id!r}: kept key {name!r} is not valid")
        if not (type(first) is int and type(last) is int and 1 <= first <= min(last, base.seq)):
            raise ConfigurationError(
                f"agent {request.agent_id!r}: kept key {name!r} claims seqs {first}..{last},"
                f" which do not start within 1..{base.seq} (the base)"
            )
        if last > base.seq:  # an append the compaction cut in two
            cut += 1
            if last > top or cut > 1 or request.idempotency_key is not None:
                raise ConfigurationError(
                    f"agent {request.agent_id!r}: kept key {name!r} claims seqs"
                    f" {first}..{last} across the base {base.seq}: only one record may,"
                    f" ending at or before the request's last seq {top}, and the request"
                    " then carries no key of its own"
                )
        names.add(name)
        if name == request.idempotency_key:
            raise ConfigurationError(
                f"agent {request.agent_id!r}: kept key {name!r} is also the append's key"
            )
    if base.seq < 1 or request.expected_seq != base.seq:
        raise ConfigurationError(
            f"agent {request.agent_id!r}: a stream from base seq {base.seq} needs"
            f" expected_seq {base.seq}, not {request.expected_seq}"
        )
    if request.fence is not None or request.check_tag:
        raise ConfigurationError("a stream created from a base takes no fence or tag check")
    validate_request(request)


def takes_from_base_guard(engine: Backend) -> bool:
    """Does ``engine``'s :meth:`Backend.append_from_base` take a ``guard``: it declares
    :attr:`~Backend.guards_from_base` and its method has the argument? A subclass of an
    engine that does (SQLite's, say) whose override was written before the argument
    inherits the declaration but not the argument: a caller that passed it one raised
    ``TypeError`` (a tiered store's rehydration of a compacted agent failed). Callers
    pass a guard only when this is true, as :func:`validate_from_base_guard`'s
    refusal would."""
    return engine.guards_from_base and _takes_guard(engine, "append_from_base")


def takes_rename_guard(engine: Backend) -> bool:
    """Does ``engine``'s :meth:`Backend.rename_keys` take a ``guard``: it declares
    :attr:`~Backend.guards_renames` and its method has the argument (an override
    written before it inherits the declaration, not the argument: see
    :func:`takes_from_base_guard`)?"""
    return engine.guards_renames and _takes_guard(engine, "rename_keys")


def _takes_guard(engine: Backend, method: str) -> bool:
    """Does ``engine``'s class's ``method`` have a ``guard`` argument (or ``**kwargs``)?
    Read once per class and method."""
    key = (type(engine), method)
    taken = _TAKES_GUARD.get(key)
    if taken is None:
        params = inspect.signature(getattr(type(engine), method)).parameters
        taken = _TAKES_GUARD[key] = "guard" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
    return taken


_TAKES_GUARD: dict[tuple[type[Backend], str], bool] = {}


def validate_from_base_guard(
    request: AppendRequest, guard: StreamChange | None, engine: Backend
) -> None:
    """Reject a ``guard`` of :meth:`Backend.append_from_base` ``engine`` cannot make
    (:class:`~statekeeper.errors.CapabilityUnsupported`: no
    :attr:`~Backend.guards_from_base`) or that is not a check of another stream's head
    (:class:`~statekeeper.errors.ConfigurationError`): only ``StreamChange(other,
    rewrite=RewriteRequest(other, seq, tag[, head_tag=...]))``, no records rewritten."""
    if guard is None:
        return
    if not engine.guards_from_base:
        raise CapabilityUnsupported(
            engine.name, "append_from_base(guard=...)", "a check of another stream in its commit"
        )
    rw = guard.rewrite
    alone = StreamChange(guard.agent_id, rewrite=rw)
    if (
        rw is None
        or guard != alone
        or rw.agent_id != guard.agent_id
        or rw.events
        or rw.snapshots
        or guard.agent_id == request.agent_id
    ):
        raise ConfigurationError(
            f"agent {request.agent_id!r}: append_from_base's guard must be a check of"
            " another stream's head (StreamChange(other, rewrite=RewriteRequest(other,"
            f" seq, tag)), no records), not {guard!r}"
        )
    validate_rewrite(rw)


def validate_rename_guard(agent_id: str, guard: StreamChange | None, engine: Backend) -> None:
    """Reject a ``guard`` of :meth:`Backend.rename_keys` ``engine`` cannot make
    (:class:`~statekeeper.errors.CapabilityUnsupported`: no
    :attr:`~Backend.guards_renames`) or that is not a check of another stream
    (:class:`~statekeeper.errors.ConfigurationError`): only ``StreamChange(other,
    absent=True)`` or ``StreamChange(other, rewrite=RewriteRequest(other, seq, tag[,
    head_tag=...]))``, no records rewritten."""
    if guard is None:
        return
    if not engine.guards_renames:
        raise CapabilityUnsupported(
            engine.name, "rename_keys(guard=...)", "a check of another stream in its step"
        )
    rw = guard.rewrite
    if guard != StreamChange(guard.agent_id, absent=True) and (
        rw is None
        or guard != StreamChange(guard.agent_id, rewrite=rw)
        or rw.agent_id != guard.agent_id
        or rw.events
        or rw.snapshots
    ):
        raise ConfigurationError(
            f"agent {agent_id!r}: rename_keys' guard must be a check of another stream"
            " (StreamChange(other, absent=True), or StreamChange(other,"
            f" rewrite=RewriteRequest(other, seq, tag)), no records), not {guard!r}"
        )
    if guard.agent_id == agent_id:
        raise ConfigurationError(
            f"agent {agent_id!r}: rename_keys' guard is a check of another stream"
        )
    check_stored_id(guard.agent_id)
    if rw is not None:
        validate_rewrite(rw)


def validate_together(
    requests: Sequence[AppendRequest],
    changes: Sequence[StreamChange] = (),
    engine: Backend | None = None,
) -> None:
    """The checks of every engine's ``append_together`` before it writes: each
    request well-formed, one request or change per stream, each change a delete, or
    a snapshot and/or a prune, or (``engine`` with ``changes_leases_and_rewrites``) a
    lease change or a rewrite alone, or (``engine`` with ``checks_absence_together``)
    an absence check alone; another ``engine`` refuses those with
    :class:`~statekeeper.errors.CapabilityUnsupported` (never ignores them) — and
    changes with no append, unless it declares ``changes_alone_together`` (was: passed
    on to an ``append_together`` that may need an append to commit)."""
    if changes and not requests and engine is not None and not engine.changes_alone_together:
        raise CapabilityUnsupported(
            engine.name, "append_together", "changes with no append in the commit"
        )
    for request in requests:
        validate_request(request)
    ids = [r.agent_id for r in requests]
    for change in changes:
        check_stored_id(change.agent_id)
        if change.delete_checksum is not None and change.delete_at is None:
            raise ConfigurationError("delete_checksum is part of a delete: give delete_at too")
        pruning = change.prune_to is not None
        if (
            (change.lease is not None or change.rewrite is not None)
            and engine is not None
            and not engine.changes_leases_and_rewrites
        ):
            raise CapabilityUnsupported(
                engine.name, "append_together", "a lease change or a rewrite in the same commit"
            )
        if change.absent:
            if engine is not None and not engine.checks_absence_together:
                raise CapabilityUnsupported(
                    engine.name, "append_together", "a check of a stream's absence in the commit"
                )
            if (
                change.delete_at is not None
                or change.snapshot is not None
                or change.prune_to is not None
                or change.lease is not None
                or change.rewrite is not None
                or change.drop_snapshots
                or change.prune_head is not None
                or change.prune_checksum is not None
                or change.delete_checksum is not None
            ):
                raise ConfigurationError(
                    "an absence check is made alone: no delete, snapshot, prune, lease or rewrite"
                )
            ids.append(change.agent_id)
            continue
        if change.lease is not None:
            _validate_lease_change(change)
            ids.append(change.agent_id)
            continue
        if change.rewrite is not None:
            if (
                change.delete_at is not None
                or change.snapshot is not None
                or change.prune_to is not None
            ):
                raise ConfigurationError("a rewrite is made alone: no delete, snapshot or prune")
            if change.rewrite.agent_id != change.agent_id:
                raise ConfigurationError("a stream change's rewrite is of its own stream")
            validate_rewrite(change.rewrite)
            ids.append(change.agent_id)
            continue
        if (
            change.prune_head is not None
            and engine is not None
            and not engine.prunes_together_at_head
        ):
            raise CapabilityUnsupported(
                engine.name, "append_together", "a prune at the head's identity in the same commit"
            )
        if change.drop_snapshots and not pruning:
            raise ConfigurationError("drop_snapshots is part of a prune: give prune_to too")
        if (change.prune_head is not None or change.prune_checksum is not None) and (
            not pruning or change.prune_head is None
        ):
            raise ConfigurationError(
                "prune_head and prune_checksum are part of a prune: give prune_to and prune_head"
            )
        if (change.delete_at is None) == (change.snapshot is None and not pruning):
            raise ConfigurationError(
                "a stream change is a delete, or a snapshot and/or a prune: one of the two"
            )
        if change.delete_at is not None and change.delete_at < 1:
            raise ConfigurationError(f"delete_at must be >= 1, got {change.delete_at}")
        ids.append(change.agent_id)
    if len(set(ids)) != len(ids):
        raise ConfigurationError("append_together: one request per stream")


def _validate_lease_change(change: StreamChange) -> None:
    lease = change.lease
    assert lease is not None
    if (
        change.delete_at is not None
        or change.snapshot is not None
        or change.prune_to is not None
        or change.rewrite is not None
    ):
        raise ConfigurationError("a lease change is made alone: no delete, snapshot or prune")
    check_name(lease.holder, "holder")
    if type(lease.token) is not int or lease.token < 1:
        raise ConfigurationError(f"a lease token is an int >= 1, got {lease.token!r}")
    if lease.ttl is not None:
        validate_ttl(lease.ttl)


def released_with(current: LeaseInfo | None, token: int) -> bool:
    """``current`` is a lease nobody holds whose token is ``token``: it was released
    with that token (a grant would have moved the token on)."""
    return current is not None and current.holder is None and current.token == token


def check_lease_grant(agent_id: str, lease: Any, current: LeaseInfo | None, now: float) -> None:
    """The checks of a lease grant (:class:`~statekeeper.records.LeaseChange`) against
    the agent's stored lease ``current`` at ``now`` on the engine's clock: another
    holder's running lease raises :class:`~statekeeper.errors.LeaseHeld`; a token
    that is not the stored one plus one raises
    :class:`~statekeeper.errors.ConflictError` (expected: the token before the
    grant, current: the stored one)."""
    if (
        current is not None
        and current.holder is not None
        and current.holder != lease.holder
        and current.expires_at > now
    ):
        raise LeaseHeld(agent_id, current.holder, current.expires_at)
    stored = current.token if current is not None else 0
    if stored + 1 != lease.token:
        raise ConflictError(agent_id, lease.token - 1, stored)


def validate_batch(
    requests: Sequence[AppendRequest],
) -> tuple[list[AppendResult | BaseException | None], list[tuple[int, AppendRequest]]]:
    """The first step of an engine's ``append_batch``: each malformed request's slot of
    the answer holds its ``ConfigurationError`` (the batch goes on without it), and the
    well-formed ones come back with their index, in order, for the engine to write."""
    out: list[AppendResult | BaseException | None] = [None] * len(requests)
    valid: list[tuple[int, AppendRequest]] = []
    for i, request in enumerate(requests):
        try:
            validate_request(request)
            valid.append((i, request))
        except ConfigurationError as exc:
            out[i] = exc
    return out, valid


def check_expiry(agent_id: str | None, before: float) -> float:
    """The checks of :meth:`Backend.expire_keys`' arguments, made by every engine
    before it touches storage: an agent id (or None) and a finite time; ``before``."""
    if agent_id is not None:
        check_stored_id(agent_id)
    if isinstance(before, bool) or not isinstance(before, int | float) or not math.isfinite(before):
        raise InvalidArgument(
            "before", f"expire_keys: before must be a finite epoch time, not {before!r}"
        )
    return float(before)


def validate_ttl(ttl: float) -> float:
    """A lease duration must be a positive, finite number of seconds."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise InvalidArgument("ttl", f"lease ttl must be a finite number of seconds, not {ttl!r}")
    if ttl <= 0:
        raise InvalidArgument("ttl", f"lease ttl must be > 0 seconds, not {ttl!r}")
    return float(ttl)


def check_fence(agent_id: str, fence: Fence, current: LeaseInfo | None) -> None:
    """Raise :class:`~statekeeper.errors.LeaseLost` unless ``fence`` is the agent's
    current (not released) lease. Expiry alone does not fail the check: while nobody
    took the lease over, no newer token exists, and the write is safe."""
    holder, token = fence
    if (
        current is None
        or current.holder is None
        or (current.holder, current.token)
        != (
            holder,
            token,
        )
    ):
        raise lease_lost(agent_id, holder, token, current)


def append_outcome(
    request: AppendRequest,
    reply: Sequence[Any],
    holder: Callable[[Any], str | None] | None = None,
) -> AppendResult:
    """The result of an engine's one-round-trip append (a script or a statement) from
    its reply ``(status, a, b[, newest holder])``: status 0, stored as seqs ``a..b``; 1,
    a duplicate of the earlier append ``a..b`` with the same key; 3, the fence is stale
    (:class:`~statekeeper.errors.LeaseLost`: ``a`` is the newest token, its holder as
    ``holder`` decodes it, as is without); else a conflict (``a`` is the head)."""
    status, a, b = int(reply[0]), int(reply[1]), int(reply[2])
    if status == 0:
        return AppendResult(request.agent_id, a, b)
    if status == 1:
        return AppendResult(request.agent_id, a, b, duplicate=True)
    if status == 3:
        assert request.fence is not None
        newest = reply[3] if holder is None else holder(reply[3])
        raise LeaseLost(request.agent_id, request.fence[0], request.fence[1], a, newest)
    raise ConflictError(request.agent_id, request.expected_seq, a)


def lease_lost(agent_id: str, holder: str, token: int, current: LeaseInfo | None) -> LeaseLost:
    """The :class:`~statekeeper.errors.LeaseLost` of ``holder``'s ``token`` when the
    agent's newest lease is ``current`` (None: the agent has none)."""
    return LeaseLost(
        agent_id,
        holder,
        token,
        current.token if current is not None else 0,
        current.holder if current is not None else None,
    )


def check_prune_at(
    agent_id: str,
    head: int,
    expected: int | None,
    checksum: bytes | None,
    stored: Callable[[], bytes | None],
) -> None:
    """The identity precondition of :meth:`Backend.prune` (``expected``: the head the
    caller planned on, None for none; ``checksum``: that head event's, None for any;
    ``stored``: the stored head event's checksum, read only when needed), checked by
    each engine inside its atomic step before :func:`check_prune`."""
    if expected is None:
        if checksum is not None:
            raise ConfigurationError("a prune's checksum is its head's identity: give head too")
        return
    if head != expected:
        raise ConflictError(agent_id, expected, head)
    if checksum is not None and stored() != checksum:
        raise ConflictError(agent_id, expected, head)  # deleted and made again since


def check_prune(
    agent_id: str,
    head: int,
    base_seq: int,
    has_base: bool,
    drop_snapshots: Sequence[int],
    current_base: int,
) -> None:
    """The preconditions of :meth:`Backend.prune`, checked by each engine inside its
    atomic step (``has_base``: a snapshot is stored at ``base_seq``; ``current_base``:
    the stream's base as stored in that step — the seq before its first stored event —
    which an engine may read only when ``drop_snapshots`` is not empty, passing 0
    otherwise: it matters only then)."""
    if not 0 <= base_seq < head:
        raise ConfigurationError(
            f"agent {agent_id!r}: cannot prune to base seq {base_seq} with head {head}"
        )
    if base_seq and not has_base:
        raise ConfigurationError(
            f"agent {agent_id!r}: no snapshot at seq {base_seq} to become the stream's base"
        )
    if base_seq and base_seq in drop_snapshots:
        raise ConfigurationError(
            f"agent {agent_id!r}: cannot drop the snapshot at seq {base_seq}: the prune's base"
        )
    if current_base >= base_seq and current_base and current_base in drop_snapshots:
        # (compacted already, maybe by another process since the caller looked: the
        # snapshot at its base is the only record of the state there)
        raise ConfigurationError(
            f"agent {agent_id!r}: cannot drop the snapshot at seq {current_base}:"
            " it is the stream's base (its events up to it are pruned)"
        )


def validate_rewrite(request: RewriteRequest) -> None:
    """Reject a malformed rewrite before any engine touches it: every replaced record
    must sit within ``1..expected_seq``, each event at most once."""
    check_stored_id(request.agent_id)
    if request.expected_seq < 1:
        raise ConfigurationError(f"cannot rewrite a stream with head {request.expected_seq}")
    seen: set[int] = set()
    for event in request.events:
        if not 1 <= event.seq <= request.expected_seq or event.seq in seen:
            raise ConfigurationError(
                f"rewrite of event seq {event.seq} is outside 1..{request.expected_seq} or repeated"
            )
        seen.add(event.seq)
    for snap in request.snapshots:
        if not 1 <= snap.seq <= request.expected_seq:
            raise ConfigurationError(
                f"rewrite of snapshot seq {snap.seq} is outside 1..{request.expected_seq}"
            )


def unstored_rewrite(agent_id: str, seq: int, base: int) -> RewriteBelowPrunedBase:
    """The error of a rewrite naming event ``seq`` of ``agent_id``, not stored: pruned
    (its events up to ``base`` are gone). Every engine raises it before writing any of
    the rewrite: a rewrite that reported success with nothing changed (a redaction, a
    key rotation) would be a silent failure. A ``ConfigurationError``
    (:class:`~statekeeper.errors.RewriteBelowPrunedBase`): planned again, it applies."""
    return RewriteBelowPrunedBase(agent_id, seq, base, "event")


def prefix_end(prefix: str) -> str:
    """The smallest string above every string starting with ``prefix`` (non-empty):
    ``[prefix, prefix_end(prefix))`` is the range of ids with that prefix, in code
    point order (SQLite's BINARY and PostgreSQL's ``"C"`` collation order UTF-8 bytes,
    which is the same order)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
