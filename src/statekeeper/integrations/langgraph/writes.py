"""``put`` and ``put_writes``: the ops that store a checkpoint (values once per
version, messages once per thread) or a task's writes, planned on the cached
document; and ``delete_thread``."""

from __future__ import annotations

import builtins
from collections.abc import (
    Sequence,
)
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from ... import patch
from . import history as h
from . import made
from . import mapping as m
from .faults import CheckpointForkError
from .listing import _SaverListing
from .loop import SharedLoop
from .runs import Run
from .serde import Memo, fresh_ref, is_message
from .stream import Op, Plan, _Stream

_KNOWN_KEYS = frozenset(
    {"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"}
)


_PLAIN_SCALARS = frozenset({str, int, bool, type(None)})


_STR = frozenset({str})


def _plain_versions(versions: dict[Any, Any]) -> bool:
    # one set made, not a generator resumed per entry (a header has ~10 of these)
    return "$t" not in versions and {type(v) for v in versions.values()} <= _PLAIN_SCALARS


def _plain_header(header: dict[str, Any]) -> bool:
    """A checkpoint header's values are plain JSON for the store's codec: its ids and
    versions are strings, ints, bools or None (the versions of this saver and of
    LangGraph's), no name is ``"$t"``. Its packed parts (values, metadata, extras) are
    plain by construction (:class:`.serde.ValueCodec` escapes ``$`` keys and packs
    anything else as a serde blob)."""
    uc = header["uc"]
    vs = header["vs"]
    if "$t" in vs or not _plain_versions(header["cv"]):
        return False
    for seen in vs.values():
        if not _plain_versions(seen):
            return False
    return (
        {type(x) for x in header["h"]} <= _PLAIN_SCALARS
        and type(header["v"]) in _PLAIN_SCALARS
        and (uc is None or {type(c) for c in uc} <= _STR)
    )


def _prefixed(ops: builtins.list[Op], prefix: str) -> builtins.list[Op]:
    for op in ops:
        op["path"] = prefix + op["path"]
    return ops


def _note_written(st: _Stream, at: str, value: Any, packed: Any) -> None:
    """Remember where a write put each message of ``value`` (a message or a list of
    them), and the reference it stored there."""
    if is_message(value):
        st.written[id(value)] = (value, [[at, packed]], st.puts)
    elif (type(value) is list or type(value) is tuple) and type(packed) is list:
        for k, item in enumerate(value):
            if is_message(item):
                found = st.written.setdefault(id(item), (item, [], st.puts))
                if found[0] is item:
                    found[1].append([f"{at}/{k}", packed[k]])


def _after_put(st: _Stream, used: Memo, carried: bool) -> builtins.list[Op]:
    """Ops that store the pending writes holding a message as the message is now, when
    it changed after the write was stored — ``add_messages`` gives a node's id-less
    messages their ids after the node's write: a write reads back as the graph saw it
    after the step, and its message is still stored once (a ``$r`` reference).

    Then the memo is cut down to what the new checkpoint holds plus the messages of
    recent writes (LangGraph may store a checkpoint after the writes of its own
    tasks), so it stays the size of the latest state, not of the thread's history; a
    checkpoint that keeps channels of the last one (not repacked) keeps their entries.
    """
    if not used and not st.written and not st.memo:
        # a thread with no messages (a small graph's state): what the passes below
        # make of nothing, without them
        if not carried:
            st.memo_kept = 0
        st.written = {}
        st.puts += 1
        return []
    ops: builtins.list[Op] = []
    # the writes' messages (a few) looked up among those used (a whole chat), not
    # the other way round
    for key, found in st.written.items():
        entry = used.get(key)
        if entry is None or found[0] is not entry[0]():
            continue
        ref = entry[1]
        for cell in found[1]:
            if cell[1] != ref:
                ops.append({"op": "replace", "path": cell[0], "value": fresh_ref(ref)})
                cell[1] = ref
    recent = {k: w for k, w in st.written.items() if w[2] >= st.puts - 1}
    if carried:  # channels kept from the last checkpoint: their messages stay known
        memo = st.memo
        memo.update(used)
        # the dead dropped once the memo has doubled since they last were, not at
        # every put (a pass over a whole chat's messages, for the few that died):
        # a dead entry is never taken for a live message (its weak reference is
        # checked), it only holds memory until then
        if len(memo) > 2 * st.memo_kept:
            memo = {k: e for k, e in memo.items() if e[0]() is not None}
            st.memo_kept = len(memo)
    else:
        # ``used`` (this put's own, fresh) becomes the memo: every entry in it is alive
        # (a message of the values being put, which the caller holds), and so is every
        # entry kept for a recent write (its message is held by ``recent``), so there
        # is nothing dead to drop — a pass over a whole chat's messages with a weak
        # reference called for each, and a copy of them, at every put, saved
        memo = used
        old = st.memo
        for k, w in recent.items():
            if k not in memo:
                entry = old.get(k)
                if entry is not None and entry[0]() is w[0]:
                    memo[k] = entry
        st.memo_kept = len(memo)
    st.memo = memo
    st.written = recent
    st.puts += 1
    return ops


