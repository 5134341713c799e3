"""Reading one checkpoint: the latest from the cached document (with the built
messages kept for the threads read last), an older one from its event's record or
the document at its seq, and a run's first read (with its claim)."""

from __future__ import annotations

import builtins
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    writes_sort_key,
)

from . import history as h
from . import runs
from .claims import _SaverClaims
from .faults import ThreadBusyError
from .serde import Built, Memo
from .stream import _Stream

#: how many threads keep the messages built for their latest checkpoint
_BUILT_THREADS = 8


#: how many older checkpoints' namespace entries each cached thread keeps (time travel
#: reads the checkpoint it starts from more than once: get_state, then invoke/update)
_OLDER = 8


#: and how many (estimated) bytes those messages may hold in all; the thread being
#: read keeps its own even when it alone is larger
_BUILT_BYTES = 4 * 1024 * 1024


class _SaverReads(_SaverClaims):
    """The saver's checkpoint reads."""

    def _built_for(self, st: _Stream) -> Built:
        """The thread's cache of built messages; only the most recently read
        ``_BUILT_THREADS`` threads keep one (memory stays bounded). Tracked per view,
        not per thread: a read that used another view of a thread (not the cached one:
        see ``_SaverStreams._open``) took the tracking from the cached view before,
        whose messages were then never dropped while it stayed cached."""
        if st.built is None:
            st.built = Built()
        key = id(st)  # (the entry holds ``st``: its id is not reused while it is kept)
        self._built.pop(key, None)
        self._built[key] = st
        self._trim_built()
        return st.built

    def _trim_built(self) -> None:
        """Drop the least recently read threads' built messages until at most
        ``_BUILT_THREADS`` threads and ``_BUILT_BYTES`` (estimated) are kept; the most
        recently read thread is never dropped."""
        total = sum(s.built.nbytes for s in self._built.values() if s.built is not None)
        while len(self._built) > 1 and (len(self._built) > _BUILT_THREADS or total > _BUILT_BYTES):
            _, old = self._built.popitem(last=False)
            if old.built is not None:
                total -= old.built.nbytes
            old.built = None
            old.older.clear()  # older checkpoints are kept for the same threads only

    def _pending(
        self, tasks: dict[str, Any] | None, pool: dict[str, Any]
    ) -> builtins.list[PendingWrite]:
        if not tasks:
            return []
        rows: builtins.list[tuple[tuple[str, str, int], PendingWrite]] = []
        codec = self._codec
        for task_id, task in tasks.items():
            for idx, (channel, packed) in task["i"].items():
                rows.append(
                    (
                        writes_sort_key(task["p"], task_id, int(idx)),
                        (task_id, channel, codec.unpack(packed, pool)),
                    )
                )
        rows.sort(key=lambda r: r[0])
        return [row for _, row in rows]

    def _tuple(
        self,
        thread_id: str,
        ns: str,
        nsd: dict[str, Any],
        pool: dict[str, Any],
        writes: builtins.list[PendingWrite],
        config: RunnableConfig | None,
        seen: Memo | None = None,
        built: Built | None = None,
    ) -> CheckpointTuple:
        codec = self._codec
        cp = nsd["cp"]
        checkpoint: dict[str, Any] = {}
        if "x" in cp:
            checkpoint.update(codec.unpack(cp["x"], pool))
        checkpoint.update(
            v=cp["v"],
            id=cp["h"][0],
            ts=cp["h"][1],
            channel_values={
                ch: codec.unpack(p, pool, seen, built) for ch, p in nsd["vals"].items()
            },
            channel_versions=dict(cp["cv"]),
            versions_seen={node: dict(seen) for node, seen in cp["vs"].items()},
            updated_channels=builtins.list(cp["uc"]) if cp["uc"] is not None else None,
        )
        own: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": cp["h"][0],
            }
        }
        parent = cp["h"][2]
        return CheckpointTuple(
            config=config if config is not None else own,
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=codec.unpack(nsd["meta"], pool),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=writes,
        )

    async def _get_tuple(
        self, config: RunnableConfig, *, check: bool = True
    ) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns") or ""
        cid = get_checkpoint_id(config)
        if cid is not None and self.fork_protection and runs.run_control(conf) is None:
            self._note_named(thread_id, ns, cid)  # e.g. update_state on this checkpoint
        st = await self._open(thread_id, create=False, check=check)
        if st is None:
            return None
        nsd = st.doc["ns"].get(ns)
        if nsd is None:
            return None
        if cid is None:
            cid = st.heads.get(ns)
            config = None  # type: ignore[assignment]
            if cid is None:
                return None
        return await self._read(st, ns, nsd, cid, config)

    async def _read(
        self,
        st: _Stream,
        ns: str,
        nsd: dict[str, Any],
        cid: str,
        config: RunnableConfig | None,
        seq: int | None = None,
    ) -> CheckpointTuple | None:
        """The tuple of checkpoint ``cid`` of namespace ``ns`` (``nsd``: its document
        now; ``seq``: where its first put is, when the caller knows)."""
        thread_id = st.thread_id
        pool = st.doc["pool"]
        current = nsd["cp"] is not None and nsd["cp"]["h"][0] == cid
        if current and not h.put_again(nsd, cid):
            writes = self._pending(nsd["w"].get(cid), pool)
            seen: Memo | None = {} if self.reuse_packed_messages else None
            built = self._built_for(st)
            found = self._tuple(thread_id, ns, nsd, pool, writes, config, seen, built)
            built.keep_used()
            self._trim_built()
            if seen:  # a run resumes from these objects: its next put need not repack them
                st.loaded = seen
            return found
        # a checkpoint put again is cached under its puts; the namespace's current one
        # is not: its writes may be archived by the next put after this read
        at = (ns, cid, *h.put_again(nsd, cid))
        cached = st.older.get(at)
        if cached is None:
            found_at = await self._older(st, ns, cid, seq)
            if found_at is None:
                return None
            cached = found_at
            if not current:
                st.older[at] = found_at
                while len(st.older) > _OLDER:
                    st.older.popitem(last=False)
        else:
            st.older.move_to_end(at)
        older, archived = cached
        writes = self._pending(h.merge_tasks(archived, nsd["w"].get(cid)), pool)
        # an older checkpoint's messages are mostly the latest's: copies of those built
        built = self._built_for(st)
        found = self._tuple(thread_id, ns, older, pool, writes, config, None, built)
        # what only older checkpoints use goes at the next latest read, not kept by it
        built.used = set()
        self._trim_built()
        return found

    async def _older(
        self, st: _Stream, ns: str, cid: str, first: int | None = None
    ) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
        """An older checkpoint's namespace document and its archived writes: its seq
        from the document or the key index, the document at that seq, and the events
        up to the next checkpoint (see :mod:`.history`); None when there is none."""
        now = st.doc["ns"][ns]
        seqs = h.put_again(now, cid)
        legacy = now.get("idx")
        if legacy and cid in legacy:  # format 1: put first before the format changed
            seqs.insert(0, int(legacy[cid]))
        elif first is not None:
            seqs.insert(0, first)
        else:
            found = await self.store.find_key(st.agent_id, h.checkpoint_key(ns, cid))
            if found is None:  # put before the short keys
                found = await self.store.find_key(st.agent_id, h.legacy_checkpoint_key(ns, cid))
            if found is not None:
                seqs.insert(0, found.last_seq)
        if not seqs:
            return None
        if len(seqs) == 1:  # put once: its event is its record (see history.from_record)
            found_rec = await self._by_record(st, ns, cid, seqs[0])
            if found_rec is not None:
                return found_rec
        writes: dict[str, Any] | None = None
        for seq in seqs:
            nsd = (await self.store.load(st.agent_id, at_seq=seq)).data["ns"].get(ns)
            if nsd is None or nsd["cp"] is None or nsd["cp"]["h"][0] != cid:
                return None
            # each put's window holds the writes archived after it (see history.py)
            found_writes = await h.older_writes(self.store, st.agent_id, ns, cid, seq, nsd)
            writes = h.merge_tasks(writes, found_writes)
        return nsd, writes

    async def _by_record(
        self, st: _Stream, ns: str, cid: str, seq: int
    ) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
        """An older checkpoint put once at ``seq`` from its event's record and the
        latest document, and its writes from the events after it: usually one read of
        ``1 + FIRST_WINDOW`` events. None when the record cannot serve."""
        first = h.FIRST_WINDOW
        events = [
            e async for e in self.store.history(st.agent_id, after_seq=seq - 1, to_seq=seq + first)
        ]
        if not events or events[0].seq != seq:
            return None
        ops = events[0].ops or ()
        nsd = h.from_record(ops, ns, cid, seq, st.doc["ns"][ns])
        if nsd is None:
            return None
        nsd["w"] = h.writes_at(ops, ns, cid)  # its event may hold some (a batch)
        writes = await h.older_writes(self.store, st.agent_id, ns, cid, seq, nsd, events[1:], first)
        return nsd, writes

    async def _claim_and_get(self, run: runs.Run, config: RunnableConfig) -> CheckpointTuple | None:
        """A run's first call: claim its thread, then read the checkpoint it starts
        from — in one trip to the saver's loop, and without re-reading the head: the
        claim's compare-and-append just proved the document current.

        A run whose first write is stored before any of its nodes starts
        (``run.rides``, see :func:`.runs.first_write_precedes_nodes`) is only checked
        here, on a head-checked read: its claim is stored by that first write's
        compare-and-append (see :meth:`_check_claim`), one commit less per run. A
        concurrent run that stored its claim first makes that write fail with
        :class:`ThreadBusyError`, with nothing written and before any node ran."""
        if run.rides:
            return await self._check_and_get(run, config)
        await self._claim(run)
        try:
            return await self._get_tuple(config, check=False)
        except Exception:  # (cancelled, interrupted: the run's failed start releases
            # it, in a task of its own: this one's server calls would meet the cancel)
            await self._release(run)
            raise

    async def _check_and_get(self, run: runs.Run, config: RunnableConfig) -> CheckpointTuple | None:
        """A riding run's first call: refuse it when another run holds the thread,
        then read the checkpoint it starts from (see :meth:`_claim_and_get`)."""
        if not run.ended:
            self._runs[run.key] = run
        try:
            # under the thread's lock: never a document a commit is still changing
            async with self._lock(run.thread_id):
                # head-checked; a run's thread is often new: its generations listed
                # first (one read then), and the claim's write checks the witness
                st = await self._open(run.thread_id, create=False, base_first=False)
                if st is not None:
                    claim = st.doc.get("run")
                    if claim is not None and self._claimed_by_other(claim, run):
                        raise ThreadBusyError(
                            run.thread_id, claim["exp"], st.agent_id, st.seq, lost=False
                        )
                run.seen = st.seq if st is not None else None
                if st is None:  # a new thread: nothing to read (and no listing again)
                    return None
                return await self._get_tuple(config, check=False)
        except BaseException:
            self._runs.pop(run.key, None)
            raise
