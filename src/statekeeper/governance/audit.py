"""The audit log: an append-only, hash-chained, keyed record of what was done.

Every mutation a governed store makes (create, save, append, transition, snapshot,
delete, lease taken, released and lost, rekey, migrate, policy change, purge) and
every refusal is one **entry**: who (``principal``), when, which agent and seq range,
the operation and its outcome (``ok``, ``denied``, ``error:<Type>``). Reads are
recorded too with ``Audit(reads=True)``.

**Where.** The log is a stream of the store's own backend (id ``"\\x01sk-audit/log"``,
hidden from listings), written through the backend contract every engine implements,
so every backend has it. **How it is protected** is how agent streams are: each entry
is a record of the codec (:mod:`statekeeper.codec.pipeline`) sealed with AES-256-GCM
under the audit keyring and chained to the one before it, and the stream head carries
an HMAC-SHA256 tag over the last link; each append is a compare-and-set on that head,
so concurrent writers (processes) interleave without losing an entry (on PostgreSQL
under row-level security, where a tenant's database role may read no entry, each append
also leaves its last entry's link, sealed: ``Backend.audit_links``, and the next writer
chains on that). Without the key no entry can be forged, altered, removed or re-ordered
unseen:

* an **edited** entry fails authentication;
* a **deleted** entry leaves a gap in the seqs or a broken chain;
* a **truncated** log no longer matches its authenticated head;
* a log **deleted** whole: the store-level marker :data:`KEPT_MARKER`, set once the
  log's first entry is committed, says there was one (and a writer that finds the log
  empty in a marked store records that first in the new log); the marker itself can be
  removed with the log by whoever can write the database: a witness catches that;
* a log **rolled back** as a whole (an old copy restored) is consistent with itself:
  that is caught, as for agent streams, by a *witness* of the head kept elsewhere
  (:class:`AuditHead`; ``statekeeper audit verify --witness FILE`` keeps one up to
  date and checks the log against it).

**Durable with the write.** No mutation without its entry. On an engine that commits
several streams' appends atomically (``Backend.appends_together``: memory, SQLite,
PostgreSQL, Redis on one server) the entries of appends (create, save, append,
transition; sync, group and write-behind alike) are written in the *same commit* as
the appends (:meth:`AuditLog.record_with`, :meth:`AuditLog.write_with`), and so are
deletes, snapshots and retention's compactions, thinnings and purges; on memory,
SQLite and PostgreSQL also leases (grant and release) and each agent's key rotation
(its whole stream's rewrite) (:meth:`AuditLog.record_with_change`), and a migration
page's rewrites (:meth:`AuditLog.rewrite_with`): after a crash at any point both exist
or neither does. Elsewhere (Redis Cluster, S3, tiered; leases and rewrites on Redis),
for ``forget`` (the data key is destroyed in the key vault, another database) and for
a rekey of an agent too large to hold in memory
(``statekeeper.security.rekey.TOGETHER_MAX``), the entry is written *first*
(marked ``ahead``; :meth:`AuditLog.record_ahead`) and voided by a second entry when
the mutation fails: a crash between the two leaves at worst an entry of a change not
made, which :meth:`AuditLog.verify` reports in ``unapplied``.

(Why one module over 600 lines: writing, reading and verifying the log share its
private chain state — the cached head, the sealing of entries, the entry-first marks
that :meth:`AuditLog.verify` reconciles — and splitting them would make that state
public for the split's sake.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..arguments import AUDIT_STREAM
from ..codec import Codec
from ..errors import (
    AccessDenied,
    ConfigurationError,
    ConflictError,
    IntegrityError,
    RetriesExhausted,
    StatekeeperError,
    StoreClosed,
)
from ..records import (
    AppendRequest,
    AppendResult,
    RawEvent,
    RawSnapshot,
    RewriteRequest,
    StreamChange,
)
from ..records import AuditMark as Mark
from ..store.conditional import check_together_at
from .audit_checks import StoreChecks
from .audit_claims import unclaimed_events

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..codec.keys import Keyring

__all__ = [
    "AUDIT_ID",
    "KEPT_MARKER",
    "KNOWN_OPERATIONS",
    "OPERATIONS",
    "Audit",
    "AuditEntry",
    "AuditHead",
    "AuditLog",
    "AuditReport",
    "Mark",
]

#: the stream the audit log is kept in (internal: hidden from listings)
AUDIT_ID = AUDIT_STREAM
#: the store-level marker (``Backend.set_marker``) of a store that keeps an audit log:
#: set once its first entry is committed, so a log deleted whole is told from none
KEPT_MARKER = "audit-log"
#: the outcome of the entry a writer puts first in a log it finds empty in a store
#: marked as keeping one (the earlier log was deleted)
MISSING = "log-missing"
_KIND = "audit"
#: the head's link (``Backend.audit_links``) is a snapshot record of the log at its head
#: (a snapshot carries the link of the event at its seq), whose body says nothing
_LINK_KIND = "snapshot"
_LINK_BODY = b"{}"
_PAGE = 500
_RETRIES = 1000
_T = TypeVar("_T")

#: the operations a store records (tools may add their own names)
OPERATIONS = (
    "create",
    "save",
    "append",
    "transition",
    "snapshot",
    "delete",
    "lease",
    "lease-release",
    "lease-lost",
    "rekey",
    "migrate",
    "policy",
    "purge",
    "forget",
    "get",
    "load",
    "head",
    "history",
    "list",
    "digest",
    "verify",
    "find_key",
    "size",
)

#: every operation statekeeper itself records: the store's (:data:`OPERATIONS`) and those of
#: its governance tools (holds, retention, backups, leases, the change feed, repair...)
KNOWN_OPERATIONS = (
    *OPERATIONS,
    "append_batch",
    "audit",
    "backup",
    "compact",
    "expire-keys",
    "hold",
    "projections",
    "release-hold",
    "repair",
    "restore",
    "retention",
    "subscribe",
    "thin-snapshots",
    "trim_feed",
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One verified entry of the audit log."""

    seq: int
    time: float
    principal: str | None
    operation: str
    outcome: str
    agent_id: str | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object (``time`` in epoch seconds; ``statekeeper audit --json``
        prints it with ``time`` as ISO 8601 in UTC, as every ``--json`` time)."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AuditHead:
    """A commitment to the log up to ``seq`` (keyed): kept outside the store, it
    shows later that the log was rolled back or rewritten (see :meth:`AuditLog.verify`)."""

    seq: int
    key_id: str | None
    digest: str

    def dumps(self) -> str:
        """JSON text of the head (what a witness file holds)."""
        return json.dumps({"format": "statekeeper-audit-head/1", **asdict(self)})

    @classmethod
    def loads(cls, text: str, source: str = "witness") -> AuditHead:
        """The head written by :meth:`dumps`; ConfigurationError naming ``source``."""
        try:
            data = json.loads(text)
            if data.get("format") != "statekeeper-audit-head/1":
                raise ValueError("not an audit head")
            seq, key_id, digest = data["seq"], data["key_id"], data["digest"]
            if type(seq) is not int or seq < 0 or type(digest) is not str:
                raise ValueError("bad fields")
            if key_id is not None and type(key_id) is not str:
                raise ValueError("bad key id")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigurationError(f"{source} is not an audit head file") from None
        return cls(seq, key_id, digest)