class _SaverWrites(_SaverListing):
    """The saver's writes."""

    def _ops_checkpoint(
        self,
        st: _Stream,
        ns: str,
        header: dict[str, Any],
        meta: Any,
        vals: dict[str, Any],
        new_pool: dict[str, Any],
        extended: set[str] | frozenset[str] = frozenset(),
    ) -> tuple[builtins.list[Op], str | None]:
        """The ops that make ``header`` the namespace's checkpoint, and the idempotency
        key of its event (None for an id put before: it is listed in ``re``).
        ``extended``: list channels whose packed value is the stored list's items (the
        same objects) followed by new ones: their ops are the appends, no diff."""
        ops: builtins.list[Op] = [
            {"op": "add", "path": m.ptr("pool", key), "value": cell}
            for key, cell in new_pool.items()
        ]
        cid = header["h"][0]
        nsd = st.doc["ns"].get(ns)
        seq = st.seq + 1  # the event's (one checkpoint per event: see _take_batch)
        if nsd is None:
            fresh = m.new_ns()
            rec = h.record(None, None, {}, vals, (), seq, cid)
            fresh.update(cp=header, meta=meta, vals=vals, top=cid, rec=rec)
            ops.append({"op": "add", "path": m.ptr("ns", ns), "value": fresh})
            return ops, h.checkpoint_key(ns, cid)
        base = m.ptr("ns", ns)
        old_cp = nsd["cp"]
        # header and metadata whole: the event is then the checkpoint's record, read by
        # seq (see history.from_record)
        ops.append({"op": "replace", "path": f"{base}/cp", "value": header})
        ops.append({"op": "replace", "path": f"{base}/meta", "value": meta})
        old_vals: dict[str, Any] = nsd["vals"]
        for ch in old_vals:
            if ch not in vals:
                ops.append({"op": "remove", "path": m.ptr("ns", ns, "vals", ch)})
        appended: builtins.list[str] = []
        for ch, cell in vals.items():
            path = m.ptr("ns", ns, "vals", ch)
            if ch not in old_vals:
                ops.append({"op": "add", "path": path, "value": cell})
            elif ch in extended:
                stored = old_vals[ch]
                if len(cell) > len(stored):
                    end = path + "/-"
                    ops.extend({"op": "add", "path": end, "value": x} for x in cell[len(stored) :])
                appended.append(ch)
            elif old_vals[ch] is not cell:
                change = patch.diff(old_vals[ch], cell)
                if type(cell) is list and all(
                    op["op"] == "add" and op["path"] == "/-" for op in change
                ):
                    appended.append(ch)
                ops.extend(_prefixed(change, path))
        prev = old_cp["h"][0] if old_cp is not None else None
        rec = h.record(nsd.get("rec"), prev, old_vals, vals, appended, seq, cid)
        if cid in nsd["w"]:  # writes made before its put: only the document at seq has them
            rec["w"] = 1
        ops.append({"op": "add", "path": f"{base}/rec", "value": rec})
        head = st.heads.get(ns)
        if head is None or cid > head:
            ops.append({"op": "add", "path": f"{base}/top", "value": cid})
            return ops, h.checkpoint_key(ns, cid)
        # an id put before (or older than the latest): its seq goes in the document,
        # after those of its earlier puts (their windows hold its earlier writes)
        again = h.put_again(nsd, cid)
        if "re" not in nsd:
            ops.append({"op": "add", "path": f"{base}/re", "value": {cid: [seq]}})
        else:
            ops.append({"op": "add", "path": m.ptr("ns", ns, "re", cid), "value": [*again, seq]})
        return ops, None

    def _archive_ops(self, st: _Stream, ns: str, cid: str) -> builtins.list[Op]:
        """The op that takes the writes of the checkpoint ``cid`` replaces out of the
        document (they stay in the stream: see :mod:`.history`). It goes last in the
        checkpoint's event, after the ops that update those writes' messages."""
        nsd = st.doc["ns"].get(ns)
        if nsd is None or nsd["cp"] is None:
            return []
        prev = nsd["cp"]["h"][0]
        if prev == cid or prev not in nsd["w"]:
            return []
        at = m.ptr("ns", ns, "w", prev)
        inside = at + "/"
        for key, (alive, cells, puts) in builtins.list(st.written.items()):
            kept = [c for c in cells if not c[0].startswith(inside)]
            if len(kept) != len(cells):
                if kept:
                    st.written[key] = (alive, kept, puts)
                else:
                    del st.written[key]
        return [{"op": "remove", "path": at}]

    def _ops_writes(
        self,
        st: _Stream,
        ns: str,
        cid: str,
        task_id: str,
        task_path: str,
        entries: dict[str, Any],
        new_pool: dict[str, Any],
    ) -> builtins.list[Op]:
        ops: builtins.list[Op] = [
            {"op": "add", "path": m.ptr("pool", key), "value": cell}
            for key, cell in new_pool.items()
        ]
        nsd = st.doc["ns"].get(ns)
        task = {"p": task_path, "i": entries}
        if nsd is None:
            fresh = m.new_ns()
            fresh["w"] = {cid: {task_id: task}}
            ops.append({"op": "add", "path": m.ptr("ns", ns), "value": fresh})
        elif cid not in nsd["w"]:
            ops.append({"op": "add", "path": m.ptr("ns", ns, "w", cid), "value": {task_id: task}})
        elif task_id not in nsd["w"][cid]:
            ops.append({"op": "add", "path": m.ptr("ns", ns, "w", cid, task_id), "value": task})
        else:
            for idx, entry in entries.items():
                ops.append(
                    {
                        "op": "add",
                        "path": m.ptr("ns", ns, "w", cid, task_id, "i", idx),
                        "value": entry,
                    }
                )
        return ops

    async def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns") or ""
        parent = conf.get("checkpoint_id")
        cid = checkpoint["id"]
        codec = self._codec
        meta = codec.pack(get_checkpoint_metadata(config, metadata))
        header: dict[str, Any] = {
            "h": [cid, checkpoint["ts"], parent],
            "v": checkpoint["v"],
            "cv": dict(checkpoint["channel_versions"]),
            "vs": {node: dict(seen) for node, seen in checkpoint["versions_seen"].items()},
            "uc": None,
        }
        updated = checkpoint.get("updated_channels")
        if updated is not None:
            header["uc"] = builtins.list(updated)
        extras = {k: v for k, v in checkpoint.items() if k not in _KNOWN_KEYS}
        if extras:
            header["x"] = codec.pack(extras)
        values = checkpoint["channel_values"]
        protect = self.fork_protection
        run = self._run_of(thread_id, conf) if protect else None
        # a fork the caller asked for: a run started from a checkpoint the caller named
        # (time travel), LangGraph's "fork" checkpoint, update_state on a checkpoint the
        # caller named (get_tuple noted it), or allow_fork=True in the call's configurable
        asked = (
            bool(conf.get("allow_fork"))
            or metadata.get("source") == "fork"
            or (run is not None and run.addressed)
            or (protect and self._take_named(thread_id, ns, parent))
            # a root put from outside a run: how imports and LangGraph's conformance
            # suite seed threads (a run's root put is checked: its claim covers it)
            or (parent is None and run is None)
        )

        def build(st: _Stream) -> tuple[str, builtins.list[Op], str | None]:
            nsd = st.doc["ns"].get(ns)
            latest = st.heads.get(ns)
            claim: builtins.list[Op] = []
            if protect:
                claim = self._check_claim(st, run)
                if not asked and latest is not None and parent != latest and cid != latest:
                    raise CheckpointForkError(thread_id, ns, parent, latest, st.agent_id, st.seq)
            pool = st.doc["pool"]
            new_pool: dict[str, Any] = {}
            memo: Memo | None = None
            used: Memo = {}
            if self.reuse_packed_messages:
                memo = st.memo
                if st.loaded:
                    memo.update(st.loaded)
                    st.loaded = {}
            old_cp = nsd["cp"] if nsd is not None else None
            old_vals: dict[str, Any] = nsd["vals"] if nsd is not None else {}
            old_cv: dict[str, Any] = old_cp["cv"] if old_cp is not None else {}
            linear = old_cp is not None and old_cp["h"][0] == parent
            vals: dict[str, Any] = {}
            extended: set[str] = set()
            carried = False
            for ch, version in header["cv"].items():
                same_version = ch in old_vals and old_cv.get(ch) == version
                if ch in new_versions or not (same_version and linear):
                    if ch not in values:
                        if same_version and ch not in new_versions:
                            vals[ch] = old_vals[ch]
                            carried = True
                        continue
                    value = values[ch]
                    stored = old_vals.get(ch)
                    if (
                        memo is not None
                        and type(stored) is list
                        and (type(value) is list or type(value) is tuple)
                    ):
                        # a list channel (a chat's messages): one pass against the
                        # stored list and the memo (see ValueCodec.pack_items)
                        cell, extends = codec.pack_items(value, stored, pool, new_pool, memo, used)
                        if extends:
                            extended.add(ch)
                        vals[ch] = cell
                    else:
                        vals[ch] = codec.pack(value, pool, new_pool, memo, used)
                else:
                    vals[ch] = old_vals[ch]
                    carried = True
            ops, key = self._ops_checkpoint(st, ns, header, meta, vals, new_pool, extended)
            refreshed = _after_put(st, used, carried) if memo is not None else None
            if refreshed:
                ops.extend(refreshed)
            archive = self._archive_ops(st, ns, cid)
            ops.extend(archive)
            out = claim + ops if claim else ops
            if not refreshed:
                made.checkpoint(st, out, ns, cid, header, meta, vals, new_pool, ops, archive, claim)
            return m.EV_CHECKPOINT, out, key

        plain = ns != "$t" and cid != "$t" and _plain_header(header)
        self._rode(run, await self._mutate(thread_id, build, m.EV_CHECKPOINT, plain=plain))
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    async def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        call = self._writes_call(config, writes, task_id, task_path)
        if call is None:
            return
        await self._ride_writes(*call)

    async def _ride_writes(
        self, thread_id: str, build: Plan, hold: bool, plain: bool, run: Run | None
    ) -> None:
        """Commit a ``put_writes`` call's plan, then take its run's riding claim (see
        ``_rode``) — on the loop, also for a sync caller: before, its thread looked at
        the cache and set the renewal's timer off the loop."""
        self._rode(run, await self._mutate(thread_id, build, m.EV_WRITES, hold=hold, plain=plain))

    def _sync_put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """``put_writes`` from a sync caller: a held write (see ``writes_wait``) is
        parked off the loop for the run's next write to commit (see
        ``_SaverCommits._park``); any other goes through the loop."""
        call = self._writes_call(config, writes, task_id, task_path)
        if call is None:
            return
        thread_id, build, hold, plain, run = call
        if (
            hold
            and self.writes_wait > 0
            and type(self._portal) is SharedLoop
            and run is not None
            and (run.claimed or not run.rides)  # (then _rode has nothing to do)
        ):
            self._wait_parked(thread_id, self._park(thread_id, build, plain))
            return
        self._portal.call(
            self._ride_writes(thread_id, build, hold, plain, run), bare=self._sends_bare
        )

    def _put_writes_at(
        self,
        config: RunnableConfig,
        items: Sequence[tuple[int, str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        """``put_writes`` with each write's index given, ``(idx, channel, value)``: a
        copy (``langgraph import``) keeps the indexes its source has."""
        call = self._writes_call(config, (), task_id, task_path, items)
        if call is None:
            return
        self._portal.call(self._ride_writes(*call))

    def _writes_call(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        at: Sequence[tuple[int, str, Any]] | None = None,
    ) -> tuple[str, Plan, bool, bool, Run | None] | None:
        """A ``put_writes`` call's thread, plan, whether it is held (see
        ``writes_wait``), whether its values are plain, and its run; None: no writes.
        ``at``: the writes with their indexes (instead of ``writes``)."""
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns") or ""
        cid = str(conf["checkpoint_id"])
        items = (
            [(WRITES_IDX_MAP.get(ch, i), ch, v) for i, (ch, v) in enumerate(writes)]
            if at is None
            else builtins.list(at)
        )
        if not items:
            return None
        codec = self._codec
        protect = self.fork_protection
        run = self._run_of(thread_id, conf) if protect else None

        def build(st: _Stream) -> tuple[str, builtins.list[Op], str | None] | None:
            claim = self._check_claim(st, run) if protect else []
            nsd = st.doc["ns"].get(ns)
            task = nsd["w"].get(cid, {}).get(task_id) if nsd is not None else None
            existing: dict[str, Any] = task["i"] if task is not None else {}
            pool = st.doc["pool"]
            new_pool: dict[str, Any] = {}
            memo = st.memo if self.reuse_packed_messages else None
            entries: dict[str, Any] = {}
            for idx, ch, value in items:
                key = str(idx)
                if idx >= 0 and key in existing:
                    continue  # regular writes: insert or ignore
                packed = codec.pack(value, pool, new_pool, memo)
                entries[key] = [ch, packed]
                if memo is not None:
                    at = m.ptr("ns", ns, "w", cid, task_id, "i", key, "1")
                    _note_written(st, at, value, packed)
            if not entries:
                return None
            # Idempotency per (checkpoint, task, idx) is this index check, made under a
            # compare-and-append: a concurrent or retried duplicate loses the race,
            # re-reads the index and stores nothing.
            ops = self._ops_writes(st, ns, cid, task_id, task_path, entries, new_pool)
            out = claim + ops if claim else ops
            made.writes(st, out, ns, cid, task_id, entries, new_pool, claim)
            return m.EV_WRITES, out, None

        # a task's regular writes in a live run wait for its next checkpoint's commit
        hold = (
            run is not None and run.hold and not run.released and min(i for i, _, _ in items) >= 0
        )
        plain = "$t" not in (ns, cid, task_id) and type(task_path) is str
        return thread_id, build, hold, plain, run

    async def _delete_thread(self, thread_id: str) -> None:
        await self._require("write", "delete", thread_id)  # also when it looks absent
        async with self._lock(thread_id):
            self._deleted(thread_id)
            agents = await self._generations(thread_id)
            for agent in agents[:1]:  # (another saver's thread is not this one's to delete)
                snap = await self.store.get(agent)
                wrong = None if snap is None else self._foreign(thread_id, agent, snap.data)
                if wrong is not None:
                    raise wrong
            refused = await self._held(thread_id, "delete", agents)  # all or nothing
            if refused is not None:
                raise refused
            try:
                for agent in agents:
                    await self.store.delete(agent)
            finally:
                # again: a read whose load began after the drop above (the generations
                # listed, the holds looked at meanwhile) cached the thread as it was
                self._deleted(thread_id)
