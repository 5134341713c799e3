"""``restore``: a backup (a full one and its incrementals) into any store.

Everything is checked before anything is written: each file's key and header, every
chunk against the manifest (position, SHA-256, authentication), the chain of files
(each incremental's parent is the file before it), every stream against the manifest
(seqs, counts, digest) and then every record with the target store's keys — each
event and snapshot authenticated and decrypted, the hash chain followed from seq 1 to
the head — and the target must not hold any of the agents yet. Only then are the
streams appended (with their idempotency keys and head tags, re-made by the target's
codec). A wrong backup key raises :class:`~statekeeper.errors.BackupKeyMismatch`; a
damaged, truncated, edited or incomplete backup
:class:`~statekeeper.errors.BackupCorrupt`; either way nothing is restored.

**Either format.** A version-2 or 5 backup (a SQLite store's file copy,
:mod:`.filecopy`) is decrypted into a temporary file (``$TMPDIR``) once, before the
checking pass, and its streams read from it at each pass, each checked against the
manifest's heads (version 5 and 6: each stream's head tag, then checked against the
chain followed with the target's keys, and kept as the target's tag when made with
its active key); an image holding an event or a snapshot outside its streams (past a
head, or of an agent without one: no consistent backup does) is refused, naming it
(:func:`.filecopy.refuse_strays`); then everything below applies. A
full page backup followed by incremental backups by pages (version 4) is rebuilt once
into one image (:mod:`.pagechain`, checked against the last manifest's page digests)
and restored as that last backup's full image.

**One image, one scan.** The checking pass of one store image is first tried as one
merged scan of its rows (:mod:`.imagecheck`: no per-stream bundle); anything it does
not take, or anything wrong, is checked by the general pass below, which names it.

**Written in bulk.** One store image (a full file backup, or a run of page backups
rebuilt) restored whole into an empty SQLite store, every head tag the target's own, is
written by SQLite alone after the checking pass (:mod:`.imagewrite`: ``INSERT ...
SELECT`` from the attached image in one transaction, the same rows the appends would
write, no record a Python object); any other restore appends (:mod:`.writepass`).

**Compacted streams** (retention's ``keep_last``: a base snapshot, history before it
gone) come with their base snapshot (an entry's 8th element); the manifest names the
base seq and its snapshot's digest. The check starts the chain at the base (its
snapshot opened with the target's keys: it carries the link of the removed event
there), as ``verify`` does, and the target gets the same compacted stream
(:meth:`~statekeeper.backends.base.Backend.append_from_base`: the base and the first
events in one write), or, on an engine that cannot hold one (without
``Capability.BASE_IMPORT``), a :class:`~statekeeper.errors.BackupError` naming the
agent before anything is written.

**Delta snapshots.** A stream's latest snapshot that is a delta or a tail snapshot
(its base is not in the backup) is written, then rebuilt whole at its seq by the
target from the restored events (:mod:`.wholesnaps`): the restored store verifies clean.

**Streamed.** The files are read twice, chunk by chunk: a checking pass (everything
above) that keeps per agent only its head, chain link and where its snapshot is, then
a writing pass that re-reads (and re-authenticates) each chunk (a file backup: its
image decrypted before the checking pass) and appends its parts
(:mod:`.writepass`: the agents of a chunk in batches, committed together).
Memory is one chunk plus a few dozen bytes per agent, whatever the backup's size.

statekeeper's own streams in a backup (the source's audit log) are restored only into a
target that has none yet: a target's audit log is never overwritten or merged into (its
hash chain is its own); the backup's copy is then left out and listed in
``RestoreResult.kept_internal``. The legal holds are the exception to leaving it
out: each hold in force in the backup that the target lacks is placed in it, audited
(:mod:`.restoreholds`: a restore never leaves a held agent unheld).

A backup holds stored (full) ids and restores them as they are. A target opened in a
namespace (``StateStore(url, namespace="acme")``) takes a backup only when every
stream in it lies inside that namespace (a backup of that namespace or one below);
otherwise :class:`~statekeeper.errors.BackupError` names one outside, before anything
is written. ``RestoreResult.forgotten`` names ids as the target does (relative).

Agents whose data key was destroyed (``statekeeper forget``) cannot be verified or
read: they are left out and listed in ``RestoreResult.forgotten``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...arguments import HOLDS_STREAM
from ...backends.base import Capability
from ...codec import ZERO_LINK
from ...codec.chaincheck import follow_chain
from ...errors import AgentForgotten, BackupCorrupt, BackupError, IntegrityError, KeyNotFound
from ...store.body import SNAPSHOT_TYPE
from ...store.holds import list_holds
from ...store.namespaced import NamespacedStateStore
from ..hooks import (
    AuditSink,
    require,
    require_namespace,
    store_namespace,
    store_sink,
)
from .entries import iter_entries, read_entries
from .filecopy import opened_copy
from .fileformat import FILE_IMAGES, HEAD_TAGS, BackupKey, FrameReader
from .imagecheck import check_image
from .imagewrite import write_image
from .joined import copy_folder, exited_after, run_stoppable
from .leasetokens import carry_leases
from .location import local_copies
from .pagechain import chain_image, page_runs
from .partway import refuse_part_way
from .restoreaudit import restore_entry
from .restorechain import open_chain as _open_chain
from .restorechain import owned_parts
from .restoreholds import carry_holds, holds_of
from .restoretarget import adopt_copied_keys, check_namespace, check_target_takes, renew_store_id
from .restoretarget import floor_over_bases as _floor_over_bases
from .wholesnaps import is_delta, left_as_delta, rebuild_whole
from .writepass import write_all as _write_all

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["RestoreResult", "iter_entries", "restore"]


@dataclass(slots=True)
class _Plan:
    """What the checking pass keeps of one agent — no records: the restore streams the
    files twice (check everything, then write chunk by chunk), so its memory is one
    chunk plus this per agent, whatever the size of the backup."""

    start: int  # the file its stream (re)starts in (base 0)
    head: int = 0
    events: int = 0
    link: bytes = ZERO_LINK
    #: the latest snapshot: (seq, file, chunk) where it is, and the link at its seq
    snapshot: tuple[int, int, int] | None = None
    snap_link: tuple[int, bytes] | None = None
    #: that snapshot is a delta (its base not in the backup): rebuilt whole after
    #: the writing pass (:mod:`.wholesnaps`)
    delta: bool = False
    forgotten: bool = False
    #: a stream compacted by retention: its base seq (0: whole from seq 1)
    compacted: int = 0
    #: the backup's head tag, checked against the chain (versions 5 and 6): the
    #: target's own when made with its active key (not made again)
    tag: bytes | None = None
    #: the checksum of each part's last event by its seq (see :mod:`.partway`)
    ends: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What :func:`restore` wrote: the user's agents, events, snapshots (not the store's
    own streams: ``internal``); ``forgotten`` agents left out (data key destroyed)."""

    agents: int
    events: int
    snapshots: int
    forgotten: list[str] = field(default_factory=list)
    #: agents left out because the target held them already (``skip_existing``)
    skipped: int = 0
    backup_ids: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: statekeeper's own streams of the backup (the source's audit log) left out
    #: because the target has its own: the target's audit log is never overwritten
    kept_internal: list[str] = field(default_factory=list)
    #: the legal holds the restore put in force, by pattern: the backup's holds stream
    #: restored whole, or (a target with holds of its own) the backup's holds it
    #: lacked, placed in it (:mod:`.restoreholds`)
    holds_placed: list[str] = field(default_factory=list)
    #: the store's own streams restored besides the agents (the audit log, the legal
    #: holds): not counted in ``agents``
    internal: int = 0
    internal_streams: list[str] = field(default_factory=list)  #: their stored ids