@dataclass(slots=True)
class AuditReport:
    """What :meth:`AuditLog.verify` found: ``entries`` checked, the ``head`` now (None
    for an empty log) and every problem (empty: the log is intact)."""

    entries: int = 0
    head: AuditHead | None = None
    problems: list[str] = field(default_factory=list)
    #: entries written ahead of a mutation (engines without a shared commit, and
    #: deletes) whose mutation is not in the store: the writer died between the two.
    #: Not a problem of the log (it never lost an entry), a fact about the store.
    unapplied: list[str] = field(default_factory=list)
    #: per operation, the entries whose change could not be compared with the store
    #: (see :mod:`statekeeper.governance.audit_checks` for what is and why)
    unchecked: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


class Audit:
    """How a store keeps its audit log (``StateStore(..., audit=Audit())``).

    Args:
        keyring: the keys the log is sealed with (a
            :class:`~statekeeper.security.Keyring`). None: the store's own keyring
            (a store without one then refuses to open: an audit log needs a key).
        reads: record reads (load, history, listing...) too, not only mutations
            and refusals.
        clock: the source of entry times.
    """

    def __init__(
        self,
        keyring: Keyring | None = None,
        *,
        reads: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if type(reads) is not bool:
            raise ConfigurationError(f"reads must be True or False, not {reads!r:.40}")
        self.keyring = keyring
        self.reads = reads
        self.clock = clock

    def open(self, backend: Backend, keyring: Keyring | None) -> AuditLog:
        """The audit log on ``backend`` (``keyring``: the store's, used when this
        has none)."""
        keys = self.keyring if self.keyring is not None else keyring
        if keys is None:
            raise ConfigurationError(
                "an audit log needs a key: give the store a keyring, or Audit(keyring=...)"
            )
        return AuditLog(backend, keys, reads=self.reads, clock=self.clock)


class AuditLog:
    """The audit log of one backend: record entries, read and verify them."""

    def __init__(
        self,
        backend: Backend,
        keyring: Keyring,
        *,
        reads: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.codec = Codec(keyring=keyring)
        self.reads = reads
        self.clock = clock
        self._lock = asyncio.Lock()
        # the head this process last wrote or read: (seq, link, tag); None: unknown
        self._head: tuple[int, bytes, bytes | None] | None = None
        # the store is known to carry KEPT_MARKER (set, or the engine keeps no markers)
        self._marked = False

    def __repr__(self) -> str:
        return f"AuditLog({self.backend!r})"

    # -- writing ----------------------------------------------------------------------

    async def record(
        self,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None = None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        outcome: str = "ok",
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Append one entry; returns its seq in the log."""
        data = _body(operation, principal, agent_id, first_seq, last_seq, outcome, detail)
        async with self._lock:
            _, _, head = await self._on_the_log((data,), self.backend.append)
            await self._wrote(head)
            return head[0]

    @property
    def records_with_writes(self) -> bool:
        """True when :meth:`record_with` is offered (the engine commits two streams'
        appends atomically)."""
        return self.backend.appends_together

    async def record_with(
        self,
        request: AppendRequest,
        operation: str,
        *,
        principal: str | None,
        detail: Mapping[str, Any] | None = None,
    ) -> AppendResult:
        """Append ``request`` (a mutation of an agent) and its entry (outcome ``ok``,
        the request's seq range) in ONE atomic commit: after a crash at any point
        both exist or neither does.

        A conflict of the agent's append is raised (nothing written: the writer makes
        it again on a fresh read); a conflict on the log (another process recorded
        first) is retried here. A duplicate (idempotency key already used) writes
        nothing, entry included: its result is returned and the caller records it."""
        events = request.events
        data = _body(
            operation,
            principal,
            request.agent_id,
            events[0].seq,
            events[-1].seq,
            "ok",
            detail,
        )
        async with self._lock:
            results, _, head = await self._on_the_log(
                (data,), lambda entry: self.backend.append_together([request, entry])
            )
            result = results[0]
            assert result is not None
            if not result.duplicate:
                await self._wrote(head)
            return result

    async def record_with_change(
        self,
        change: StreamChange,
        operation: str,
        *,
        principal: str | None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        detail: Mapping[str, Any] | None = None,
        outcome: str = "ok",
        preceding: Sequence[Mapping[str, Any]] = (),
        appends: Sequence[AppendRequest] = (),
    ) -> None:
        """Make ``change`` (a delete, a snapshot or a prune of an agent) and write its
        entry (``outcome``) in ONE atomic commit (``Backend.append_together``): after
        a crash at any point both exist or neither does. ``preceding``: entries of the
        same agent written just before it, in that commit (``{"op", "outcome",
        "detail", "first_seq", "last_seq"}``: a retention purge before its delete);
        ``appends``: other streams' appends in that commit (a delete's feed tombstone).
        A conflict of the change or of ``appends`` is raised (nothing written); one on
        the log (another writer recorded first) is retried here."""
        bodies = [
            _body(
                e["op"],
                principal,
                change.agent_id,
                e.get("first_seq"),
                e.get("last_seq"),
                e.get("outcome", "ok"),
                e.get("detail"),
            )
            for e in preceding
        ]
        data = _body(operation, principal, change.agent_id, first_seq, last_seq, outcome, detail)
        bodies.append(data)
        check_together_at(self.backend, [change])  # (an engine that would ignore prune_head)
        async with self._lock:
            _, _, head = await self._on_the_log(
                bodies, lambda entry: self.backend.append_together([entry, *appends], [change])
            )
            await self._wrote(head)

    async def rewrite_with(
        self, requests: Sequence[RewriteRequest], marks: Sequence[Mark]
    ) -> list[bool]:
        """Apply ``requests`` (rewrites of distinct agents: a page of a schema
        migration) with the entry ``marks[i]`` of each, ALL in one commit
        (``Backend.append_together``): after a crash at any point a rewrite and its
        entry both exist or neither does. Like ``Backend.rewrite_many``: True for each
        request applied, False for one whose head moved meanwhile (it is left out,
        with its entry, and the others committed without it)."""
        done = [False] * len(requests)
        pending = list(range(len(requests)))
        async with self._lock:
            while pending:
                bodies = [_mark_body(marks[i], None) for i in pending]
                changes = [StreamChange(requests[i].agent_id, rewrite=requests[i]) for i in pending]
                try:
                    _, _, head = await self._on_the_log(
                        bodies,
                        lambda entry, changes=changes: self.backend.append_together(  # type: ignore[misc]
                            [entry], changes
                        ),
                    )
                except ConflictError as exc:
                    moved = next((i for i in pending if requests[i].agent_id == exc.agent_id), None)
                    if moved is None:
                        raise
                    pending.remove(moved)  # nothing was written: the others go again
                    continue
                await self._wrote(head)
                for i in pending:
                    done[i] = True
                break
        return done

    async def _wrote(self, head: tuple[int, bytes, bytes | None]) -> None:
        """After entries were committed: keep the head, and (once per process) see that
        the store carries :data:`KEPT_MARKER`, set after the log's first commit (a
        crash before it leaves a log unmarked, never a marked store without a log; a
        log written before the marker existed is marked by its next entry)."""
        self._head = head
        if not self._marked:
            if await self.backend.read_marker(KEPT_MARKER) is False:
                await self.backend.set_marker(KEPT_MARKER)
            self._marked = True

    async def _on_the_log(
        self,
        bodies: Sequence[bytes],
        send: Callable[[AppendRequest], Awaitable[_T]],
    ) -> tuple[_T, AppendRequest, tuple[int, bytes, bytes | None]]:
        """Chain the entries ``bodies`` after the log's head and hand their append to
        ``send`` (alone, or in one commit with the change it records). A conflict on
        the log (another writer recorded first) reads the head again and goes again,
        up to ``_RETRIES`` times; any other conflict is the caller's and is raised.
        Returns what ``send`` returned, the append and the head after it (the caller,
        holding ``self._lock``, decides whether the head moved). The one retry loop of
        every single-commit entry write."""
        last: ConflictError | None = None
        for _ in range(_RETRIES):
            request, head = await self._next_entries(bodies)
            try:
                out = await send(request)
            except ConflictError as exc:
                if exc.agent_id != AUDIT_ID:
                    raise
                last = exc
                self._head = None  # another writer recorded: read its head, go again
                continue
            return out, request, head
        assert last is not None
        raise RetriesExhausted(AUDIT_ID, _RETRIES, last)

    async def _next_entries(
        self, bodies: Sequence[bytes]
    ) -> tuple[AppendRequest, tuple[int, bytes, bytes | None]]:
        """The append of the entries ``bodies`` (chained, in order) after the head, and
        the head after them."""
        if self._head is None:
            self._head = await self._read_head()
        base, link, tag = self._head
        seq = base
        events: list[RawEvent] = []
        if base == 0 and await self.backend.read_marker(KEPT_MARKER):
            # an empty log in a store that kept one: it was deleted; say so first
            bodies = [
                _body("audit", None, None, None, None, MISSING, {"found": "empty log"}),
                *bodies,
            ]
        for data in bodies:
            ts = self.clock()
            if not math.isfinite(ts):
                raise ConfigurationError("the audit clock returned a time that is not finite")
            seq += 1
            sealed = self.codec.seal(AUDIT_ID, seq, _KIND, ts, data, link)
            events.append(RawEvent(seq, _KIND, ts, sealed.payload, sealed.checksum))
            link = sealed.link
        new_tag = self.codec.head_tag(AUDIT_ID, seq, link)
        snapshot = None
        if self.backend.audit_links:  # the next writer chains on it, reading no entry
            ts = events[-1].timestamp
            sealed = self.codec.seal(AUDIT_ID, seq, _LINK_KIND, ts, _LINK_BODY, link)
            snapshot = RawSnapshot(seq, ts, sealed.payload, sealed.checksum)
        request = AppendRequest(
            AUDIT_ID,
            base,
            events,
            snapshot=snapshot,
            head_tag=new_tag,
            expected_tag=tag,
            check_tag=self.backend.compares_head_tag,
        )
        return request, (seq, link, new_tag)

    async def _append_entries(self, bodies: Sequence[bytes]) -> int:
        """Append the entries ``bodies`` on their own (retried over other writers'
        entries); the seq of the first."""
        async with self._lock:
            _, _, head = await self._on_the_log(bodies, self.backend.append)
            await self._wrote(head)
            return head[0] - len(bodies) + 1

    # -- a batch of writes with their entries -------------------------------------------

    async def write_with(
        self, requests: Sequence[AppendRequest], marks: Sequence[Sequence[Mark]]
    ) -> list[AppendResult | BaseException]:
        """Append ``requests`` (distinct agents' or not) with the entries ``marks[i]`` of
        each: like ``Backend.append_batch``, each request succeeds or fails on its own
        (its result, or the exception, in order), and

        * on an engine that commits several streams together (``appends_together``),
          the entries of the requests that succeed are in the SAME commit as them
          (one commit for the whole batch when nothing conflicts): after a crash
          both exist or neither does;
        * elsewhere (Redis Cluster, S3, tiered) the entries are written FIRST, marked
          ``ahead`` (naming the event they announce), then the requests; an entry
          whose request failed is voided by an entry saying so. A crash in between
          leaves at worst an entry for a write that did not happen, which
          :meth:`verify` reports as unapplied — never a write without its entry.

        A duplicate (idempotency key already used) writes nothing of its own and gets
        no entry here: its result says ``duplicate=True`` (the caller records it)."""
        if self.backend.appends_together:
            return await self._commit_together(requests, marks)
        return await self._write_ahead(requests, marks)

    async def _commit_together(
        self, requests: Sequence[AppendRequest], marks: Sequence[Sequence[Mark]]
    ) -> list[AppendResult | BaseException]:
        results: list[AppendResult | BaseException | None] = [None] * len(requests)
        waves = _waves(requests)
        retries = 0
        async with self._lock:
            while waves:
                wave = waves.pop(0)
                while wave:
                    bodies = [_mark_body(m, None) for i in wave for m in marks[i]]
                    if not bodies:  # nothing to record: the engine's own batch
                        done = await self.backend.append_batch([requests[i] for i in wave])
                        for i, result in zip(wave, done, strict=True):
                            results[i] = result
                        break
                    entry, head = await self._next_entries(bodies)
                    try:
                        out = await self.backend.append_together(
                            [*(requests[i] for i in wave), entry]
                        )
                    except StoreClosed:
                        raise
                    except Exception as exc:
                        if isinstance(exc, ConflictError) and exc.agent_id == AUDIT_ID:
                            retries += 1
                            if retries >= _RETRIES:
                                raise RetriesExhausted(AUDIT_ID, _RETRIES, exc) from None
                            self._head = None  # another writer recorded: read its head
                            continue
                        culprit = _culprit(wave, requests, exc)
                        if culprit is None:
                            if len(wave) > 1:  # which one? each on its own, then
                                waves[:0] = [[i] for i in wave]
                                break
                            culprit = wave[0]
                        results[culprit] = exc  # nothing was written: the others go again
                        wave.remove(culprit)
                        continue
                    dup = next(
                        (k for k, r in enumerate(out[:-1]) if r is not None and r.duplicate),
                        None,
                    )
                    if dup is not None:  # nothing was written: the others go again
                        results[wave[dup]] = out[dup]
                        del wave[dup]
                        continue
                    for k, i in enumerate(wave):
                        results[i] = out[k]
                    await self._wrote(head)
                    break
        return [r if r is not None else _lost() for r in results]

    async def _write_ahead(
        self, requests: Sequence[AppendRequest], marks: Sequence[Sequence[Mark]]
    ) -> list[AppendResult | BaseException]:
        announced = [(i, m) for i in range(len(requests)) for m in marks[i]]
        first = 0
        if announced:
            first = await self._append_entries(
                [_mark_body(m, _ahead(requests[i], m)) for i, m in announced]
            )
        if len(requests) == 1:
            try:
                results: list[AppendResult | BaseException] = [
                    await self.backend.append(requests[0])
                ]
            except StoreClosed:
                raise
            except Exception as exc:
                results = [exc]
        else:
            results = await self.backend.append_batch(requests)
        voids = []
        for k, (i, m) in enumerate(announced):
            result = results[i]
            if isinstance(result, BaseException):
                reason = type(result).__name__
            elif result.duplicate:
                reason = "duplicate"
            else:
                continue
            outcome = "duplicate" if reason == "duplicate" else f"error:{reason}"
            voids.append(
                _body(
                    m.operation,
                    m.principal,
                    m.agent_id,
                    m.first_seq,
                    m.last_seq,
                    outcome,
                    {"voids": first + k},
                )
            )
        if voids:
            await self._append_entries(voids)
        return results

    async def record_ahead(
        self,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None,
        first_seq: int | None = None,
        last_seq: int | None = None,
        ahead: Any = True,
        detail: Mapping[str, Any] | None = None,
        outcome: str = "ok",
    ) -> int:
        """Record, BEFORE making it, a mutation that cannot share a commit with its
        entry (delete, snapshot, lease, purge, forget...): the entry is marked
        ``ahead`` (with ``ahead``, what :meth:`verify` checks to tell whether it was
        applied); returns its seq, for :meth:`void` when the mutation then fails."""
        data = _body(
            operation,
            principal,
            agent_id,
            first_seq,
            last_seq,
            outcome,
            {**(detail or {}), "ahead": ahead},
        )
        return await self._append_entries((data,))

    async def record_ahead_many(self, marks: Sequence[tuple[Mark, Any]]) -> int:
        """:meth:`record_ahead` of several mutations at once (a page of a schema
        migration's rewrites): one entry per ``(mark, ahead)``, in order, appended
        together; the seq of the first (the others follow it)."""
        return await self._append_entries([_mark_body(m, ahead) for m, ahead in marks])

    async def void_many(self, voids: Sequence[tuple[int, Mark]], exc: BaseException) -> None:
        """:meth:`void` of several entries written by :meth:`record_ahead_many` (each
        ``(entry seq, its mark)``), appended together: their mutations failed."""
        bodies = [
            _body(
                m.operation,
                m.principal,
                m.agent_id,
                None,
                None,
                f"error:{type(exc).__name__}",
                {"voids": entry_seq},
            )
            for entry_seq, m in voids
        ]
        if bodies:
            await self._append_entries(bodies)

    async def void(
        self,
        entry_seq: int,
        operation: str,
        *,
        principal: str | None,
        agent_id: str | None,
        exc: BaseException,
    ) -> None:
        """Record that the mutation announced by entry ``entry_seq`` (see
        :meth:`record_ahead`) failed: nothing, or not all of it, was done."""
        data = _body(
            operation,
            principal,
            agent_id,
            None,
            None,
            f"error:{type(exc).__name__}",
            {"voids": entry_seq},
        )
        await self._append_entries((data,))

    async def _read_head(self) -> tuple[int, bytes, bytes | None]:
        """The stored head, authenticated: the last entry's link (from the link the
        append left, ``Backend.audit_links``, else from the entry itself) and its tag
        checked. Under PostgreSQL's row-level security a tenant's role reads no entry:
        only the head's seq, tag and link."""
        from ..codec.pipeline import ZERO_LINK

        while True:
            seq, tag = await self.backend.head_tag(AUDIT_ID)
            if seq == 0:
                return 0, ZERO_LINK, tag
            link = await self._head_link(seq)
            if link is None:
                raws = await self.backend.read(AUDIT_ID, after_seq=seq - 1, to_seq=seq)
                if raws:
                    raw = raws[-1]
                    link = self.codec.open(
                        AUDIT_ID, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
                    ).link
                elif self.backend.audit_links and (await self.backend.head_tag(AUDIT_ID))[0] != seq:
                    continue  # another writer moved the head (and its link) meanwhile
                else:
                    raise IntegrityError(AUDIT_ID, seq, "the audit log's head entry is missing")
            self.codec.check_head(AUDIT_ID, seq, link, tag)
            return seq, link, tag

    async def _head_link(self, seq: int) -> bytes | None:
        """The link of entry ``seq`` that its append left (None: none left)."""
        if not self.backend.audit_links:
            return None
        snap = await self.backend.latest_snapshot(AUDIT_ID, at_or_below=seq)
        if snap is None or snap.seq != seq:
            return None
        opened = self.codec.open(
            AUDIT_ID, seq, _LINK_KIND, snap.timestamp, snap.payload, snap.checksum
        )
        return opened.prev

    # -- reading ----------------------------------------------------------------------

    async def entries(
        self,
        *,
        agent: str | None = None,
        principal: str | None = None,
        since: float | None = None,
        operation: str | None = None,
        after_seq: int = 0,
    ) -> AsyncIterator[AuditEntry]:
        """The entries in order, each verified (authenticated and chained to the one
        before it; :class:`~statekeeper.errors.IntegrityError` at the first that is
        not), filtered by agent (an id, or a namespace prefix ending in ``/``),
        principal, time (``since``, seconds since the epoch) and operation."""
        async for entry, _ in self._scan(after_seq, strict=True, problems=None):
            if agent is not None and not (
                entry.agent_id == agent
                or (agent.endswith("/") and (entry.agent_id or "").startswith(agent))
            ):
                continue
            if principal is not None and entry.principal != principal:
                continue
            if since is not None and entry.time < since:
                continue
            if operation is not None and entry.operation != operation:
                continue
            yield entry

    async def _scan(
        self,
        after_seq: int,
        *,
        strict: bool,
        problems: list[str] | None,
        seen: list[int] | None = None,
    ) -> AsyncIterator[tuple[AuditEntry, bytes]]:
        from ..codec.pipeline import ZERO_LINK

        prev: bytes | None = ZERO_LINK if after_seq == 0 else None
        expected = after_seq + 1
        cursor = after_seq
        while True:
            page = await self.backend.read(AUDIT_ID, after_seq=cursor, limit=_PAGE)
            for raw in page:
                cursor = raw.seq
                if seen is not None:
                    seen.append(raw.seq)  # read, whether or not it opens
                if raw.seq != expected:
                    what = f"entries {expected}..{raw.seq - 1} are missing (deleted)"
                    if strict or problems is None:
                        raise IntegrityError(AUDIT_ID, expected, what)
                    problems.append(what)
                    prev = None
                expected = raw.seq + 1
                try:
                    opened = self.codec.open(
                        AUDIT_ID, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
                    )
                except StatekeeperError as exc:
                    if strict or problems is None:
                        raise
                    problems.append(f"entry {raw.seq}: {_reason(exc)}")
                    prev = None
                    continue
                if prev is not None and opened.prev != prev:
                    what = (
                        f"entry {raw.seq} does not follow entry {raw.seq - 1} "
                        "(removed or reordered)"
                    )
                    if strict or problems is None:
                        raise IntegrityError(AUDIT_ID, raw.seq, what)
                    problems.append(what)
                prev = opened.link
                yield _entry(raw.seq, raw.timestamp, opened.body), opened.link
            if len(page) < _PAGE:
                return

    async def head(self) -> AuditHead | None:
        """A keyed commitment to the log as it is now (None when it is empty)."""
        seq, link, _ = await self._read_head()
        if seq == 0:
            return None
        key_id, digest = self.codec.witness_digest(AUDIT_ID, seq, link)
        return AuditHead(seq, key_id, digest)

    async def check_readable(self) -> None:
        """Raise :class:`~statekeeper.errors.AccessDenied` when this connection may
        append to the log but not read its entries (PostgreSQL row-level security, a
        tenant's role: ``Backend.reads_audit_log``): through it the log would list as
        empty and verify as truncated. :meth:`verify` and ``statekeeper audit`` check it."""
        with contextlib.suppress(StatekeeperError):  # (a read that fails: verify says so)
            await self.backend.head(AUDIT_ID)  # (opens the engine: the flag is set then)
        if getattr(self.backend, "reads_audit_log", True):
            return
        from urllib.parse import urlsplit

        dsn = str(getattr(self.backend, "dsn", ""))
        role = (urlsplit(dsn).username if "://" in dsn else None) or "(the database role)"
        raise AccessDenied(
            role, "admin", "audit", None,
            "this database role appends to the audit log but may not read its entries"
            " (PostgreSQL row-level security): list and verify it connected as the"
            " schema's owner or as the role of an admin of every namespace",
        )  # fmt: skip

    async def verify(self, witness: AuditHead | None = None) -> AuditReport:
        """Check every entry (authentication, chain, gap-free seqs), the authenticated
        head, and, given the ``witness`` of an earlier head, that the log still holds
        it (else it was rolled back, truncated or rewritten since). A connection that
        may not read the entries is refused (:meth:`check_readable`)."""
        await self.check_readable()
        report = AuditReport()
        ahead = _Ahead()
        checks = StoreChecks(self.codec.keyring.data_keys if self.codec.keyring else None)
        last: tuple[int, bytes] | None = None
        at_witness: bytes | None = None
        seen: list[int] = []
        try:
            async for entry, link in self._scan(
                0, strict=False, problems=report.problems, seen=seen
            ):
                report.entries += 1
                last = (entry.seq, link)
                if entry.operation == "audit" and entry.outcome == MISSING:
                    report.problems.append(
                        f"entry {entry.seq}: the log was found empty when it was written, "
                        "in a store marked as keeping one: the log before it was deleted"
                    )
                ahead.see(entry)
                checks.see(entry)
                if witness is not None and entry.seq == witness.seq:
                    at_witness = link
            seq, tag = await self.backend.head_tag(AUDIT_ID)
        except StatekeeperError as exc:
            report.problems.append(f"the log cannot be read: {_reason(exc)}")
            return report
        end = max(seen, default=0)
        if end == 0 and seq == 0:
            try:
                kept = await self.backend.read_marker(KEPT_MARKER)
            except StatekeeperError as exc:
                report.problems.append(f"the store cannot be read: {_reason(exc)}")
                return report
            if kept:
                report.problems.append(
                    "the log is missing: it has no entry, and the store is marked as "
                    "keeping one (set with its first entry): the log was deleted"
                )
        if last is not None and last[0] != end:
            pass  # the last entry read did not open: already a problem, no head to check
        elif seq != end:
            report.problems.append(
                f"the log's head says {seq} entries but it ends at entry {end} (truncated)"
                if seq > end
                else f"entries after the head ({seq}) were added without it (spliced)"
            )
        elif last is not None:
            try:
                self.codec.check_head(AUDIT_ID, seq, last[1], tag)
            except StatekeeperError as exc:
                report.problems.append(f"the log's head: {_reason(exc)}")
            key_id, digest = self.codec.witness_digest(AUDIT_ID, seq, last[1])
            report.head = AuditHead(seq, key_id, digest)
        try:
            report.unapplied = await ahead.unapplied(self.backend)
            unapplied, problems = await checks.check(self.backend, ahead.skipped)
            report.unapplied.extend(unapplied)
            report.problems.extend(problems)
            report.problems.extend(await unclaimed_events(self.backend, checks))
            report.unchecked = dict(sorted(checks.unchecked.items()))
        except StatekeeperError as exc:
            report.problems.append(f"the store cannot be read: {_reason(exc)}")
        if witness is not None:
            if end < witness.seq:
                report.problems.append(
                    f"rolled back: the witness saw {witness.seq} entries, the log has {end}"
                )
            elif at_witness is None or not self.codec.check_witness_digest(
                AUDIT_ID, witness.seq, at_witness, witness.key_id, witness.digest
            ):
                report.problems.append(
                    f"rewritten: entry {witness.seq} is not the one the witness saw"
                )
        return report


def _body(
    operation: str,
    principal: str | None,
    agent_id: str | None,
    first_seq: int | None,
    last_seq: int | None,
    outcome: str,
    detail: Mapping[str, Any] | None,
) -> bytes:
    body: dict[str, Any] = {
        "principal": principal,
        "op": operation,
        "outcome": outcome,
        "agent": agent_id,
        "seqs": [first_seq, last_seq] if first_seq is not None else None,
    }
    if detail:
        body["detail"] = dict(detail)
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


#: operations after which an agent's earlier events may be gone for good
_ERASING = frozenset({"delete", "purge", "forget", "retention", "rekey", "migrate"})


class _Ahead:
    """The entries written ahead of their mutation (``detail["ahead"]``), gathered
    while :meth:`AuditLog.verify` reads the log, then checked against the store."""

    __slots__ = ("compacted", "erased", "pending", "rekeyed", "restores", "skipped")

    def __init__(self) -> None:
        # entry seq -> (agent, seq, checksum, must be there)
        self.pending: dict[int, tuple[str, int, str, bool, str]] = {}
        self.erased: dict[str, int] = {}  # agent -> seq of its last erasing entry
        # agent -> (entry seq, head seq, key) of its last rekey written ahead
        self.rekeyed: dict[str, tuple[int, int, str | None]] = {}
        # (entry seq, agent) of appends erased or rewritten since: for StoreChecks
        self.skipped: list[tuple[int, str]] = []
        # restores started (entry first) that no entry finished or voided: stopped
        self.restores: dict[int, Any] = {}
        # entry seq -> (agent, base) of each compaction recorded made (not voided): the
        # events up to its base are gone, so an append written ahead of one of them
        # cannot be told by reading it (tiered: its saves' entries are written ahead)
        self.compacted: dict[int, tuple[str, int]] = {}

    def see(self, entry: AuditEntry) -> None:
        detail, agent = entry.detail, entry.agent_id
        voided = detail.get("voids")
        if type(voided) is int:
            self.pending.pop(voided, None)
            self.restores.pop(voided, None)
            self.compacted.pop(voided, None)
            if agent is not None and self.rekeyed.get(agent, (0,))[0] == voided:
                del self.rekeyed[agent]
        if entry.operation == "restore":  # (governance/backup/restoreaudit.py)
            if entry.outcome == "started" and "ahead" in detail:
                self.restores[entry.seq] = detail.get("backups")
            if type(detail.get("finishes")) is int:
                self.restores.pop(detail["finishes"], None)
        if agent is None:
            return
        if entry.operation in _ERASING and entry.outcome.startswith(("ok", "done")):
            self.erased[agent] = entry.seq
        if (
            entry.operation == "compact"
            and entry.outcome.startswith(("ok", "done"))
            and type(entry.last_seq) is int
        ):
            self.compacted[entry.seq] = (agent, entry.last_seq)
        mark = detail.get("ahead")
        if entry.operation == "rekey":
            # a later rekey of the agent supersedes an earlier one (its key differs)
            self.rekeyed.pop(agent, None)
            rekey = mark.get("rekey") if isinstance(mark, dict) else None
            if isinstance(rekey, list) and len(rekey) == 2 and type(rekey[0]) is int:
                self.rekeyed[agent] = (entry.seq, rekey[0], rekey[1])
            return
        if isinstance(mark, str) and entry.last_seq is not None:  # an append: it is there
            self.pending[entry.seq] = (agent, entry.last_seq, mark, True, entry.operation)
        elif isinstance(mark, dict) and isinstance(mark.get("gone"), list):  # a delete
            seq, checksum = mark["gone"]
            self.pending[entry.seq] = (agent, seq, checksum, False, entry.operation)

    async def unapplied(self, backend: Backend) -> list[str]:
        out = [
            f"entry {seq}: the restore of {backups!r} it records was not finished (it "
            "stopped part-way: run it again with --skip-existing to finish it)"
            for seq, backups in self.restores.items()
        ]
        for entry_seq, (agent, seq, checksum, there, operation) in sorted(self.pending.items()):
            if there and self.erased.get(agent, 0) > entry_seq:
                self.skipped.append((entry_seq, agent))  # erased since: StoreChecks tells
                continue
            raws = await backend.read(agent, after_seq=seq - 1, to_seq=seq)
            found = bool(raws) and raws[-1].seq == seq and raws[-1].checksum.hex() == checksum
            if there and not raws and self._compacted_since(agent, entry_seq, seq):
                continue  # removed since by a compaction (StoreChecks checks that one)
            if found != there:
                what = "was not written" if there else "was not deleted"
                out.append(
                    f"entry {entry_seq}: the {operation} of {agent!r} at seq {seq} it "
                    f"records {what} (the writer stopped between the entry and the write)"
                )
        for agent, (entry_seq, seq, key) in sorted(self.rekeyed.items(), key=lambda kv: kv[1]):
            if self.erased.get(agent, 0) > entry_seq:
                continue  # deleted, purged, forgotten or migrated since
            raws = await backend.read(agent, after_seq=seq - 1, to_seq=seq)
            if not raws or raws[-1].seq != seq:
                continue  # gone since (compacted, deleted): nothing left to tell by
            header = Codec.header(raws[-1].payload)
            under = header.key_id if header is not None else "(unreadable)"
            if under != key:
                out.append(
                    f"entry {entry_seq}: the rekey of {agent!r} to key {key!r} it records "
                    f"was not applied (the record at seq {seq} is under {under!r}; the "
                    "rekey stopped between the entry and the rewrite: run it again)"
                )
        return out

    def _compacted_since(self, agent: str, entry_seq: int, seq: int) -> bool:
        """Whether a compaction recorded after entry ``entry_seq`` (not voided) removed
        ``agent``'s event at ``seq`` (its base at or above it): nothing is left there
        to compare — as on an engine that commits the append with its entry, where
        nothing is marked ahead, nothing to tell."""
        return any(
            at > entry_seq and who == agent and base >= seq
            for at, (who, base) in self.compacted.items()
        )


def _mark_body(mark: Mark, ahead: Any) -> bytes:
    return _body(
        mark.operation,
        mark.principal,
        mark.agent_id,
        mark.first_seq,
        mark.last_seq,
        "ok",
        None if ahead is None else {"ahead": ahead},
    )


def _ahead(request: AppendRequest, mark: Mark) -> str:
    """What an entry written ahead names: the checksum of the last event it records."""
    for event in request.events:
        if event.seq == mark.last_seq:
            return event.checksum.hex()
    return request.events[-1].checksum.hex()


def _waves(requests: Sequence[AppendRequest]) -> list[list[int]]:
    """The requests' indexes in runs of distinct streams (one commit takes one request
    per stream), in order: a stream's second request starts the next run."""
    waves: list[list[int]] = [[]]
    ids: set[str] = set()
    for i, request in enumerate(requests):
        if request.agent_id in ids:
            waves.append([])
            ids = set()
        waves[-1].append(i)
        ids.add(request.agent_id)
    return [wave for wave in waves if wave]


def _culprit(wave: list[int], requests: Sequence[AppendRequest], exc: BaseException) -> int | None:
    """The request of ``wave`` an error names (by its agent), if one does."""
    agent_id = getattr(exc, "agent_id", None)
    for i in wave:
        if requests[i].agent_id == agent_id:
            return i
    return None


def _lost() -> BaseException:  # pragma: no cover - every request gets a result
    return RuntimeError("no result")


def _reason(exc: BaseException) -> str:
    return exc.reason if isinstance(exc, IntegrityError) else str(exc)


def _entry(seq: int, ts: float, body: bytes) -> AuditEntry:
    data = orjson.loads(body)
    seqs = data.get("seqs") or (None, None)
    return AuditEntry(
        seq=seq,
        time=ts,
        principal=data.get("principal"),
        operation=data.get("op", "?"),
        outcome=data.get("outcome", "?"),
        agent_id=data.get("agent"),
        first_seq=seqs[0],
        last_seq=seqs[1],
        detail=data.get("detail") or {},
    )


def read_witness(path: str | os.PathLike[str]) -> AuditHead | None:
    """The audit head kept in ``path`` (None when the file does not exist yet)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigurationError(f"cannot read {os.fspath(path)}: {exc.strerror}") from None
    return AuditHead.loads(text, os.fspath(path))


def write_witness(path: str | os.PathLike[str], head: AuditHead) -> None:
    """Keep ``head`` in ``path`` (written to a temporary file, then renamed)."""
    from pathlib import Path

    from .._files import write_atomically

    write_atomically(Path(os.fspath(path)), head.dumps() + "\n")
