"""Copying and compacting threads: ``copy_thread``, ``prune``, retention and
``delete_for_runs`` rewrite a thread into a new generation keeping some checkpoints."""

from __future__ import annotations

import builtins
import contextlib
import time
from collections.abc import (
    Awaitable,
    Callable,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any

from ...errors import AgentNotFound, ConfigurationError, ConflictError
from ...store.conditional import delete_only_at
from ...store.delete_shown import head_identity
from ...store.keyguard import key_family
from ...store.writes import SEEN, Seen
from . import history as h
from . import mapping as m
from .faults import ThreadBusyError
from .serde import pool_refs
from .stream import Op, Plan, _Stream
from .streams import checksum_as_read
from .writes import _SaverWrites


@dataclass
class RetentionReport:
    """What a retention or prune pass removed (or would remove, in a dry run)."""

    threads_scanned: int = 0
    threads_compacted: int = 0
    threads_deleted: int = 0
    checkpoints_deleted: int = 0
    writes_deleted: int = 0
    dry_run: bool = False
    #: threads skipped because concurrent writers kept winning the fence
    threads_skipped: list[str] = field(default_factory=list)

    def add(self, other: RetentionReport) -> None:
        """Accumulate another report into this one."""
        self.threads_scanned += other.threads_scanned
        self.threads_compacted += other.threads_compacted
        self.threads_deleted += other.threads_deleted
        self.checkpoints_deleted += other.checkpoints_deleted
        self.writes_deleted += other.writes_deleted
        self.threads_skipped.extend(other.threads_skipped)


class _SaverPruning(_SaverWrites):
    """The saver's copies and compactions."""

    def _snapshot_parts(
        self, st: _Stream, view: h.View, keep: dict[str, set[str]]
    ) -> builtins.list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
        """``(ns, checkpoint id, namespace document at it, its writes)`` of kept ones,
        oldest first."""
        wanted = sorted((cid, ns) for ns, cids in keep.items() for cid in cids)
        return [
            (ns, cid, view.nsd_at(ns, cid), view.writes.get(ns, {}).get(cid) or {})
            for cid, ns in wanted
        ]

    def _replay_plans(
        self, src: _Stream, parts: builtins.list[tuple[str, str, dict[str, Any], dict[str, Any]]]
    ) -> builtins.list[tuple[str, Plan]]:
        """Plans that write the given checkpoints (and their writes) into a stream."""
        plans: builtins.list[tuple[str, Plan]] = []
        src_pool = at_pool = src.doc["pool"]  # a generation's pool only grows
        for ns, cid, nsd, tasks in parts:

            def put_plan(
                dst: _Stream,
                ns: str = ns,
                nsd: dict[str, Any] = nsd,
                at_pool: dict[str, Any] = at_pool,
            ) -> tuple[str, builtins.list[Op], str | None]:
                refs = pool_refs([nsd["vals"], nsd["meta"], nsd["cp"].get("x")], set())
                new_pool = {k: at_pool[k] for k in refs if k not in dst.doc["pool"]}
                ops, key = self._ops_checkpoint(
                    dst, ns, nsd["cp"], nsd["meta"], dict(nsd["vals"]), new_pool
                )
                ops.extend(self._archive_ops(dst, ns, nsd["cp"]["h"][0]))
                return m.EV_CHECKPOINT, ops, key

            plans.append((m.EV_CHECKPOINT, put_plan))
            for task_id, task in tasks.items():

                def writes_plan(
                    dst: _Stream,
                    ns: str = ns,
                    cid: str = cid,
                    task_id: str = task_id,
                    task: dict[str, Any] = task,
                ) -> tuple[str, builtins.list[Op], str | None] | None:
                    refs = pool_refs(task["i"], set())
                    new_pool = {k: src_pool[k] for k in refs if k not in dst.doc["pool"]}
                    ops = self._ops_writes(
                        dst, ns, cid, task_id, task["p"], dict(task["i"]), new_pool
                    )
                    return m.EV_WRITES, ops, None

                plans.append((m.EV_WRITES, writes_plan))
        return plans

    async def _copy_thread(self, source: str, target: str) -> None:
        async with self._lock(source):
            src = await self._open(source, create=False)
            if src is None:
                return
            view = await self._view(src)
            keep = {ns: set(cids) for ns, cids in view.idx.items()}
            plans = self._replay_plans(src, self._snapshot_parts(src, view, keep))
        for event_type, plan in plans:
            await self._mutate(target, plan, event_type)

    async def _compact(
        self,
        thread_id: str,
        decide: Callable[[_Stream, h.View], Awaitable[dict[str, set[str]] | None]],
        dry_run: bool,
    ) -> RetentionReport:
        """Rewrite a thread keeping only the checkpoints ``decide`` returns."""
        report = RetentionReport(dry_run=dry_run)
        async with self._lock(thread_id):
            for _ in range(3):
                # (a look again counts what it finds: not what the one before found)
                report.checkpoints_deleted = report.writes_deleted = 0
                report.threads_compacted = report.threads_deleted = 0
                st = await self._open(thread_id, create=False)
                if st is None:
                    return report
                report.threads_scanned = 1
                claim = st.doc.get("run")
                if self.fork_protection and claim is not None and claim["exp"] > self._clock():
                    report.threads_skipped.append(thread_id)  # a run holds it
                    return report
                if await self._held(thread_id, "prune") is not None:
                    report.threads_skipped.append(thread_id)  # a legal hold exempts it
                    return report
                try:
                    view = await self._view(st)
                except AgentNotFound:
                    # deleted (or moved) by another writer since it was opened: look
                    # again (a thread that is gone has nothing left to prune); prune and
                    # delete_for_runs walk every thread of a store others write to
                    self._forget(thread_id)
                    continue
                keep = await decide(st, view)
                if keep is None:
                    return report
                dropped_cps = dropped_writes = 0
                for ns, cids in view.idx.items():
                    kept = keep.get(ns, set())
                    dropped_cps += sum(1 for cid in cids if cid not in kept)
                    dropped_writes += sum(
                        len(task["i"])
                        for cid, tasks in view.writes.get(ns, {}).items()
                        if cid not in kept
                        for task in tasks.values()
                    )
                if not dropped_cps and not dropped_writes:
                    return report
                report.checkpoints_deleted, report.writes_deleted = dropped_cps, dropped_writes
                if not any(keep.values()):
                    report.threads_deleted = 1
                    if not dry_run and not await self._delete_read(st):
                        self._forget(thread_id)
                        continue  # written (or made again) since it was read: look again
                    return report
                report.threads_compacted = 1
                if dry_run:
                    return report
                if await self._rewrite(st, view, keep):
                    return report
                self._forget(thread_id)
            report.threads_compacted = report.checkpoints_deleted = report.writes_deleted = 0
            report.threads_skipped.append(thread_id)
            return report

    async def _rewrite(self, st: _Stream, view: h.View, keep: dict[str, set[str]]) -> bool:
        """Copy the kept checkpoints into a new generation and cut over. False when a
        concurrent writer won the fence (nothing changed)."""
        fence_seq = st.seq
        new_agent = m.agent_id(self.prefix, st.thread_id, m.next_generation(st.generation))
        # the old generation's key stays (a backup taken before this prune needs it);
        # the vault links the generations, so forgetting the thread destroys both keys;
        # the new one is sealed with the old one's key (in a restored copy, the source's:
        # the source's forget of the thread reaches it; the store's key family read first)
        await key_family(self.store.backend, self.store.codec)
        await self._adopt_generation(st.agent_id)
        self._link_generation(new_agent, st.agent_id)
        await self.store.create(new_agent, m.new_doc(st.thread_id, sealed=False))
        try:
            dst = await self._load(st.thread_id, new_agent)
            for _, plan in self._replay_plans(st, self._snapshot_parts(st, view, keep)):
                planned = plan(dst)
                if planned is not None:
                    await self._append(dst, planned[0], planned[1], planned[2])
            # the fence at the identity of the stream read, not its seq alone: one
            # deleted and made again up to the same seq by another process meanwhile
            # has another head tag (the store refuses it, and the engine compares the
            # tag in the append's own commit); before, the store read the head again
            # after the cached one's conflict and fenced the other process's stream
            seen = Seen(fence_seq, None, st.tag)
            token = SEEN.set(seen)
            try:
                fence = await self.store.append(
                    st.agent_id,
                    m.EV_MOVED,
                    ops=[{"op": "add", "path": "/moved", "value": dst.generation}],
                    expected_seq=fence_seq,
                )
            finally:
                SEEN.reset(token)
            # the fence's own record: the store's cached one (no await since), else the
            # one the write made (a store with cache_size=0 keeps none: before, the
            # old generation was then deleted at the fence's seq alone — a thread
            # deleted and made again up to that seq by another process was deleted)
            fenced = self.store._checksum_at(st.agent_id, fence.last_seq)
            if fenced is None and fence.last_seq == fence_seq + 1:
                fenced = seen.adopted_checksum
            fence_tag = seen.adopted_tag
        except ConflictError:
            await self.store.delete(new_agent)
            return False
        except BaseException:
            await self.store.delete(new_agent)
            raise
        self._forget(st.thread_id)
        await self.store.append(
            new_agent, m.EV_SEALED, ops=[{"op": "replace", "path": "/sealed", "value": True}]
        )
        # the old generation deleted only while its head is the fence just written (its
        # seq and stored checksum, compared by the engine in the delete's commit): once
        # another process deleted the thread and made it again, that id is its stream
        if fenced is None:  # (not told: read, at the fence's tag)
            fenced = await checksum_as_read(self.store, st.agent_id, fence.last_seq, fence_tag)
        if fenced is not None:  # (else left fenced: not the stream fenced, or not known)
            with contextlib.suppress(ConflictError), delete_only_at(fence.last_seq, fenced):
                await self.store.delete(st.agent_id)
        return True

    async def _delete_read(self, st: _Stream) -> bool:
        """Delete the thread whose live stream ``st`` is, as read: that stream only at
        its identity (its head seq and stored checksum, compared by the engine in the
        delete's commit), its older generations (fenced, left by a cut-over that did
        not finish) at the identities of their heads read before. False, with nothing
        deleted, when the live stream was written since, or deleted and made again by
        another process (before, every generation listed was deleted whatever it held:
        a thread made again meanwhile lost its acknowledged checkpoints)."""
        store = self.store
        self._deleted(st.thread_id)
        older = [
            (agent, await head_identity(store, agent))
            for agent in await self._generations(st.thread_id)
            if agent != st.agent_id
        ]
        checksum = await checksum_as_read(store, st.agent_id, st.seq, st.tag)
        if checksum is None and st.tag is not None:  # (another stream now: kept)
            return False
        try:
            with delete_only_at(st.seq, checksum):
                await store.delete(st.agent_id)
        except ConflictError:
            return False
        for agent, head in older:
            if head is not None:
                with contextlib.suppress(ConflictError), delete_only_at(head[0], head[2]):
                    await store.delete(agent)
        # again: a read whose load began after the drop above (while the generations
        # were listed and read) cached the thread as it was
        self._deleted(st.thread_id)
        return True

    async def _adopt_generation(self, old_agent: str) -> None:
        """Give the store's key family the key the old generation's records are sealed
        with when it has none (a copy restored before restores adopted their keys:
        :func:`~statekeeper.governance.backup.restoretarget.adopt_copied_keys`), so the
        new generation continues it (:meth:`_link_generation`). Before, the new one got
        a key of the copy's own, and the source's forget of the thread left it live."""
        from ...governance.backup.restoretarget import adopt_copied_keys

        keyring = self.store.codec.keyring
        if keyring is None or keyring.scoped is None:
            return
        qualify = getattr(self.store, "qualify", None)  # a namespaced store: stored ids
        stored = qualify(old_agent) if qualify else old_agent
        # (a legacy key, from before key families, is the vault's: the new one gets its own)
        await adopt_copied_keys(self.store, [stored], legacy=False)

    def _link_generation(self, new_agent: str, old_agent: str) -> None:
        keyring = self.store.codec.keyring
        if keyring is None or keyring.data_keys is None:
            return
        qualify = getattr(self.store, "qualify", None)  # a namespaced store: stored ids
        if qualify is not None:
            new_agent, old_agent = qualify(new_agent), qualify(old_agent)
        keyring.link(new_agent, old_agent)
        keyring.continue_in(self.store.codec.key_family, new_agent, old_agent)

    async def _thread_list(self, thread_ids: Sequence[str] | None) -> builtins.list[str]:
        if thread_ids is not None:
            return [str(t) for t in thread_ids]
        return [t async for t in self._thread_ids()]

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> RetentionReport:
        report = RetentionReport()
        if strategy == "delete":
            for thread_id in thread_ids:
                existed = bool(await self._generations(str(thread_id)))
                await self._delete_thread(str(thread_id))
                report.threads_scanned += 1
                report.threads_deleted += int(existed)
            return report
        if strategy != "keep_latest":
            raise ConfigurationError(f"unknown prune strategy {strategy!r} (keep_latest or delete)")

        async def latest(st: _Stream, view: h.View) -> dict[str, set[str]]:
            return {ns: {head} for ns, head in st.heads.items() if head is not None}

        for thread_id in thread_ids:
            report.add(await self._compact(str(thread_id), latest, False))
        if report.threads_skipped:  # (``prune`` returns nothing: a skip must not be silent)
            raise await self._not_compacted(report.threads_skipped[0])
        return report

    async def _not_compacted(self, thread_id: str) -> Exception:
        """Why :meth:`_compact` left ``thread_id`` as it was: a run holds it
        (:class:`ThreadBusyError`), a legal hold covers it, or concurrent writers kept
        winning its fence (:class:`ConflictError`: retry)."""
        st = await self._open(thread_id, create=False)
        claim = st.doc.get("run") if st is not None else None
        if st is not None and claim is not None and claim["exp"] > self._clock():
            return ThreadBusyError(thread_id, claim["exp"], st.agent_id, st.seq, lost=False)
        held = await self._held(thread_id, "prune")
        if held is not None:
            return held
        return ConflictError(m.agent_id(self.prefix, thread_id), -1, -1)

    async def _retention(
        self,
        thread_ids: Sequence[str] | None,
        keep_last: int | None,
        ttl: float | None,
        now: float | None,
        dry_run: bool,
        up_to: str | None = None,
    ) -> RetentionReport:
        if keep_last is not None and keep_last < 1:
            raise ConfigurationError("keep_last must be >= 1")
        if ttl is not None and ttl <= 0:
            raise ConfigurationError("ttl must be > 0 seconds")
        cutoff = (time.time() if now is None else now) - ttl if ttl is not None else None

        async def decide(st: _Stream, view: h.View) -> dict[str, set[str]] | None:
            keep: dict[str, set[str]] = {}
            newest: float | None = None
            for ns, cids in view.idx.items():
                ids = sorted(cids, reverse=True)
                if not ids:
                    continue
                stamps = {cid: m.checkpoint_time(cid) for cid in ids}
                for stamp in stamps.values():
                    if stamp is not None and (newest is None or stamp > newest):
                        newest = stamp
                # written after the ones shown (up_to): kept, and not counted
                newer = [c for c in ids if up_to is not None and c > up_to]
                ids = ids[len(newer) :]
                if keep_last is not None:
                    ids = ids[:keep_last]
                if cutoff is not None:
                    ids = ids[:1] + [
                        c
                        for c in ids[1:]
                        if (stamps[c] is None or stamps[c] >= cutoff)  # type: ignore[operator]
                    ]
                keep[ns] = set(ids) | set(newer)
            unseen = up_to is not None and any(c > up_to for ids in view.idx.values() for c in ids)
            if cutoff is not None and newest is not None and newest < cutoff and not unseen:
                return {}  # the whole thread expired (none written after the ones shown)
            return keep

        report = RetentionReport(dry_run=dry_run)
        for thread_id in await self._thread_list(thread_ids):
            report.add(await self._compact(thread_id, decide, dry_run))
        return report

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        if not runs:
            return
        codec = self._codec

        async def without_runs(st: _Stream, view: h.View) -> dict[str, set[str]] | None:
            keep = {ns: set(cids) for ns, cids in view.idx.items()}
            hit = False
            pool = st.doc["pool"]
            for ns, cids in view.idx.items():
                for cid in cids:
                    meta = codec.unpack(view.nsd_at(ns, cid)["meta"], pool)
                    if isinstance(meta, dict) and meta.get("run_id") in runs:
                        keep[ns].discard(cid)
                        hit = True
            return keep if hit else None

        for thread_id in await self._thread_list(None):
            await self._compact(thread_id, without_runs, False)