#: one file to restore from: its path, the store image rebuilt from the run of page
#: backups it ends (:mod:`.pagechain`) or None, and its backup id
_Part = tuple[str, "str | None", str]


def _parts(
    stack: contextlib.ExitStack,
    paths: Sequence[str],
    key: BackupKey,
    ids: list[str],
    versions: list[int],
) -> list[_Part]:
    """The files the passes read: a run of page backups (a full one and its page
    incrementals) as its last file with the image rebuilt from the run; a full file
    backup alone with its image decrypted (once, for both passes: the writing pass
    decrypted it again, ~0.5 of ~7.7 CPU-s for a 188 MB store, docs/benchmarks.md
    "backup15"). Either image is checked against the manifest's heads by both passes
    (:func:`.filecopy.checked_entries`), in a private folder of ``$TMPDIR``."""
    parts: list[_Part] = []
    for first, last in page_runs(versions):
        image = None
        if last > first:
            folder = stack.enter_context(copy_folder())
            image = stack.enter_context(chain_image(paths[first : last + 1], key, folder))
        elif versions[first] in FILE_IMAGES:
            reader = FrameReader(paths[first], key)
            try:  # every chunk authenticated and checked against the manifest here
                image = stack.enter_context(opened_copy(reader))
            finally:
                reader.close()
        parts.append((paths[last], image, ids[last]))
    return parts


