"""``StatekeeperSaver``: a LangGraph checkpointer on any statekeeper backend.

The async methods are the implementation. They always run on the saver's private event
loop so that the store is driven from one loop whatever calls it. That loop has no
thread of its own (:class:`.loop.SharedLoop`): a sync method (which LangGraph calls
from sync graphs, from worker threads, or from inside a running event loop) runs it on
the calling thread while nobody else does, and the async ones await it. See
:mod:`.mapping` for the storage layout.

Over 600 lines because the saver is one state machine per thread: the cached stream
(``_Stream``), its write queue and commit batching, the run claims, the message memo and
the read caches are one set of invariants that every method keeps (a write plans on the
cached document, a read trusts what the last commit proved). The seams that do not share
that state are already modules of their own: the event loop (:mod:`.loop`), value
packing (:mod:`.serde`), the storage layout (:mod:`.mapping`), run detection
(:mod:`.runs`), import/export (:mod:`.migrate`), the peers (:mod:`.peers`). A split of the
rest into mixins would spread those invariants over files without removing any.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import random
import sys
import time
from collections import OrderedDict
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from contextlib import AbstractAsyncContextManager, AsyncExitStack, suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import zstandard
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ... import patch
from ...backends.keyed_locks import KeyedLock
from ...codec import Codec
from ...errors import AgentNotFound, ConfigurationError, ConflictError
from ...store.store import StateStore
from . import history as h
from . import mapping as m
from . import runs
from .loop import BoundLoop, SharedLoop
from .serde import Built, Memo, ValueCodec, fresh_ref, is_message, pool_refs, safe_serializer

__all__ = ["CheckpointForkError", "RetentionReport", "StatekeeperSaver", "ThreadBusyError"]

_log = logging.getLogger(__name__)

T = TypeVar("T")
Op = dict[str, Any]
_KNOWN_KEYS = frozenset(
    {"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"}
)
#: saver options accepted by :meth:`StatekeeperSaver.from_url` (the rest go to the store)
_SAVER_OPTIONS = frozenset(
    {
        "serde",
        "allowed_types",
        "native_json",
        "fork_protection",
        "prefix",
        "cache_size",
        "max_retries",
        "snapshot_min_bytes",
        "reuse_packed_messages",
        "run_lease",
        "clock",
        "writes_wait",
    }
)
#: how many checkpoint ids named by ``get_tuple`` calls outside a run are remembered
_NAMED = 256
#: how many threads keep the messages built for their latest checkpoint
_BUILT_THREADS = 8
#: how many older checkpoints' namespace entries each cached thread keeps (time travel
#: reads the checkpoint it starts from more than once: get_state, then invoke/update)
_OLDER = 8
#: and how many (estimated) bytes those messages may hold in all; the thread being
#: read keeps its own even when it alone is larger
_BUILT_BYTES = 4 * 1024 * 1024


class CheckpointForkError(ConflictError):
    """A ``put`` would fork a thread: its parent is not the namespace's latest checkpoint.

    Raised only with ``fork_protection=True``. Nothing was written. ``parent_id`` is
    the parent the caller named, ``latest_id`` the thread's latest checkpoint.
    """

    def __init__(
        self,
        thread_id: str,
        checkpoint_ns: str,
        parent_id: str | None,
        latest_id: str | None,
        agent_id: str,
        seq: int,
    ) -> None:
        super().__init__(agent_id, seq, seq)
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.parent_id = parent_id
        self.latest_id = latest_id

    def __str__(self) -> str:
        return (
            f"thread {self.thread_id!r} namespace {self.checkpoint_ns!r}: a checkpoint with "
            f"parent {self.parent_id!r} would fork the thread; its latest checkpoint is "
            f"{self.latest_id!r} (fork_protection is on)"
        )


class ThreadBusyError(CheckpointForkError):
    """Another run holds the thread: this call would interleave with it.

    Raised with ``fork_protection`` on: by ``get_tuple`` at the start of a LangGraph run
    (so the run fails before any node runs and before it writes anything) — for a
    ``durability="sync"`` run given fresh input, whose claim rides on its input
    checkpoint, by that checkpoint's ``put`` (still before any node ran) — and by a
    ``put`` / ``put_writes`` from outside that run (e.g. ``update_state``). Nothing was
    written. ``expires_at`` (Unix time) is when the holder's claim lapses unless its
    run renews it; ``lost`` is True when the failing call's *own* run had its claim
    taken over (it expired, or the thread was deleted or pruned meanwhile).
    """

    def __init__(
        self, thread_id: str, expires_at: float | None, agent_id: str, seq: int, *, lost: bool
    ) -> None:
        super().__init__(thread_id, "", None, None, agent_id, seq)
        self.expires_at = expires_at
        self.lost = lost

    def __str__(self) -> str:
        if self.lost:
            return (
                f"thread {self.thread_id!r}: this run no longer holds the thread (its claim "
                "lapsed and another run took it, or the thread was deleted or pruned); "
                "nothing more was written"
            )
        left = "" if self.expires_at is None else f" (its claim lapses at {self.expires_at:.0f}"
        left += " unless that run renews it)" if left else ""
        return (
            f"thread {self.thread_id!r} is held by another run{left}; nothing was written "
            "(fork_protection is on: retry when that run has finished)"
        )


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


@dataclass(eq=False)
class _Stream:
    """The saver's cached view of one generation of a thread's stream."""

    thread_id: str
    agent_id: str
    doc: dict[str, Any]
    seq: int
    heads: dict[str, str | None]
    #: what the thread's last snapshot costs in storage (its bytes after the store's
    #: compression, estimated: see ``StatekeeperSaver._snapshot_cost``); 0: not known
    #: (a stream read from storage: worked out when a snapshot may be due)
    snap_bytes: int = 0
    #: stored bytes (estimated the same way) of the events appended since (by this saver)
    bytes_since: int = 0
    #: messages of the latest checkpoint and of the writes since (see ValueCodec.pack)
    memo: Memo = field(default_factory=dict)
    #: messages built by the last read of the latest checkpoint
    loaded: Memo = field(default_factory=dict)
    #: id(message) -> (message, [[pointer of a write cell holding it, its packed
    #: reference]], number of puts before the write) for writes of the last two puts
    written: dict[int, tuple[Any, builtins.list[builtins.list[Any]], int]] = field(
        default_factory=dict
    )
    #: checkpoint puts built on this view
    puts: int = 0
    #: messages built for the last read of the latest checkpoint (see ValueCodec._reuse)
    built: Built | None = None
    #: (ns, checkpoint id) -> that older checkpoint's namespace entry (its header,
    #: packed values and metadata: pool references, small), for the last
    #: ``_OLDER`` older checkpoints read; kept while the thread keeps ``built``
    #: (the ``_BUILT_THREADS`` threads read last). A generation's entry at a seq
    #: never changes and its pool only grows, so the latest pool resolves it. With
    #: it, the writes archived after it (final: see :mod:`.history`).
    older: OrderedDict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Any] | None]] = field(
        default_factory=OrderedDict
    )

    @property
    def generation(self) -> str:
        return self.agent_id.rpartition("#")[2]


Plan = Callable[[_Stream], tuple[str, "builtins.list[Op]", str | None] | None]


@dataclass(eq=False)
class _Pending:
    """A write waiting for its thread's lock (see ``StatekeeperSaver._mutate``)."""

    build: Plan
    future: asyncio.Future[None]
    event_type: str = ""
    #: create the thread's stream when it does not exist (else the plan is skipped)
    create: bool = True
    #: the values of the plan's ops are plain JSON for the store's codec (no tuple,
    #: no float, no dict key "$t": its event is serialised without a walk for typed
    #: values), not counting a run claim riding on it (``_commit`` checks that)
    plain: bool = False


