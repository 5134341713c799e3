"""Key rotation: re-encrypt stored records under the keyring's active key, online.

Rotation, step by step (``docs/security.md``):

1. add the new key to the keyring and make it *active* everywhere the store is used
   (new records are then encrypted with it; records under older keys still decrypt);
2. run ``statekeeper rekey`` (or :func:`rekey`): every record not yet under the active
   key — and every record stored in the clear, when a store is being encrypted for the
   first time — is verified and re-encrypted, one agent at a time, while the store
   stays in use;
3. check with ``statekeeper keys status`` that no record names the old key, then remove
   it from the keyring.

Re-encryption never changes a record's content, position or chain link (links are
computed over the plaintext, see :mod:`statekeeper.codec.pipeline`), so writers that
append meanwhile stay valid. Each batch is written with
:meth:`~statekeeper.backends.base.Backend.rewrite`, which applies only while the stream
head is the one that was read; a concurrent append makes the batch retry. A stream is
re-authenticated (its head tag recomputed under the active key) only after every one
of its records and its head verified: rekey never launders a damaged stream.

Progress is durable twice over: each record names its key in its clear header, so a
rerun skips what is done; and an optional progress file records the last agent
finished, so a resumed run does not even re-read finished agents.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..arguments import AUDIT_STREAM, HOLDS_STREAM
from ..backends.identity import store_identity
from ..codec import ZERO_LINK, Codec
from ..codec.datakeys import uses_data_key
from ..codec.pipeline import CHAIN_BROKEN
from ..errors import (
    AgentForgotten,
    ConflictError,
    IntegrityError,
    RewriteBelowPrunedBase,
    StatekeeperError,
)
from ..records import RawEvent, RawSnapshot, RewriteRequest, StreamChange
from .held import usable_witness
from .keyusage import key_usage
from .rekey_checks import (
    check_rekeyable,
    forgotten,
    legacy_fingerprint,
    remake_marks,
    rewrap_unwalked,
    sealed_now,
)
from .rekey_keys import rekey_keys
from .rekey_landed import Ours
from .rekey_progress import RekeyProgress, RekeyStats, refuse_another_run
from .rekey_retry import TRIES as _TRIES
from .rekey_retry import backoff as _backoff
from .rekey_retry import gap_or_pruned, given_up, walk_again

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = [
    "PROGRESS_EVERY",
    "PROGRESS_SECONDS",
    "TOGETHER_MAX",
    "RekeyProgress",
    "RekeyStats",
    "key_usage",
    "rekey",
    "rekey_agent",
    "rekey_audit_log",
]

_PAGE = 500
_SNAPSHOT = "snapshot"
#: the progress file is saved (fsynced) after this many agents finished since the last
#: save, or this many seconds, whichever comes first; always when the run ends or stops
#: by an exception. A save names only agents whose rewrites have returned (committed:
#: durable, as every write of the Backend contract), so a crash costs at most this
#: unsynced tail, redone by the resume (the records say which are done already).
PROGRESS_EVERY = 200
PROGRESS_SECONDS = 0.5


class _Restart(StatekeeperError):
    """The stream was deleted or re-created under rekey: walk it again from seq 1."""


async def rekey_agent(store: StateStore, agent_id: str, *, batch: int = _PAGE) -> RekeyStats:
    """Re-encrypt one agent's records under the active key (see the module docs).

    Raises :class:`~statekeeper.errors.IntegrityError` (writing nothing more) when a
    record, the chain or the head does not verify.
    """
    check_rekeyable(store)
    from ..store.governed import governance_of  # (the store imports this package)

    governance = governance_of(store)
    if governance is not None:  # a store opened as a principal: admin of the namespace
        await governance.require(agent_id, "admin", "rekey")
    # the store is encrypted from now on: its store-level marker is set before any
    # record is rewritten (one small read per agent once it is)
    from ..store.keyguard import key_family, mark_encrypted

    await mark_encrypted(store.backend)
    await key_family(store.backend, store.codec)  # what it writes with: the store's keys
    stats = RekeyStats(agents=1)
    # its idempotency records first, under the active key: a retry is one after it
    stats.keys, stats.keys_left = await rekey_keys(store, agent_id, store.codec)
    log = _together(store, governance)
    if log is not None and await store.backend.head(agent_id) <= TOGETHER_MAX:
        await _rekey_together(store, agent_id, stats, governance, log)
        return stats
    # entry first (docs/governance.md): recorded before any record is rewritten, naming
    # the key and the head it re-encrypts through, so a rekey killed after its rewrite
    # has its entry, and one killed before it is reported by ``audit verify`` as not
    # applied (the record at that seq is not under the key)
    entry = await _announce(store, governance, agent_id)
    await _rekey_audited(store, agent_id, batch, stats, governance, entry, agent_id, {})
    return stats


#: the most events an agent may have for its rekey to be ONE commit with its audit
#: entry: the whole stream's re-encrypted records are held in memory until that commit
#: (SQLite and PostgreSQL take a transaction of any size; the rekeying process's
#: memory is the limit: ~100 MB at 1 kB per record). A longer stream is re-encrypted
#: in batches of ``batch`` records, its entry written first (marked ``ahead``).
TOGETHER_MAX = 100_000


def _together(store: StateStore, governance: Any) -> Any:
    """The store's audit log when an agent's rewrite and its entry can be ONE commit
    (``record_with_change`` on an engine with ``append_together``: memory, SQLite,
    PostgreSQL), else None."""
    log = getattr(governance, "audit", None)
    if (
        log is None
        or not getattr(log, "records_with_writes", False)
        or not callable(getattr(log, "record_with_change", None))
        or getattr(log, "backend", None) is not store.backend
        or not store.backend.changes_leases_and_rewrites
    ):
        return None
    return log


async def _rekey_together(
    store: StateStore, agent_id: str, stats: RekeyStats, governance: Any, log: Any
) -> None:
    """Re-encrypt the whole stream of ``agent_id`` and commit the rewrite with its
    ``rekey`` entry (naming the key and the head it covers) in ONE commit: after a
    crash at any point both exist or neither does. Nothing to re-encrypt: the entry
    alone (nothing changed). A failure writes nothing but its refusal entry."""
    keyring = store.codec.keyring
    active = keyring.active_id if keyring is not None else None
    committed = False

    async def commit(request: RewriteRequest) -> None:
        nonlocal committed
        records = len(request.events) + len(request.snapshots)
        await log.record_with_change(
            StreamChange(agent_id, rewrite=request),
            "rekey",
            principal=governance.principal,
            detail={"key": active, "head": request.expected_seq, "records": records},
        )
        committed = True

    try:
        await _rekey_walking_again(store, agent_id, 0, stats, None, commit)
    except BaseException as exc:
        await governance.failed("rekey", agent_id, exc)
        raise
    if not committed:
        await governance.record("rekey", agent_id, detail={"key": active, "records": 0})


async def _rekey_audited(
    store: StateStore,
    stream: str,
    batch: int,
    stats: RekeyStats,
    governance: Any,
    entry: int | None,
    agent_id: str | None,
    detail: dict[str, Any],
    codec: Codec | None = None,
) -> None:
    """Re-encrypt ``stream``, walking it again when it is deleted or re-created under
    the rekey; the audit ``entry`` written ahead is voided when it fails, and without one
    (an audit sink that cannot go first) the rekey of ``agent_id`` is recorded after."""
    try:
        await _rekey_walking_again(store, stream, batch, stats, codec)
    except BaseException as exc:
        if governance is not None and entry is not None:
            await governance.voided(entry, "rekey", agent_id, exc)
        raise
    if governance is not None and entry is None:
        await governance.record("rekey", agent_id, detail={**detail, "records": stats.events})


async def _announce(store: StateStore, governance: Any, agent_id: str) -> int | None:
    """The rekey entry of ``agent_id``, written ahead of the rewrite (None without an
    audit log that can): marked with the active key and the head seq it covers."""
    if governance is None:
        return None
    keyring = store.codec.keyring
    active = keyring.active_id if keyring is not None else None
    head = await store.backend.head(agent_id)
    mark: Any = {"rekey": [head, active]} if head else True
    seq: int | None = await governance.ahead("rekey", agent_id, None, mark=mark)
    return seq


async def _rekey_walking_again(
    store: StateStore,
    stream: str,
    batch: int,
    stats: RekeyStats,
    codec: Codec | None = None,
    commit: Callable[[RewriteRequest], Awaitable[None]] | None = None,
) -> None:
    """:func:`_rekey_stream`, walked again from the start when the stream is deleted or
    re-created under it (``_Restart``); a stream that keeps moving after 20 walks is a
    :class:`ConflictError`. A rewrite a prune refused (planned before it, nothing of it
    written: :class:`RewriteBelowPrunedBase`) is planned again so, after a pause; the
    last of :data:`.rekey_retry.REPLANS` such refusals is raised."""
    walks = pruned = 0
    ours = Ours()  # the seqs it re-encrypted: a walk again finds them done
    while True:
        skipped = stats.skipped  # (a walk walked again: its records are counted again)
        try:
            return await _rekey_stream(store, stream, batch, stats, ours, codec, commit)
        except _Restart:
            stats.retries, walks, stats.skipped = stats.retries + 1, walks + 1, skipped
            if walks >= 20:
                raise ConflictError(stream, 0, await store.backend.head(stream)) from None
        except RewriteBelowPrunedBase as exc:
            stats.retries, pruned, stats.skipped = stats.retries + 1, pruned + 1, skipped
            walk_again(exc, stream, pruned)  # (raises it: another's, or the last walk)
            await _backoff(pruned - 1)


async def _rekey_stream(
    store: StateStore,
    agent_id: str,
    batch: int,
    stats: RekeyStats,
    ours: Ours,
    codec: Codec | None = None,
    commit: Callable[[RewriteRequest], Awaitable[None]] | None = None,
) -> None:
    """Re-encrypt ``agent_id``'s stream (``ours``: the seqs of it re-encrypted by the
    walks before, not counted as skipped), writing a batch of ``batch`` records at a
    time and the rest with the snapshots and the head tag; with ``commit``, the whole
    stream in ONE rewrite handed to it (``batch`` ignored) instead of
    ``backend.rewrite``."""
    codec = codec if codec is not None else store.codec
    reader = codec.migrating()  # also opens records written without a key
    active = codec.keyring.active_id if codec.keyring is not None else ""
    own_keys = False
    if codec.keyring is not None and codec.keyring.data_keys is not None:
        # per-agent data keys: wrap the agent's under the active master key first, so
        # the records re-sealed below name it (and the old master key can retire)
        codec.keyring.rewrap(agent_id)
        own_keys = True
    legacy = legacy_fingerprint(codec, agent_id) if own_keys else None

    backend = store.backend
    link: bytes = ZERO_LINK
    cursor = 0
    pending: list[tuple[RawEvent, RawEvent]] = []  # (as read, re-encrypted)
    walked: tuple[bytes, ...] = ()  # the checksums of the record at ``cursor`` (read, new)
    links: dict[int, bytes] = {}  # the link at each seq that has a snapshot

    async def flush() -> None:
        """Write ``pending`` while the stream is the one walked; appends only delay it."""
        last_read, last_new = pending[-1]
        refused: ConflictError | None = None
        for attempt in range(_TRIES):
            head, tag = await backend.head_tag(agent_id)
            # the head first, then identity: a stream re-created after this read makes
            # the rewrite's compare-and-set fail; one re-created before, this check
            if head < cursor:
                raise _Restart
            rows = await backend.read(agent_id, last_read.seq - 1, last_read.seq)
            if not rows or rows[0].checksum not in (last_read.checksum, last_new.checksum):
                raise _Restart
            try:
                await ours.rewriting(
                    backend.rewrite,
                    RewriteRequest(agent_id, head, tag, tuple(new for _, new in pending)),
                )
            except ConflictError as exc:  # a writer appended meanwhile: try again
                refused = exc
                stats.retries += 1
                await _backoff(attempt)
                continue
            stats.events += len(pending)
            ours.update(raw.seq for raw, _ in pending)
            pending.clear()
            return
        raise await given_up(backend, agent_id, head, refused)

    refused: ConflictError | None = None
    for attempt in range(_TRIES):  # (refused by a writer: paused, tried again, bounded)
        head, tag = await backend.head_tag(agent_id)
        if head == 0:
            return  # deleted: nothing left to re-encrypt
        if head < cursor:
            raise _Restart
        snaps: list[RawSnapshot] = []
        below: int | None = head
        while below is not None and below >= 1:
            raw_snap = await backend.latest_snapshot(agent_id, below)
            if raw_snap is None:
                break
            snaps.append(raw_snap)
            below = raw_snap.seq - 1
        wanted = {s.seq for s in snaps}
        if cursor == 0:  # compacted by retention: the stream starts at its base snapshot
            first = await backend.read(agent_id, 0, None, limit=1)
            base = first[0].seq - 1 if first else 0
            if base > 0:
                at_base = next((s for s in snaps if s.seq == base), None)
                if at_base is None:
                    raise IntegrityError(agent_id, 1, "gap in the stream (no base snapshot)")
                opened_base = reader.open(
                    agent_id,
                    base,
                    _SNAPSHOT,
                    at_base.timestamp,
                    at_base.payload,
                    at_base.checksum,
                )
                if opened_base.prev is None:
                    raise IntegrityError(agent_id, base, "the base snapshot carries no link")
                cursor, link = base, opened_base.prev
                links[base] = link
        while cursor < head:
            page = await backend.read(agent_id, cursor, head, limit=_PAGE)
            if not page:
                raise IntegrityError(agent_id, cursor + 1, f"stream ends at seq {cursor}")
            for raw in page:
                if raw.seq != cursor + 1:  # (a prune under the walk: walked again)
                    raise await gap_or_pruned(backend, agent_id, cursor, _Restart)
                opened = reader.open(
                    agent_id, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
                )
                if opened.prev is not None and opened.prev != link:
                    raise IntegrityError(agent_id, raw.seq, CHAIN_BROKEN)
                link = opened.link
                cursor = raw.seq
                walked = (raw.checksum,)
                if raw.seq in wanted:
                    links[raw.seq] = link
                own = own_keys and uses_data_key(agent_id)
                if sealed_now(opened, raw.payload, active, own, legacy):
                    stats.events += ours.landed(raw)  # (a part-way rewrite's: ours)
                    stats.skipped += raw.seq not in ours
                    continue
                sealed = codec.seal(
                    agent_id,
                    raw.seq,
                    raw.type,
                    raw.timestamp,
                    opened.body,
                    opened.prev or ZERO_LINK,
                    fmt=opened.format,
                    legacy_link=opened.prev is None,
                    algorithm=opened.algorithm,
                )
                assert sealed.link == opened.link  # the chain is untouched
                walked = (raw.checksum, sealed.checksum)
                pending.append(
                    (
                        raw,
                        RawEvent(raw.seq, raw.type, raw.timestamp, sealed.payload, sealed.checksum),
                    )
                )
            if commit is None and len(pending) >= batch:
                await flush()
        # the whole stream up to ``head`` verified: its head too, before re-authenticating
        reader.check_head(agent_id, head, link, tag)
        new_snaps: list[RawSnapshot] = []
        landed = 0  # (found as a part-way rewrite of this rekey's wrote them: ours)
        for raw_snap in snaps:
            opened = reader.open(
                agent_id,
                raw_snap.seq,
                _SNAPSHOT,
                raw_snap.timestamp,
                raw_snap.payload,
                raw_snap.checksum,
            )
            at = links.get(raw_snap.seq)
            if at is None:  # a snapshot taken at a seq walked before it existed
                rows = await backend.read(agent_id, raw_snap.seq - 1, raw_snap.seq)
                if not rows:
                    raise IntegrityError(agent_id, raw_snap.seq, "snapshot past the end")
                row = rows[0]
                at = reader.open(
                    agent_id, row.seq, row.type, row.timestamp, row.payload, row.checksum
                ).link
            if opened.prev is not None and opened.prev != at:
                raise IntegrityError(
                    agent_id, raw_snap.seq, "snapshot does not belong to the chain"
                )
            if sealed_now(
                opened, raw_snap.payload, active, own_keys and uses_data_key(agent_id), legacy
            ):
                found = ours.snapshot_landed(raw_snap)
                landed, stats.skipped = landed + found, stats.skipped + (not found)
                continue
            sealed = codec.seal(agent_id, raw_snap.seq, _SNAPSHOT, raw_snap.timestamp,
                                opened.body, at, fmt=opened.format,
                                algorithm=opened.algorithm)  # fmt: skip
            new_snaps.append(
                RawSnapshot(raw_snap.seq, raw_snap.timestamp, sealed.payload, sealed.checksum)
            )
        new_tag = codec.head_tag(agent_id, head, link) if codec.head_key_id(tag) != active else None
        landed_head = new_tag is None and ours.head_landed(tag)
        if not pending and not new_snaps and new_tag is None:
            stats.snapshots, stats.heads = stats.snapshots + landed, stats.heads + landed_head
            return
        final = RewriteRequest(
            agent_id, head, tag, tuple(new for _, new in pending), tuple(new_snaps), new_tag
        )
        try:
            await ours.rewriting(commit or backend.rewrite, final)
        except ConflictError as exc:
            if exc.agent_id != agent_id:
                raise
            refused = exc
            stats.skipped -= len(snaps) - len(new_snaps) - landed  # (counted by the next try)
            # appended meanwhile: walk the new records too, then finish at the new head;
            # but a head rewritten in place (a migration, its rollback or finalize: the
            # same seq, another link) is walked again, from the start — its records
            # would not follow the link walked, nor its tag match it
            stats.retries += 1
            if walked:
                rows = await backend.read(agent_id, head - 1, head)
                if not rows or rows[0].checksum not in walked:
                    raise _Restart from None
            await _backoff(attempt)
            continue
        stats.events += len(pending)
        stats.snapshots += len(new_snaps) + landed
        stats.heads += new_tag is not None or landed_head
        return
    raise await given_up(backend, agent_id, head, refused)


async def rekey(
    store: StateStore,
    *,
    progress_file: str | os.PathLike[str] | None = None,
    on_agent: Callable[[str, RekeyStats, RekeyStats], Any] | None = None,
    batch: int = _PAGE,
) -> RekeyStats:
    """Re-encrypt every agent's records under the active key, agent by agent in id
    order. ``on_agent(agent_id, agent_stats, total)`` is called after each agent.

    With ``progress_file``, the last finished agent is recorded durably, with the store
    and the key — every :data:`PROGRESS_EVERY` agents or :data:`PROGRESS_SECONDS`,
    when the run stops by an exception, and at its end (never an agent whose rewrites
    have not returned) — and a run interrupted earlier (same active key, not finished)
    resumes after it: after a crash, the agents since the last save are walked again
    (their records already under the key are skipped). A file of a run on another
    store, or one whose last finished agent is not under the key in this store (the
    store replaced by a copy or a restore since), raises
    :class:`~statekeeper.errors.ProgressOfAnotherRun` before anything is done: resuming
    would skip this store's agents up to it. Returns the totals of this run.
    """
    codec = check_rekeyable(store)
    active = codec.keyring.active_id if codec.keyring is not None else ""
    await store.flush()
    path = Path(progress_file) if progress_file is not None else None
    here = store_identity(store.backend)
    progress = RekeyProgress(target_key=active, store=here)
    if path is not None:
        earlier = RekeyProgress.load(path)
        if earlier is not None and earlier.target_key == active and not earlier.done:
            await refuse_another_run(store, path, earlier, here)
            progress = earlier
            progress.store = progress.store or here
    total = RekeyStats()
    after = progress.after
    vault = codec.keyring.data_keys if codec.keyring is not None else None
    from ..store.keyguard import key_family

    await key_family(store.backend, store.codec)  # (whose tombstones count here)
    witness = await usable_witness(store)  # (its marks made again under the active key)
    unsaved, saved_at = 0, time.monotonic()  # agents finished since the last save
    try:
        while True:
            page = await store.list_agents(after=after, limit=_PAGE)
            for info in page:
                if vault is not None and await forgotten(vault, store, info.agent_id):
                    # its data key is destroyed: nothing of it opens, nothing to re-encrypt
                    # (it failed the whole run with AgentForgotten: no rotation possible)
                    result = RekeyStats(forgotten=1)
                else:
                    try:
                        result = await rekey_agent(store, info.agent_id, batch=batch)
                    except AgentForgotten:  # a restored copy's: its source forgot it
                        result = RekeyStats(forgotten=1)  # (the tombstone is the source's)
                    else:
                        if witness is not None:
                            await witness.rekeyed(store, info.agent_id)
                total.add(result)
                # (only now: every rewrite of the agent has returned, committed)
                progress.stats.add(result)
                progress.after = info.agent_id
                unsaved += 1
                if path is not None and (
                    unsaved >= PROGRESS_EVERY or time.monotonic() - saved_at >= PROGRESS_SECONDS
                ):
                    progress.save(path)
                    unsaved, saved_at = 0, time.monotonic()
                if on_agent is not None:
                    on_agent(info.agent_id, result, total)
            if len(page) < _PAGE:
                break
            after = page[-1].agent_id
    except BaseException:
        # stopped (Ctrl-C, an error): the agents finished are recorded; a crash that
        # runs no handler leaves the file of the last save, a tail behind at most
        if path is not None and unsaved:
            progress.save(path)
        raise
    total.add(await rekey_audit_log(store, batch=batch))
    if await store.backend.head(HOLDS_STREAM):  # the legal holds, sealed as a stream is
        await _rekey_walking_again(store, HOLDS_STREAM, batch, total)
    await _rekey_feed_streams(store, batch, total)
    total.data_keys += await rewrap_unwalked(store)
    await remake_marks(store, witness)  # (marks still under another key: a resumed run's)
    progress.done = True
    if path is not None:
        progress.save(path)
    return total


async def _rekey_feed_streams(store: StateStore, batch: int, total: RekeyStats) -> None:
    """Re-encrypt the change feed's tombstone streams (and a crash's delete intents):
    left under the old key, the feed and a restore raised ``KeyNotFound`` on the first
    tombstone once that key was retired. Every tenant's: a store admin's run only."""
    from ..store.feed_intents import sealed_streams
    from ..store.governed import governance_of

    governance = governance_of(store)
    if not (store.backend.reads_audit_log and (governance is None or governance.store_admin())):
        return
    for stream in await sealed_streams(store.backend):
        await _rekey_walking_again(store, stream, batch, total)


async def rekey_audit_log(store: StateStore, *, batch: int = _PAGE) -> RekeyStats:
    """Re-encrypt the store's audit log (:mod:`statekeeper.governance.audit`) under
    the active key of the keyring it is sealed with — the audit's own (``Audit(keyring=
    ...)``) on a store opened with one, else the store's — verifying every entry, the
    chain and the authenticated head first, as for an agent. Run by :func:`rekey`
    after the agents. On a store opened as a principal it needs ``admin`` on every
    namespace (``**``); a narrower admin's run leaves the log as it is (and says so:
    nothing counted). Returns what was done (``agents`` 1 when there is a log)."""
    from ..store.governed import governance_of  # (the store imports this package)

    stats = RekeyStats()
    governance = governance_of(store)
    if not (store.backend.reads_audit_log and (governance is None or governance.store_admin())):
        return stats  # (reads_audit_log False: a tenant's database role, row security)
    if await store.backend.head(AUDIT_STREAM) == 0:
        return stats
    audit = governance.audit if governance is not None else None
    codec = getattr(audit, "codec", None)
    if not isinstance(codec, Codec):
        if store.codec.keyring is None:  # pragma: no cover - _check refused it
            return stats
        codec = Codec(keyring=store.codec.keyring)
    stats.agents = 1
    # entry first, as for an agent (it is re-encrypted with the rest of the log)
    entry = None
    if governance is not None:
        entry = await governance.ahead("rekey", None, {"audit_log": True})
    detail = {"audit_log": True}
    await _rekey_audited(store, AUDIT_STREAM, batch, stats, governance, entry, None, detail, codec)
    return stats