def _closed(opened: tuple[Any, contextlib.ExitStack]) -> None:
    opened[1].close()


def _check(
    store: StateStore,
    parts: Sequence[_Part],
    key: BackupKey,
    progress: Callable[[str, int, int], None] | None,
    total: int,
) -> dict[str, _Plan]:
    """The checking pass: every chunk against its manifest, every stream against the
    manifest, every record with the target's keys (chain followed across the files).
    Returns the plan of every agent to restore (forgotten ones marked)."""
    mine = _tag_prefix(store)
    tagger = store.codec.head_tagger()  # the active key bound once, as ``mine`` is
    path, image, _ = parts[0]
    if len(parts) == 1 and image is not None:
        # one store image: one merged scan of its rows (:mod:`.imagecheck`); None when
        # it is not the common case or anything is wrong: then the pass below
        reader = FrameReader(path, key)
        try:
            merged = check_image(store, reader, image, 0, _Plan, (mine, tagger), progress)
        finally:
            reader.close()
        if merged is not None:
            return merged
    plans: dict[str, _Plan] = {}
    done = 0
    known: dict[bytes, Any] = {}  # how to open each header's records (codec.chaincheck)
    for number, (path, image, _) in enumerate(parts):
        reader = FrameReader(path, key)
        try:
            listed: dict[str, Any] = reader.streams
            tagged = reader.header.version in HEAD_TAGS
            for index, item in read_entries(reader, listed, image):
                agent_id, base, head, tag, events, snapshot, keys = item[:7]
                if keys:
                    _check_keys(path, agent_id, base, head, keys)
                plan = plans.get(agent_id)
                if base == 0:
                    plan = plans[agent_id] = _Plan(number)
                    if len(item) > 7:  # compacted by retention: the chain starts at its base
                        _from_base(store, path, agent_id, plan, item[7])
                elif plan is None or plan.head != base:
                    raise BackupCorrupt(
                        path,
                        f"agent {agent_id!r}",
                        f"the incremental starts at seq {base + 1}: its parent is missing",
                    )
                _follow(store, path, agent_id, plan, events, snapshot, (number, index), known)
                plan.head = head
                if events:
                    plan.ends[head] = events[-1][4]
                plan.tag = None
                if tagged and tag is not None and not plan.forgotten:
                    _check_tag(store, path, agent_id, plan, tag, (mine, tagger))
                done += 1
                if progress is not None and done % 256 == 0:
                    progress("verify", min(done, total), total)
            for agent_id in reader.manifest.get("deleted", []):
                plans.pop(agent_id, None)
            for agent_id, entry in listed.items():
                plan = plans.get(agent_id)
                if plan is None:
                    raise BackupCorrupt(path, f"agent {agent_id!r}", "has no records in the chain")
                if plan.head != entry["head"]:
                    raise BackupCorrupt(
                        path, f"agent {agent_id!r}", "head differs from the manifest"
                    )
            extra = set(plans) - set(listed)
            if extra:
                raise BackupCorrupt(path, f"agent {min(extra)!r}", "not in the manifest")
        finally:
            reader.close()
    return plans