def _take_batch(
    queue: builtins.list[_Pending],
) -> tuple[builtins.list[_Pending], builtins.list[_Pending]]:
    """Split the queue: a batch with at most one checkpoint put, and the rest."""
    batch: builtins.list[_Pending] = []
    for i, pending in enumerate(queue):
        if pending.event_type == m.EV_CHECKPOINT and any(
            p.event_type == m.EV_CHECKPOINT for p in batch
        ):
            return batch, queue[i:]
        batch.append(pending)
    return batch, []


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


def _heads(doc: dict[str, Any]) -> dict[str, str | None]:
    return {ns: h.ns_head(nsd) for ns, nsd in doc["ns"].items()}


def _update_heads(st: _Stream, ops: builtins.list[Op]) -> None:
    """Keep ``st.heads`` (latest checkpoint id per namespace) current after ``ops``."""
    for op in ops:
        path = op["path"]
        # only a namespace added or replaced whole, its "top" or a format 1 "idx" entry
        # move a head: other paths (most of them: values, writes, records) are not split
        if not path.startswith("/ns/") or not (
            path.endswith("/top") or path.count("/") == 2 or "/idx/" in path
        ):
            continue
        tokens = [patch.unescape(t) for t in path[4:].split("/")]
        ns = tokens[0]
        if len(tokens) == 1:
            nsd = st.doc["ns"].get(ns)
            st.heads[ns] = h.ns_head(nsd) if nsd else None
        elif len(tokens) == 2 and tokens[1] == "top":
            st.heads[ns] = op["value"]
        elif len(tokens) == 3 and tokens[1] == "idx":
            head = st.heads.get(ns)
            st.heads[ns] = tokens[2] if head is None or tokens[2] > head else head


#: store options that configure the codec (see :meth:`StatekeeperSaver.from_url`)
_CODEC_OPTIONS = frozenset({"codec", "keyring", "compression", "format", "types"})
#: records of at least this many bytes are compressed by the store ``from_url`` opens,
#: with the codec's built-in dictionary (``"zstd-dict"``: the JSON Patch and saver
#: vocabulary is in the dictionary, not in each record): a thread's snapshots, its
#: checkpoint events (~0.4-1.5 KB of JSON Patch: 413 -> 204 bytes a record on the
#: 30-step graph, 2x smaller than plain zstd) and its run claims (~90 bytes -> ~50)
_COMPRESS_MIN = 64


@functools.cache
def _estimator() -> Any:
    # plain zstd, also for a "zstd-dict" codec: the snapshot cadence (and so a cold
    # read's replay) stays what it was; estimated with the dictionary, events ~2x
    # smaller, a 200-turn chat was snapshotted every ~72 events instead of ~47
    # (749,568 vs 856,064 bytes): a read-side trade, not made here
    return zstandard.ZstdCompressor(level=1)


#: snapshots may store up to this many times the bytes of the events between them: a
#: cold read replays half as many events as at 1, for more bytes (measured in
#: docs/benchmarks.md, "Cold reads after the snapshot and build changes")
_SNAPSHOT_SHARE = 2

#: the saver's loop (a name kept for the inspector, which runs a saver on its own loop)
_SaverPortal = SharedLoop


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
    ops: builtins.list[Op] = []
    for key, (alive, ref, _) in used.items():
        found = st.written.get(key)
        if found is None or found[0] is not alive():
            continue
        for cell in found[1]:
            if cell[1] != ref:
                ops.append({"op": "replace", "path": cell[0], "value": fresh_ref(ref)})
                cell[1] = ref
    recent = {k: w for k, w in st.written.items() if w[2] >= st.puts - 1}
    if carried:  # channels kept from the last checkpoint: their messages stay known
        memo = st.memo
    else:
        memo = {
            k: st.memo[k] for k, w in recent.items() if k in st.memo and st.memo[k][0]() is w[0]
        }
    memo.update(used)
    st.memo = {k: e for k, e in memo.items() if e[0]() is not None}  # drop the dead
    st.written = recent
    st.puts += 1
    return ops


def _match(meta: dict[str, Any], query: dict[str, Any]) -> bool:
    for key, expected in query.items():
        if key in meta:
            found = meta[key]
        elif "." in key:  # nested key, as SqliteSaver's json_extract('$.a.b') reads it
            found = meta
            for part in key.split("."):
                found = found.get(part) if isinstance(found, dict) else None
        else:
            found = None
        if expected != found:
            return False
    return True


class StatekeeperSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer that keeps every thread as a statekeeper stream.

    Use :meth:`from_url` (``"sqlite:///agents.db"``, ``"memory://"``, …) or pass a
    :class:`~statekeeper.StateStore`. Everything is stored through the store's codec
    (checksummed, and encrypted/compressed when the codec is configured so), channel
    values are stored once per version (list channels as appended items only), and
    big messages once per thread.

    Args:
        store: the statekeeper store to keep threads in.
        serde: LangGraph serializer for values that are not plain JSON or LangChain
            messages. Default: :func:`~.serde.safe_serializer` (no arbitrary imports).
        allowed_types: extra classes the default serializer may rebuild on load (it
            also rebuilds data classes this process has already imported; see
            :func:`~.serde.safe_serializer`).
        native_json: store plain JSON and messages readably (see :mod:`.serde`).
        fork_protection: one writer per thread (on by default). A LangGraph run
            claims its thread when it starts (its ``get_tuple``; a sync run given
            fresh input with its input checkpoint) and releases it when it ends; a
            run starting while another holds the thread fails there with
            :class:`ThreadBusyError`, before any node ran and with nothing written, and
            so do writes from outside the holding run. A ``put`` whose parent is not
            the latest checkpoint raises :class:`CheckpointForkError` (nothing
            written) unless the caller asked for the fork: a run started from a
            checkpoint the caller named (time travel, ``Command(resume=...)`` there),
            ``update_state`` on a checkpoint the caller named, metadata
            ``source="fork"``, or ``"allow_fork": True`` in the call's
            ``configurable``.
        writes_wait: seconds a task's pending writes, made inside a LangGraph run, wait
            for the run's next checkpoint before they are committed: LangGraph saves a
            step's writes and the checkpoint after the step concurrently, and one
            commit then stores both (the checkpoint waits for nothing). The writes are
            durable when ``put_writes`` returns either way, it only returns later (by
            at most this much; LangGraph does not wait for it between steps). Error,
            interrupt and resume writes, writes outside a run, and every write once
            the run has ended are not held. ``0`` commits each write on its own.
        run_lease: seconds a run's claim lasts without renewal; the saver renews the
            claims of its live runs every third of it, so it only lapses when the
            run's process died or hung (crash recovery).
        clock: the time source of claims (``time.time``; tests inject one).
        prefix: agent-id prefix of the saver's streams (several savers can share a
            store with different prefixes).
        cache_size: how many threads' documents to keep in memory.
        max_retries: compare-and-append retries when other processes write the thread.
        snapshot_min_bytes: store a snapshot of a thread once the events appended
            since the last one stored this many bytes *and* half of what that snapshot
            stored (both after compression): storage stays linear, cold loads bounded.
        reuse_packed_messages: a message object already stored in the thread is not
            serialized again when it reappears in a later checkpoint (LangGraph's
            reducers keep the same objects) and all its fields still equal what was
            stored; a message whose only change is the id ``add_messages`` gave it is
            stored as a reference to its stored copy with that id, and the pending
            write that carried it is updated to match (see ``docs/langgraph.md``).
    """

    def __init__(
        self,
        store: StateStore,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Iterable[type[Any] | tuple[str, str]] = (),
        native_json: bool = True,
        fork_protection: bool = True,
        prefix: str = "lg/",
        cache_size: int = 1024,
        max_retries: int = 16,
        snapshot_min_bytes: int = 16 * 1024,
        reuse_packed_messages: bool = True,
        run_lease: float = 30.0,
        clock: Callable[[], float] = time.time,
        writes_wait: float = 0.005,
        _portal: _SaverPortal | BoundLoop | None = None,
        _owns_store: bool = False,
    ) -> None:
        super().__init__(serde=serde or safe_serializer(allowed_types))
        if not prefix or "#" in prefix:
            raise ConfigurationError("prefix must be non-empty and must not contain '#'")
        self.store = store
        #: a plain StateStore's write pipeline, whose append takes the document the
        #: saver made (wrapped stores — governed, namespaced — keep their own path)
        self._fast = store._writes if type(store) is StateStore else None
        self.native_json = native_json
        self.fork_protection = fork_protection
        self.prefix = prefix
        self.cache_size = cache_size
        self.max_retries = max_retries
        self.snapshot_min_bytes = snapshot_min_bytes
        self.reuse_packed_messages = reuse_packed_messages
        self._portal = _portal or _SaverPortal("statekeeper-langgraph")
        self._owns_store = _owns_store
        self._codec_cache: ValueCodec | None = None
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        self._locks = KeyedLock()  # one per thread
        self._queued: dict[str, builtins.list[_Pending]] = {}
        if writes_wait < 0:
            raise ConfigurationError("writes_wait must be >= 0 seconds")
        self.writes_wait = writes_wait
        #: per thread: pending writes waiting for the run's next checkpoint to join
        self._waiting: dict[str, builtins.list[asyncio.Future[None]]] = {}
        if run_lease <= 0:
            raise ConfigurationError("run_lease must be > 0 seconds")
        self.run_lease = run_lease
        self._clock = clock
        #: runs of this process holding (or claiming) a thread, by (id(control), thread)
        self._runs: dict[tuple[int, str], runs.Run] = {}
        #: (thread, ns, checkpoint id) named by get_tuple outside a run: a put forking
        #: from one of them was asked for (update_state on an older checkpoint)
        self._named: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._renewer: asyncio.Task[None] | None = None
        self._built: OrderedDict[str, _Stream] = OrderedDict()

    @classmethod
    def from_url(cls, url: str | None = None, **options: Any) -> StatekeeperSaver:
        """Open a store by URL (as :class:`~statekeeper.StateStore` does) and wrap it.

        Saver options (``fork_protection``, ``allowed_types``, ``serde``, ``prefix``,
        ``native_json``, ``cache_size``, ``max_retries``, ``snapshot_min_bytes``,
        ``reuse_packed_messages``, ``run_lease``, ``clock``, ``writes_wait``) are
        taken from ``options``; the rest (``durability``, ``codec``, …) configure the
        store. The saver closes the store it opened.
        """
        saver_opts, store_opts = _split_options(options)
        portal = _SaverPortal("statekeeper-langgraph")
        try:
            store = portal.call(_make_store(url, store_opts))
        except BaseException:
            portal.stop()
            raise
        try:
            return cls(store, _portal=portal, _owns_store=True, **saver_opts)
        except BaseException:  # a bad saver option: close what was opened for it
            try:
                portal.call(store.close())
            finally:
                portal.stop()
            raise

    @classmethod
    async def afrom_url(cls, url: str | None = None, **options: Any) -> StatekeeperSaver:
        """:meth:`from_url` for an async application: the store is opened on the
        running event loop and the saver's work runs there (:class:`.loop.BoundLoop`):
        an ``aput`` or ``aget_tuple`` is awaited in place, with no hop to a loop of
        the saver's own on another thread. Sync methods work from other threads while
        the loop runs; from the loop's own thread they raise
        :class:`~statekeeper.errors.ConfigurationError` (they would deadlock it).
        Close it with :meth:`aclose` (or ``async with``) on that loop."""
        saver_opts, store_opts = _split_options(options)
        store = await _make_store(url, store_opts)
        try:
            return cls(
                store,
                _portal=BoundLoop(asyncio.get_running_loop()),
                _owns_store=True,
                **saver_opts,
            )
        except BaseException:  # a bad saver option: close what was opened for it
            await store.close()
            raise

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Close the store (when the saver opened it) and stop the saver's loop."""
        if not self._portal.running:
            return
        try:
            self._portal.call(self._stop_renewer())
            if self._owns_store:
                self._portal.call(self.store.close())
        finally:
            self._portal.stop()

    async def aclose(self) -> None:
        """Async :meth:`close`."""
        if not self._portal.running:
            return
        try:
            await self._portal.run(self._stop_renewer())
            if self._owns_store:
                await self._portal.run(self.store.close())
        finally:
            await asyncio.to_thread(self._portal.stop)

    def __enter__(self) -> StatekeeperSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> StatekeeperSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- runs: fork protection per run (see runs.py) -------------------------------

    def _run_of(self, thread_id: str, conf: dict[str, Any]) -> runs.Run | None:
        """The run of this process that a call with ``conf`` belongs to, if any."""
        control = runs.run_control(conf)
        if control is None:
            return None
        run = self._runs.get((id(control), thread_id))
        return run if run is not None and run.control is control else None

    def _begin_run(self, config: RunnableConfig, frame: Any) -> tuple[runs.Run, Any] | None:
        """``(run, its loop)`` when this ``get_tuple`` starts a top-level run."""
        if not self.fork_protection:
            return None
        conf: dict[str, Any] = config.get("configurable") or {}
        if "thread_id" not in conf or not runs.is_top_level(conf):
            return None
        thread_id = str(conf["thread_id"])
        control = runs.run_control(conf)
        if control is None or self._run_of(thread_id, conf) is not None:
            return None  # not a run, or the same run reading again
        loop = runs.find_loop(frame)
        if loop is None:
            return None
        run = runs.Run(thread_id, control, addressed=bool(conf.get("checkpoint_id")))
        run.hold = not runs.waits_for_writes(loop)
        run.rides = not run.addressed and runs.first_write_precedes_nodes(loop)
        return run, loop

    def _attach(self, run: runs.Run, loop: Any) -> None:
        """Release ``run``'s claim when its loop's exit stack unwinds."""
        if isinstance(loop.stack, AsyncExitStack):
            loop.stack.push_async_callback(self._aend_run, run)
        else:
            loop.stack.callback(self._end_run, run)
        runs.watch(loop, run)

    async def _claim(self, run: runs.Run) -> None:
        """Store ``run`` as the thread's holder (compare-and-append), or raise
        :class:`ThreadBusyError` when another run holds it."""

        def plan(st: _Stream) -> tuple[str, builtins.list[Op], str | None]:
            claim = st.doc.get("run")
            now = self._clock()
            if claim is not None and claim["id"] != run.token and claim["exp"] > now:
                raise ThreadBusyError(run.thread_id, claim["exp"], st.agent_id, st.seq, lost=False)
            value = {"id": run.token, "exp": now + self.run_lease}
            return m.EV_RUN, [{"op": "add", "path": "/run", "value": value}], None

        self._runs[run.key] = run
        try:
            await self._mutate(run.thread_id, plan, m.EV_RUN)
        except BaseException:
            self._runs.pop(run.key, None)
            raise
        run.claimed = True
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())

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
        except BaseException:
            await self._release(run)
            raise

    async def _check_and_get(self, run: runs.Run, config: RunnableConfig) -> CheckpointTuple | None:
        """A riding run's first call: refuse it when another run holds the thread,
        then read the checkpoint it starts from (see :meth:`_claim_and_get`)."""
        self._runs[run.key] = run
        try:
            # under the thread's lock: never a document a commit is still changing
            async with self._lock(run.thread_id):
                st = await self._open(run.thread_id, create=False)  # head-checked
                if st is not None:
                    claim = st.doc.get("run")
                    if claim is not None and claim["exp"] > self._clock():
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

    def _rode(self, run: runs.Run | None) -> None:
        """After a riding run's write: the run holds the thread once its claim is
        stored (a write that stored nothing carried none)."""
        if run is None or run.claimed or not run.rides:
            return
        st = self._streams.get(run.thread_id)
        claim = st.doc.get("run") if st is not None else None
        if claim is None or claim["id"] != run.token:
            return
        run.claimed = True
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_loop())

    async def _release(self, run: runs.Run) -> None:
        self._runs.pop(run.key, None)
        if run.released or not run.claimed:
            return
        run.released = True

        def plan(st: _Stream) -> tuple[str, builtins.list[Op], str | None] | None:
            claim = st.doc.get("run")
            if claim is None or claim["id"] != run.token:
                return None  # taken over meanwhile: not ours to clear
            return m.EV_RUN, [{"op": "replace", "path": "/run", "value": None}], None

        await self._mutate(run.thread_id, plan, m.EV_RUN, create=False)

    def _end_run(self, run: runs.Run) -> None:
        try:
            self._portal.call(self._release(run))
        except Exception as exc:  # never mask the run's own outcome; the lease lapses
            _log.warning("releasing thread %r failed: %s", run.thread_id, exc)

    async def _aend_run(self, run: runs.Run) -> None:
        try:
            await self._portal.run(self._release(run))
        except Exception as exc:
            _log.warning("releasing thread %r failed: %s", run.thread_id, exc)

    async def _renew(self) -> None:
        """Move the expiry of every live claim of this process to now + ``run_lease``."""
        for run in builtins.list(self._runs.values()):
            if run.dead:
                self._runs.pop(run.key, None)
                continue
            if not run.claimed or run.released:
                continue

            def plan(
                st: _Stream, run: runs.Run = run
            ) -> tuple[str, builtins.list[Op], str | None] | None:
                claim = st.doc.get("run")
                if claim is None or claim["id"] != run.token:
                    return None  # lost: the run's next write fails
                exp = self._clock() + self.run_lease
                return m.EV_RUN, [{"op": "replace", "path": "/run/exp", "value": exp}], None

            try:
                await self._mutate(run.thread_id, plan, m.EV_RUN, create=False)
            except Exception as exc:
                _log.warning("renewing the claim on thread %r failed: %s", run.thread_id, exc)

    async def _renew_loop(self) -> None:
        while any(r.claimed and not r.released and not r.dead for r in self._runs.values()):
            await asyncio.sleep(self.run_lease / 3)
            await self._renew()

    async def _stop_renewer(self) -> None:
        task, self._renewer = self._renewer, None
        if task is not None and not task.done():
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    def _check_claim(self, st: _Stream, run: runs.Run | None) -> builtins.list[Op]:
        """Refuse a write that would interleave with another run holding the thread.

        Returns the ops storing ``run``'s claim when it rides on this write (a riding
        run's first write; none when an earlier plan of the same commit carries it)."""
        claim = st.doc.get("run")
        if run is not None and run.claimed:
            if claim is None or claim["id"] != run.token:
                raise ThreadBusyError(st.thread_id, None, st.agent_id, st.seq, lost=True)
            return []
        mine = run is not None and claim is not None and claim["id"] == run.token
        now = self._clock()
        if claim is not None and not mine and claim["exp"] > now:
            raise ThreadBusyError(st.thread_id, claim["exp"], st.agent_id, st.seq, lost=False)
        if run is None or not run.rides or mine:
            return []
        if st.seq != run.seen if run.seen is not None else any(st.heads.values()):
            # another writer (a whole run, maybe) came between this run's read and
            # its first write: the run would go on from a state it did not read
            raise ThreadBusyError(st.thread_id, None, st.agent_id, st.seq, lost=False)
        value = {"id": run.token, "exp": now + self.run_lease}
        return [{"op": "add", "path": "/run", "value": value}]

    def _take_named(self, thread_id: str, ns: str, cid: str | None) -> bool:
        """Whether a ``get_tuple`` outside a run named this checkpoint (then forget it)."""
        key = (thread_id, ns, cid or "")
        if cid is None or key not in self._named:
            return False
        del self._named[key]
        return True

    def _built_for(self, st: _Stream) -> Built:
        """The thread's cache of built messages; only the most recently read
        ``_BUILT_THREADS`` threads keep one (memory stays bounded)."""
        if st.built is None:
            st.built = Built()
        self._built.pop(st.thread_id, None)
        self._built[st.thread_id] = st
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

    def _note_named(self, thread_id: str, ns: str, cid: str) -> None:
        self._named[(thread_id, ns, cid)] = None
        self._named.move_to_end((thread_id, ns, cid))
        while len(self._named) > _NAMED:
            self._named.popitem(last=False)

    # -- helpers -----------------------------------------------------------------

    @property
    def _codec(self) -> ValueCodec:
        codec = self._codec_cache
        if codec is None or codec.serde is not self.serde:
            codec = ValueCodec(self.serde, native=self.native_json)
            self._codec_cache = codec
        return codec

    def _lock(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(thread_id)

    def _remember(self, st: _Stream) -> None:
        self._streams[st.thread_id] = st
        self._streams.move_to_end(st.thread_id)
        while len(self._streams) > max(self.cache_size, 1):
            self._streams.popitem(last=False)

    def _forget(self, thread_id: str) -> None:
        self._streams.pop(thread_id, None)

    async def _generations(self, thread_id: str) -> builtins.list[str]:
        prefix = m.thread_prefix(self.prefix, thread_id)
        found: builtins.list[str] = []
        after = prefix
        while True:
            page = await self.store.list_agents(after=after, limit=100)
            for info in page:
                if not info.agent_id.startswith(prefix):
                    return sorted(found, key=lambda a: m.generation_order(a[len(prefix) :]))
                found.append(info.agent_id)
            if len(page) < 100:
                return sorted(found, key=lambda a: m.generation_order(a[len(prefix) :]))
            after = page[-1].agent_id

    async def _load(self, thread_id: str, agent: str) -> _Stream:
        snap = await self.store.get(agent)
        if snap is None:
            raise AgentNotFound(agent)
        doc = snap.data
        return _Stream(thread_id, agent, doc, snap.seq, _heads(doc))

    async def _resolve(self, thread_id: str) -> _Stream | None:
        """Find the live generation of a thread's stream (see :mod:`.mapping`)."""
        loaded: dict[str, _Stream] = {}
        for agent in await self._generations(thread_id):
            try:
                loaded[agent.rpartition("#")[2]] = await self._load(thread_id, agent)
            except AgentNotFound:
                continue
        targets = {st.doc.get("moved") for st in loaded.values()}
        for gen in sorted(loaded, key=m.generation_order, reverse=True):
            st = loaded[gen]
            moved = st.doc.get("moved")
            if moved is not None:
                if moved in loaded:
                    return loaded[moved]
                return st  # a void fence: its target never became live
            if st.doc.get("sealed", True):
                return st
            if gen in targets:  # fenced over but not yet sealed: finish the cut-over
                await self._finish_cutover(
                    st, [s for s in loaded.values() if s.doc.get("moved") == gen]
                )
                return await self._load(thread_id, st.agent_id)
        return None

    async def _finish_cutover(self, st: _Stream, old: builtins.list[_Stream]) -> None:
        await self.store.append(
            st.agent_id, m.EV_SEALED, ops=[{"op": "replace", "path": "/sealed", "value": True}]
        )
        for prev in old:
            await self.store.delete(prev.agent_id)

    async def _open(self, thread_id: str, *, create: bool, check: bool = True) -> _Stream | None:
        """The thread's live stream with a current document (cached, head-checked).

        ``check=False``: a cached document is used without reading the stored head —
        for a write, whose compare-and-append at the document's seq is the check (a
        stale document loses it, is dropped, and the write is planned again on a
        fresh read), and for a read made right after such a write succeeded.
        """
        st = self._streams.get(thread_id)
        if st is not None and not check and st.doc.get("moved") is None:
            self._streams.move_to_end(thread_id)
            return st
        if st is not None:
            head = await self.store.head(st.agent_id)
            if head == st.seq and st.doc.get("moved") is None:
                self._streams.move_to_end(thread_id)
                return st
            self._forget(thread_id)
            if head > 0:
                try:
                    fresh = await self._load(thread_id, st.agent_id)
                except AgentNotFound:
                    fresh = None
                if fresh is not None and fresh.doc.get("moved") is None:
                    self._remember(fresh)
                    return fresh
        for _ in range(self.max_retries):
            found = await self._resolve(thread_id)
            if found is not None:
                self._remember(found)
                return found
            if not create:
                return None
            agent = m.agent_id(self.prefix, thread_id)
            try:
                created = await self.store.create(agent, m.new_doc(thread_id))
            except ConflictError:
                continue  # created concurrently (or a stale base generation): resolve again
            # the document is the one just created, at the seq the store gave it: no
            # listing and load again (a new thread's first write cost 2 store reads
            # more). Another writer moving or deleting it meanwhile makes the write's
            # compare-and-append fail, and the plan runs again on a fresh resolve.
            fresh = _Stream(thread_id, agent, m.new_doc(thread_id), created.last_seq, {})
            self._remember(fresh)
            return fresh
        raise ConflictError(m.agent_id(self.prefix, thread_id), 0, -1)

    async def _append(
        self,
        st: _Stream,
        event_type: str,
        ops: builtins.list[Op],
        key: str | None = None,
        *,
        applied: bool = False,
        plain: bool = False,
    ) -> None:
        """Compare-and-append ``ops`` at ``st.seq``; keep ``st`` current on success.

        ``applied``: ``st.doc`` already has the ops applied (a coalesced batch).
        ``plain``: the values of ``ops`` are plain JSON (see ``_Pending.plain``).

        The document is never changed in place: the ops are applied copy-on-write, and
        on a plain store the result is handed to the store as its record's data (the
        ops are then applied once, not again by the store).
        """
        after = st.doc if applied else m.apply_once(st.doc, ops)
        store = self.store
        fast = self._fast
        result = None
        if (
            fast is not None
            and fast.fast
            and store._gate.ok
            and not store._closed
            and "append" not in store.__dict__  # (an append wrapped by its owner: taken)
        ):
            result = await fast.append_applied(
                st.agent_id, event_type, ops, st.seq, key, after, plain
            )
        if result is None:
            result = await store.append(
                st.agent_id, event_type, None, ops=ops, expected_seq=st.seq, idempotency_key=key
            )
        if result.duplicate:  # an earlier attempt landed: our document is stale
            self._forget(st.thread_id)
            return
        if not applied:
            st.doc = after
            _update_heads(st, ops)
        st.seq = result.last_seq
        st.bytes_since += self._stored(orjson.dumps(ops))
        if st.bytes_since < self.snapshot_min_bytes:
            return
        if not st.snap_bytes:
            st.snap_bytes = self._stored(orjson.dumps(st.doc))
        if st.bytes_since * _SNAPSHOT_SHARE >= st.snap_bytes:
            await self.store.snapshot(st.agent_id)
            st.snap_bytes = self._stored(orjson.dumps(st.doc))
            st.bytes_since = 0

    def _stored(self, blob: bytes) -> int:
        """About the bytes the store keeps of a record holding ``blob`` (JSON): compressed
        when its codec compresses records that size (estimated with zstd level 1, a
        little larger than the codec's level 3). A snapshot is taken once the events
        since the last one stored 1/``_SNAPSHOT_SHARE`` of what it did (snapshots never
        hold more than that many times the events' bytes), so the better a thread's
        state compresses against its events, the more often it is snapshotted and the
        shorter a cold read's replay."""
        codec = self.store.codec
        if codec.compression and len(blob) >= codec.compress_min_bytes:
            return len(_estimator().compress(blob))
        return len(blob)

    def _wake(self, thread_id: str) -> None:
        """Let the writes held on a thread go (into the batch being formed)."""
        for waiter in self._waiting.pop(thread_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def _hold(self, thread_id: str, mine: _Pending) -> None:
        """Wait (at most ``writes_wait``) until another write on the thread — the run's
        next checkpoint, its release — is queued to take ``mine`` into its commit."""
        queued = self._queued.get(thread_id) or []
        if any(p.event_type != m.EV_WRITES for p in queued if p is not mine):
            return  # a checkpoint is already waiting: join it
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(thread_id, []).append(waiter)
        try:
            await asyncio.wait((waiter, mine.future), timeout=self.writes_wait)
        finally:
            waiting = self._waiting.get(thread_id)
            if waiting is not None and waiter in waiting:
                waiting.remove(waiter)
                if not waiting:
                    del self._waiting[thread_id]

    async def _mutate(
        self,
        thread_id: str,
        build: Plan,
        event_type: str,
        *,
        create: bool = True,
        hold: bool = False,
        plain: bool = False,
    ) -> None:
        """Build ops from the current document and append them, retrying on conflicts.

        Calls on one thread that arrive while another is committing are *coalesced*:
        the next lock holder builds every queued plan, one after the other against the
        document as the previous ones leave it, and appends them as one event (one
        commit). LangGraph saves a step's writes and the next checkpoint concurrently,
        so they usually share a commit. A batch holds at most one checkpoint, so the
        document at a checkpoint's seq is still exactly that checkpoint.

        ``hold``: a task's regular writes inside a run first wait for the run's next
        write to be queued (see ``writes_wait``), so that they share its commit.
        """
        loop = asyncio.get_running_loop()
        mine = _Pending(build, loop.create_future(), event_type, create, plain)
        queue = self._queued.setdefault(thread_id, [])
        queue.append(mine)
        if event_type != m.EV_WRITES or not hold:
            self._wake(thread_id)  # held writes join this batch now
        try:
            if hold and self.writes_wait > 0 and event_type == m.EV_WRITES:
                await self._hold(thread_id, mine)
            # the thread's lock taken and released by hand, not through ``hold``'s
            # context manager (a generator and five more calls per write)
            locks = self._locks
            if not locks.try_acquire(thread_id):
                await locks.acquire(thread_id)
            try:
                while not mine.future.done():
                    batch, rest = _take_batch(self._queued.get(thread_id) or [])
                    self._queued[thread_id] = rest
                    await self._commit(thread_id, batch)
                if not self._queued.get(thread_id):
                    self._queued.pop(thread_id, None)
            finally:
                locks.release(thread_id)
        except asyncio.CancelledError:
            waiting = self._queued.get(thread_id)
            if waiting is not None and mine in waiting:  # not taken yet: never write it
                waiting.remove(mine)
            raise
        mine.future.result()

    async def _commit(self, thread_id: str, batch: builtins.list[_Pending]) -> None:
        """Append the plans of ``batch`` as one event; settle each plan's future."""
        live = [p for p in batch if not p.future.done()]
        for _ in range(self.max_retries):
            if not live:
                return
            # no head read first: the compare-and-append below is the check
            st = await self._open(thread_id, create=any(p.create for p in live), check=False)
            if st is None:  # no stream, and none of the plans may create one
                break
            ops: builtins.list[Op] = []
            event_types: builtins.list[str] = []
            key: str | None = None  # a checkpoint's (see history.checkpoint_key)
            included: builtins.list[_Pending] = []
            # several plans: each is applied to the document as it is built (the next
            # is built on its outcome), so the append must not apply them again, even
            # when all but one of them failed
            speculative = len(live) > 1
            for pending in live:
                try:
                    plan = pending.build(st)
                except BaseException as exc:  # e.g. CheckpointForkError: that call fails alone
                    pending.future.set_exception(exc)
                    continue
                included.append(pending)
                if plan is None:
                    continue
                event_type, plan_ops, plan_key = plan
                key = plan_key or key
                event_types.append(event_type)
                ops.extend(plan_ops)
                if speculative:  # later plans are built against this one's outcome
                    st.doc = m.apply_once(st.doc, plan_ops)  # (copy-on-write)
                    _update_heads(st, plan_ops)
            live = included
            if not ops:
                break
            event_type = event_types[0] if len(set(event_types)) == 1 else m.EV_BATCH
            # plain JSON: the plans said so, and no run claim rides on them (its expiry
            # is a float, which the store's serialisation checks)
            plain = all(p.plain for p in live) and "/run" not in {op["path"] for op in ops}
            try:
                await self._append(st, event_type, ops, key, applied=speculative, plain=plain)
                break
            except (ConflictError, AgentNotFound):
                # the document was stale (another writer, or the thread deleted or
                # moved meanwhile) or holds speculative changes: plan again on a read
                self._forget(thread_id)
            except BaseException as exc:
                self._forget(thread_id)
                for pending in live:
                    if not pending.future.done():
                        pending.future.set_exception(exc)
                return
        else:
            error = ConflictError(m.agent_id(self.prefix, thread_id), -1, -1)
            for pending in live:
                if not pending.future.done():
                    pending.future.set_exception(error)
            return
        for pending in live:
            if not pending.future.done():
                pending.future.set_result(None)

    # -- building ops ------------------------------------------------------------

    def _ops_checkpoint(
        self,
        st: _Stream,
        ns: str,
        header: dict[str, Any],
        meta: Any,
        vals: dict[str, Any],
        new_pool: dict[str, Any],
    ) -> tuple[builtins.list[Op], str | None]:
        """The ops that make ``header`` the namespace's checkpoint, and the idempotency
        key of its event (None for an id put before: it is listed in ``re``)."""
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

    # -- reading -----------------------------------------------------------------

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

    async def _thread_ids(self) -> AsyncIterator[str]:
        """Every thread id, reading only the saver's agents (ids sort by prefix)."""
        last: str | None = None
        after = self.prefix
        while True:
            page = await self.store.list_agents(after=after, limit=500)
            for info in page:
                if not info.agent_id.startswith(self.prefix):
                    return
                parsed = m.parse_agent(self.prefix, info.agent_id)
                if parsed is None or parsed[0] == last:
                    continue
                last = parsed[0]
                yield last
            if len(page) < 500:
                return
            after = page[-1].agent_id

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        before_id = get_checkpoint_id(before) if before is not None else None
        if config is None:
            threads: AsyncIterator[str] = self._thread_ids()
            ns_filter: str | None = None
            cid_filter: str | None = None
        else:
            conf = config["configurable"]
            threads = _single(str(conf["thread_id"]))
            ns_filter = conf.get("checkpoint_ns")
            cid_filter = get_checkpoint_id(config)
        remaining = limit
        async for thread_id in threads:
            st = await self._open(thread_id, create=False)
            if st is None:
                continue
            if remaining is not None or cid_filter:
                # newest first from the end of the stream, only as far as needed
                async for tup in self._recent(st, ns_filter, cid_filter, before_id):
                    if filter and not _match(dict(tup.metadata), filter):
                        continue
                    yield tup
                    if remaining is not None:
                        remaining -= 1
                        if remaining <= 0:
                            return
                continue
            doc = st.doc
            view = await self._view(st)
            found = [
                (cid, ns)
                for ns, cids in view.idx.items()
                if ns_filter is None or ns == ns_filter
                for cid in cids
                if (not cid_filter or cid == cid_filter) and (before_id is None or cid < before_id)
            ]
            if not found:
                continue
            found.sort(reverse=True)
            pool = doc["pool"]  # a generation's pool only grows
            for cid, ns in found:
                nsd = view.nsd_at(ns, cid)
                if filter and not _match(self._codec.unpack(nsd["meta"], pool), filter):
                    continue
                tasks = view.writes.get(ns, {}).get(cid)
                yield self._tuple(thread_id, ns, nsd, pool, self._pending(tasks, pool), None)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return

    async def _recent(
        self, st: _Stream, ns_filter: str | None, cid_filter: str | None, before_id: str | None
    ) -> AsyncIterator[CheckpointTuple]:
        """The thread's checkpoints newest first (by id, then namespace, as ``list``
        orders them), reading the stream backwards only as far as the caller takes.

        A checkpoint whose id was greater than every id of its namespace when it was
        put is the only kind whose event sets the namespace's ``top`` (see
        ``_ops_checkpoint``); so, read backwards, each namespace's such events come in
        decreasing id order and one is listed once no namespace can still hold a
        greater one further back. The other ones (put again, or format 1) have their
        seq in the document and are merged in.
        """
        spaces = {
            ns: nsd for ns, nsd in st.doc["ns"].items() if ns_filter is None or ns == ns_filter
        }
        if cid_filter:
            for ns in sorted(spaces, reverse=True):
                tup = await self._read(st, ns, spaces[ns], cid_filter, None)
                if tup is not None and (before_id is None or cid_filter < before_id):
                    yield tup
            return
        # (id, ns) -> seq of its first put when known (None: the document says where)
        waiting: dict[tuple[str, str], int | None] = {}
        #: per namespace still read back: ids not yet met are < bound (or <= when
        #: the flag is set: nothing met yet, the bound is the namespace's top)
        bounds: dict[str, tuple[str, bool]] = {}
        tops: dict[str, str] = {}
        for ns, nsd in spaces.items():
            for cid in (*(nsd.get("re") or ()), *(nsd.get("idx") or ())):
                waiting[(cid, ns)] = None
            if nsd.get("top") is not None:
                bounds[ns] = (nsd["top"], True)
                tops[m.ptr("ns", ns, "top")] = ns
        wholes = {m.ptr("ns", ns): ns for ns in bounds}

        def ready(key: tuple[str, str]) -> bool:
            cid, ns = key
            for other, (bound, inclusive) in bounds.items():
                if cid < bound or (inclusive and cid == bound and ns <= other):
                    return False
            return True

        hi = st.seq
        while True:
            while waiting:
                key = max(waiting)
                if not ready(key):
                    break
                first = waiting.pop(key)
                cid, ns = key
                if before_id is not None and cid >= before_id:
                    continue
                tup = await self._read(st, ns, spaces[ns], cid, None, first)
                if tup is not None:
                    yield tup
            if not bounds or hi <= 0:
                if not waiting:
                    return
                bounds.clear()
                continue
            lo = max(hi - h.WINDOW, 0)
            events = [e async for e in self.store.history(st.agent_id, after_seq=lo, to_seq=hi)]
            hi = lo
            for event in reversed(events):
                for op in event.ops or ():
                    path, value = op["path"], op.get("value")
                    if path in tops and op["op"] == "add":
                        ns = tops[path]
                    elif path in wholes and type(value) is dict and "top" in value:
                        ns, value = wholes[path], value["top"]
                    else:
                        continue
                    if ns in bounds:
                        cid = str(value)
                        bounds[ns] = (cid, False)
                        if waiting.get((cid, ns)) is None:  # its first put
                            waiting[(cid, ns)] = event.seq
            if lo == 0:
                bounds.clear()

    # -- writing -----------------------------------------------------------------

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
            carried = False
            for ch, version in header["cv"].items():
                same_version = ch in old_vals and old_cv.get(ch) == version
                if ch in new_versions:
                    if ch in values:
                        vals[ch] = codec.pack(values[ch], pool, new_pool, memo, used)
                elif same_version and linear:
                    vals[ch] = old_vals[ch]
                    carried = True
                elif ch in values:
                    vals[ch] = codec.pack(values[ch], pool, new_pool, memo, used)
                elif same_version:
                    vals[ch] = old_vals[ch]
                    carried = True
            ops, key = self._ops_checkpoint(st, ns, header, meta, vals, new_pool)
            if memo is not None:
                ops.extend(_after_put(st, used, carried))
            ops.extend(self._archive_ops(st, ns, cid))
            return m.EV_CHECKPOINT, claim + ops if claim else ops, key

        plain = ns != "$t" and cid != "$t" and _plain_header(header)
        await self._mutate(thread_id, build, m.EV_CHECKPOINT, plain=plain)
        self._rode(run)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    async def _put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        ns = conf.get("checkpoint_ns") or ""
        cid = str(conf["checkpoint_id"])
        items = [(WRITES_IDX_MAP.get(ch, i), ch, v) for i, (ch, v) in enumerate(writes)]
        if not items:
            return
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
            return m.EV_WRITES, claim + ops if claim else ops, None

        # a task's regular writes in a live run wait for its next checkpoint's commit
        hold = (
            run is not None and run.hold and not run.released and min(i for i, _, _ in items) >= 0
        )
        plain = "$t" not in (ns, cid, task_id) and type(task_path) is str
        await self._mutate(thread_id, build, m.EV_WRITES, hold=hold, plain=plain)
        self._rode(run)

    async def _delete_thread(self, thread_id: str) -> None:
        async with self._lock(thread_id):
            self._forget(thread_id)
            for agent in await self._generations(thread_id):
                await self.store.delete(agent)

    # -- copying and compaction ----------------------------------------------------

    async def _view(self, st: _Stream) -> h.View:
        """Every checkpoint of the thread and its writes (one pass over the stream)."""
        return await h.scan(self.store, st.agent_id, st.doc)

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
                st = await self._open(thread_id, create=False)
                if st is None:
                    return report
                report.threads_scanned = 1
                claim = st.doc.get("run")
                if self.fork_protection and claim is not None and claim["exp"] > self._clock():
                    report.threads_skipped.append(thread_id)  # a run holds it
                    return report
                view = await self._view(st)
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
                    if not dry_run:
                        self._forget(thread_id)
                        for agent in await self._generations(thread_id):
                            await self.store.delete(agent)
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
        await self.store.create(new_agent, m.new_doc(st.thread_id, sealed=False))
        try:
            dst = await self._load(st.thread_id, new_agent)
            for _, plan in self._replay_plans(st, self._snapshot_parts(st, view, keep)):
                planned = plan(dst)
                if planned is not None:
                    await self._append(dst, planned[0], planned[1], planned[2])
            await self.store.append(
                st.agent_id,
                m.EV_MOVED,
                ops=[{"op": "add", "path": "/moved", "value": dst.generation}],
                expected_seq=fence_seq,
            )
        except ConflictError:
            await self.store.delete(new_agent)
            return False
        except BaseException:
            await self.store.delete(new_agent)
            raise
        await self.store.append(
            new_agent, m.EV_SEALED, ops=[{"op": "replace", "path": "/sealed", "value": True}]
        )
        await self.store.delete(st.agent_id)
        self._forget(st.thread_id)
        return True

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
        return report

    async def _retention(
        self,
        thread_ids: Sequence[str] | None,
        keep_last: int | None,
        ttl: float | None,
        now: float | None,
        dry_run: bool,
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
                if keep_last is not None:
                    ids = ids[:keep_last]
                if cutoff is not None:
                    ids = ids[:1] + [
                        c
                        for c in ids[1:]
                        if (stamps[c] is None or stamps[c] >= cutoff)  # type: ignore[operator]
                    ]
                keep[ns] = set(ids)
            if cutoff is not None and newest is not None and newest < cutoff:
                return {}  # the whole thread expired
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

    # -- BaseCheckpointSaver: sync -------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (by ``checkpoint_id``), else the latest one of
        its thread and namespace; None when there is none.

        At the start of a LangGraph run (with ``fork_protection``) this also claims the
        thread for the run, or raises :class:`ThreadBusyError`."""
        begun = self._begin_run(config, sys._getframe(1))
        if begun is not None:
            found = self._portal.call(self._claim_and_get(begun[0], config))
            self._attach(*begun)
            return found
        return self._portal.call(self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace when given;
        every thread when ``config`` is None), whose metadata matches ``filter``, with
        ids below ``before``'s, at most ``limit``."""
        return self._portal.iterate(self._list(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint whose parent is ``config``'s ``checkpoint_id``; only the
        channels in ``new_versions`` are written. Returns the checkpoint's config."""
        return self._portal.call(self._put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes on ``config``'s checkpoint (regular writes
        insert-or-ignore per task and index; error/interrupt/resume writes replace)."""
        self._portal.call(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread (all namespaces)."""
        self._portal.call(self._delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is listed."""
        self._portal.call(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread into another."""
        self._portal.call(self._copy_thread(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's latest checkpoint (and its writes);
        ``delete``: delete the threads."""
        self._portal.call(self._prune(thread_ids, strategy))

    def prune_retention(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        keep_last: int | None = None,
        ttl: float | None = None,
        now: float | None = None,
        dry_run: bool = False,
    ) -> RetentionReport:
        """Apply retention to some threads (all when None).

        ``keep_last=N`` keeps the N newest checkpoints of each namespace. ``ttl``
        (seconds) removes checkpoints older than ``now - ttl`` but the newest of each
        namespace, and deletes a thread whose newest checkpoint is older than that.
        Checkpoint ages come from their (uuid6) ids. ``dry_run`` only reports.
        """
        return self._portal.call(self._retention(thread_ids, keep_last, ttl, now, dry_run))

    def get_next_version(self, current: int | str | float | None, channel: None) -> Any:
        """Integer versions (1, 2, …); a thread already holding string versions keeps
        LangGraph's zero-padded string format."""
        if current is None:
            return 1
        if isinstance(current, str):
            return f"{int(current.split('.')[0]) + 1:032}.{random.random():016}"
        return int(current) + 1

    # -- BaseCheckpointSaver: async ------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        begun = self._begin_run(config, sys._getframe(1))
        if begun is not None:
            found = await self._portal.run(self._claim_and_get(begun[0], config))
            self._attach(*begun)
            return found
        return await self._portal.run(self._get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        async for item in self._portal.aiterate(self._list(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`."""
        return await self._portal.run(self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`."""
        await self._portal.run(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await self._portal.run(self._delete_thread(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        await self._portal.run(self._delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await self._portal.run(self._copy_thread(str(source_thread_id), str(target_thread_id)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`."""
        await self._portal.run(self._prune(thread_ids, strategy))

    async def aprune_retention(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        keep_last: int | None = None,
        ttl: float | None = None,
        now: float | None = None,
        dry_run: bool = False,
    ) -> RetentionReport:
        """Async :meth:`prune_retention`."""
        return await self._portal.run(self._retention(thread_ids, keep_last, ttl, now, dry_run))


async def _single(value: str) -> AsyncIterator[str]:
    yield value


def _split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``from_url``'s options: (the saver's, the store's with the saver's defaults)."""
    saver_opts = {k: v for k, v in options.items() if k in _SAVER_OPTIONS}
    store_opts = {k: v for k, v in options.items() if k not in _SAVER_OPTIONS}
    # the saver snapshots adaptively (see snapshot_min_bytes)
    store_opts.setdefault("snapshot_every", 1_000_000)
    if not _CODEC_OPTIONS & store_opts.keys():
        # snapshots and checkpoint events compressed (see _COMPRESS_MIN)
        store_opts["codec"] = Codec(compression="zstd-dict", compress_min_bytes=_COMPRESS_MIN)
    return saver_opts, store_opts


async def _make_store(url: str | None, options: dict[str, Any]) -> StateStore:
    # built on the portal's loop so that its asyncio objects belong to it
    return StateStore(url, **options)