def _check_tag(
    store: StateStore,
    path: str,
    agent_id: str,
    plan: _Plan,
    tag: bytes,
    own: tuple[bytes, Callable[[str, int, bytes], bytes]],
) -> None:
    """A version-5/6 backup names each head by its tag (the source's ``sk_agents``
    row, the manifest's): it must authenticate the head the chain reached with the
    target's keys (an edited, dropped or rolled-back head, or a tag from another
    stream, fails). A tag that starts as the target's own (``mine``: the same key id,
    the target's active one, or both without a key) is checked by making the
    target's tag and comparing: one HMAC per stream, the one the restore made before
    to write it, and the tag is then kept (docs/benchmarks.md, "backuphead"); ``own``:
    that prefix and the target's :meth:`~statekeeper.codec.pipeline.Codec.head_tagger`."""
    mine, tagger = own
    if plan.link is not None and tag[: len(mine)] == mine:
        made = tagger(agent_id, plan.head, plan.link)
        if not hmac.compare_digest(made, tag):
            raise BackupCorrupt(
                path,
                f"agent {agent_id!r}",
                f"its head tag does not verify: the stream head does not match its records"
                f" (head seq {plan.head}): records were removed, replaced or added, or the"
                " head was altered",
            )
        plan.tag = made
        return
    try:
        store.codec.check_head(agent_id, plan.head, plan.link, tag)
    except KeyNotFound:
        raise
    except IntegrityError as exc:
        raise BackupCorrupt(
            path, f"agent {agent_id!r}", f"its head tag does not verify: {exc}"
        ) from None


def _tag_prefix(store: StateStore) -> bytes:
    """How the target's own head tags start (``0x01 ‖ L ‖ its active key id``, or
    ``0x01 ‖ 0x00`` without a key): a checked tag that starts so is the one it makes."""
    keyring = store.codec.keyring
    if keyring is None:
        return b"\x01\x00"
    kid = keyring.active.id.encode("ascii")
    return b"\x01" + bytes((len(kid),)) + kid


def _check_keys(path: str, agent_id: str, base: int, head: int, keys: Sequence[Any]) -> None:
    """The idempotency records of one entry are within it: each ``(key, first, last)``
    with ``base < first <= last <= head`` (an entry copied whole, ``base`` 0: also
    those a compaction kept, below its base). Else :class:`BackupCorrupt` naming the
    record: the writing pass would leave it out (an append past the head never comes),
    and a consistent store holds none (its records are written with their events, and
    removed with their stream)."""
    for record in keys:
        try:
            _, first, last = record
            inside = base < first <= last <= head
        except (TypeError, ValueError):
            raise BackupCorrupt(
                path, f"agent {agent_id!r}", "malformed idempotency record"
            ) from None
        if not inside:
            raise BackupCorrupt(
                path,
                f"agent {agent_id!r}",
                f"its idempotency record from seq {first} to {last} is outside the entry's"
                f" seqs {base + 1}..{head}: a consistent backup holds none; nothing was restored",
            )


def _from_base(store: StateStore, path: str, agent_id: str, plan: _Plan, base: list[Any]) -> None:
    """Start a compacted stream's check at its base snapshot: opened with the target's
    keys, its chain link (the link of the removed event at its seq) is where the chain
    of the events after it must go on from — as ``verify`` checks a compacted stream."""
    seq, ts, payload, checksum = base
    plan.compacted = plan.head = seq
    try:
        opened = store.codec.open(agent_id, seq, SNAPSHOT_TYPE, ts, payload, checksum)
    except AgentForgotten:
        plan.forgotten = True
        return
    except KeyNotFound:
        raise
    except IntegrityError as exc:
        raise BackupCorrupt(
            path, f"agent {agent_id!r}", f"its base snapshot does not verify: {exc}"
        ) from None
    if opened.prev is None:
        raise BackupCorrupt(path, f"agent {agent_id!r}", "its base snapshot carries no chain link")
    plan.link = opened.prev
    plan.snap_link = (seq, opened.prev)


def _follow(
    store: StateStore,
    path: str,
    agent_id: str,
    plan: _Plan,
    events: list[list[Any]],
    snapshot: list[Any] | None,
    where: tuple[int, int],
    known: dict[bytes, Any],
) -> None:
    """Open one part's records with the target's keys and follow the chain (``where``:
    the file and chunk of the part, kept for its snapshot)."""
    plan.events += len(events)
    if plan.forgotten:
        return
    codec = store.codec
    try:
        snap_seq = snapshot[0] if snapshot is not None else None
        # every event opened and the chain followed in one call (codec.chaincheck)
        plan.link, at = follow_chain(codec, agent_id, events, plan.link, snap_seq, known)
        if snapshot is not None:
            seq, ts, payload, checksum = snapshot
            if at is None and plan.snap_link is not None and plan.snap_link[0] == seq:
                at = plan.snap_link[1]  # the snapshot of an earlier part, again
            opened = codec.open(agent_id, seq, SNAPSHOT_TYPE, ts, payload, checksum)
            if at is None or (opened.prev is not None and opened.prev != at):
                raise IntegrityError(agent_id, seq, "the snapshot does not belong to the stream")
            plan.snapshot, plan.snap_link = (seq, *where), (seq, at)
            plan.delta = is_delta(codec, agent_id, seq, opened)
    except AgentForgotten:
        plan.forgotten = True
    except KeyNotFound:
        raise
    except IntegrityError as exc:
        raise BackupCorrupt(path, f"agent {agent_id!r}", f"record does not verify: {exc}") from None


async def restore(
    store: StateStore,
    backups: Sequence[str | os.PathLike[str]],
    key: BackupKey,
    *,
    concurrency: int = 16,
    skip_existing: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    audit: AuditSink | None = None,
) -> RestoreResult:
    """Restore ``backups`` (a full backup, then its incrementals in order; paths or
    ``s3://`` URLs) into ``store`` (see the module documentation). ``skip_existing``
    leaves out agents the target already holds instead of refusing, except one a
    restore stopped part-way left (refused: :mod:`.partway`).

    On a target opened as a principal, the restore needs ``admin`` on the namespace of
    every agent in the backups (it writes history as others wrote it: their actors,
    their times), and ``admin`` on ``**`` when they hold the store's own streams (the
    audit log); the first one missing raises
    :class:`~statekeeper.errors.AccessDenied` (audited) before anything is verified
    or written. A target opened in a namespace needs ``admin`` on that namespace and
    every namespace below it (``tenant-a/**``), checked before the backup is opened.
    ``audit`` defaults to the target's own audit log there."""
    started = time.perf_counter()
    if not backups:
        raise BackupError("restore needs at least one backup")
    if store_namespace(store):
        # the whole namespace is what the target opens to the backup
        await require_namespace(store, "admin", "restore")
    given, audit = audit, await store_sink(store, audit)
    carried: list[str] = []
    # (closed by a thread a second cancel walked away from; else as a ``with`` does:
    # its contexts see the error, which names the locations given)
    with exited_after(contextlib.ExitStack()) as stack:
        paths = local_copies(stack, backups)  # errors name the locations given
        ids, listed, versions = await run_stoppable(_open_chain, paths, key)
        check_namespace(store, listed)
        # on a store opened as a principal (a plain store allows everything, as
        # ``require`` says: no 100,000 awaits of it for nothing)
        governed = getattr(store, "_governance", None) is not None
        for agent_id in sorted(listed) if governed else ():
            internal = agent_id[:1] == "\x01"  # the store's own streams: store admin only
            await require(store, None if internal else agent_id, "admin", "restore")
        args = (_parts, paths, key, ids, versions)
        parts, opened = await run_stoppable(owned_parts, *args, release=_closed)
        stack.enter_context(opened)
        plans = await run_stoppable(_check, store, parts, key, progress, len(listed))
        if progress is not None:
            progress("verify", len(listed), len(listed))
        forgotten = sorted(a for a, p in plans.items() if p.forgotten)
        if isinstance(store, NamespacedStateStore):
            forgotten = [store.relative(a) for a in forgotten]
        tagger = store.codec.head_tagger()
        tags = {
            a: p.tag if p.tag is not None else tagger(a, p.head, p.link)
            for a, p in sorted(plans.items())
            if not p.forgotten
        }
        held = await _held(store, tags)
        present = [a for a, h in held.items() if h]
        # the target's own streams (its audit log) are kept: the backup's copy is left out
        kept = [a for a in present if a[:1] == "\x01"]
        # ...except the legal holds: those of the backup the target lacks are placed in
        # it (a restore must not leave a held agent unheld: :mod:`.restoreholds`)
        holds = await holds_of(store, parts, key, plans, tags, kept)
        for agent_id in kept:
            del tags[agent_id]
        present = [a for a in present if a[:1] != "\x01"]
        again: list[tuple[str, int, int, int, bytes | None]] = []
        if present and skip_existing:
            await refuse_part_way(store, plans, present, held)
            for agent_id in present:
                del tags[agent_id]
                plan = plans[agent_id]
                if plan.delta and plan.snapshot and held[agent_id] == plan.head:
                    end = plan.ends.get(plan.head)
                    again.append((agent_id, plan.snapshot[0], plan.compacted, plan.head, end))
        elif present:
            raise BackupError(
                f"the target store already holds {len(present)} of the agents (e.g."
                f" {present[0]!r}): restore into an empty store, delete them first, or keep"
                " them and restore the others (--skip-existing; skip_existing=True)"
            )
        check_target_takes(store, plans, tags)
        # entry first (.restoreaudit): a restore killed from here on leaves it open
        async with restore_entry(store, given, audit, ids, tags) as entry:
            if tags:
                # the events are numbered anew in the target's feed: a cursor taken before
                # is refused (FeedChanged; a tenant admin's restore leaves the id every
                # tenant's cursors name: .restoretarget). Renewed before the first write:
                # a restore stopped after its writes (SIGKILL) and run again finds every
                # agent there, writes nothing, and would renew nothing
                await renew_store_id(store, list(tags))
            await carry_leases(store, paths, key, tags)  # before the agents (.leasetokens)
            if holds:  # placed before the agents they protect are written
                carried = await carry_holds(store, holds, ids[-1], given)
            written = await write_image(store, parts, plans, tags)
            if written is None:
                written = await _write_all(store, parts, key, plans, tags, concurrency, progress)
            elif progress is not None:
                progress("write", written, written)
            await adopt_copied_keys(store, [*tags, *(present if skip_existing else ())])
            rebuilt = [
                (a, p.snapshot[0], p.compacted)
                for a, p in plans.items()
                if a in tags and p.delta and p.snapshot
            ]
            # with those a restore stopped before their rebuild left (skipped here)
            await rebuild_whole(store, rebuilt + await left_as_delta(store, again))
            bases = {a: p.compacted for a, p in plans.items() if a in tags}  # compacted: the
            skip = {a: plans[a].compacted for a in present if held[a] == plans[a].head}
            await _floor_over_bases(store, bases, skip)  # feed's floor over them (+ skipped)
    own = sorted(a for a in tags if a[:1] == "\x01")  # the store's own streams, not agents
    in_force = carried
    if HOLDS_STREAM in tags:  # the backup's holds stream restored whole
        in_force = [h.pattern for h in await list_holds(store)]
    if in_force and store.backend.supports(Capability.TTL):
        for pattern in in_force:  # an engine's own expiry stops for the agents held
            await store.backend.hold_keys(pattern, True)
    result = RestoreResult(
        len(tags) - len(own),
        sum(plans[a].events for a in tags if a[:1] != "\x01"),
        sum(plans[a].snapshot is not None for a in tags if a[:1] != "\x01"),
        forgotten,
        len(present) if skip_existing else 0,
        ids,
        time.perf_counter() - started,
        kept,
        in_force,
        len(own),
        own,
    )
    assert written == len(tags)
    details: dict[str, Any] = {
        "backups": ids,
        "agents": result.agents,
        "forgotten": len(forgotten),
    }
    if kept:
        details["kept_target_streams"] = len(kept)
    if carried:
        details["holds_placed"] = carried
    await entry.finished(details)
    return result


async def _held(store: StateStore, agent_ids: dict[str, bytes]) -> dict[str, int]:
    """The target's head of each agent (0: none). A target without any agent (what a
    restore is usually given) holds none of them: one listing of at most one agent
    (cheap on every engine, unlike a count) instead of a head read per agent (100,000
    of them through the loop: ~1.3-1.6 CPU-s, docs/benchmarks.md "backup16")."""
    backend = store.backend
    if not await backend.list_agents(limit=1):
        return dict.fromkeys(agent_ids, 0)
    heads = await asyncio.gather(*(backend.head(a) for a in agent_ids))
    return dict(zip(agent_ids, heads, strict=True))
