"""``StatekeeperSaver``: a LangGraph checkpointer on any statekeeper backend.

The async methods are the implementation. They always run on the saver's private event
loop so that the store is driven from one loop whatever calls it. That loop has no
thread of its own (:class:`.loop.SharedLoop`): a sync method (which LangGraph calls
from sync graphs, from worker threads, or from inside a running event loop) runs it on
the calling thread while nobody else does, and the async ones await it. See
:mod:`.mapping` for the storage layout.

This module is the saver's public face: opening (``from_url``), closing, and
LangGraph's sync and async methods. The implementation is a chain of mixins, one job
each, every one built on the ones before it:

- :mod:`.state`: the options and state (``__init__``);
- :mod:`.streams`: a thread's live stream, cached, head-checked, created, resolved
  across generations (:mod:`.stream`: the cached view, ``_Stream``);
- :mod:`.commits`: the write queue: plans built on the cached document, committed by
  compare-and-append, coalesced per thread; the adaptive snapshots;
- :mod:`.claims`: fork protection per run (claims, renewal, release, refusals);
- :mod:`.reads`: one checkpoint (latest, older), a run's first read;
- :mod:`.listing`: ``list``;
- :mod:`.writes`: ``put``, ``put_writes``, ``delete_thread``;
- :mod:`.pruning`: ``copy_thread``, ``prune``, retention, ``delete_for_runs``;
- :mod:`.faults`: the errors fork protection raises.

The other seams are modules too: the event loop (:mod:`.loop`; the shared one in
:mod:`statekeeper.store.shared_loop`), value packing
(:mod:`.serde`), the storage layout (:mod:`.mapping`), run detection (:mod:`.runs`),
import/export (:mod:`.migrate`), the peers (:mod:`.peers`).
"""

from __future__ import annotations

import asyncio
import atexit
import random
import sys
from collections.abc import (
    AsyncIterator,
    Iterator,
    Sequence,
)
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from ...codec import Codec
from ...store.store import StateStore
from .faults import CheckpointForkError, ThreadBusyError, ThreadFormatTooNew, ThreadNotFound
from .loop import BoundLoop, SharedLoop
from .pruning import RetentionReport, _SaverPruning
from .state import _SaverPortal as _SaverPortal  # (imported by the inspector)
from .state import check_saver_options

__all__ = [
    "CheckpointForkError",
    "RetentionReport",
    "StatekeeperSaver",
    "ThreadBusyError",
    "ThreadFormatTooNew",
    "ThreadNotFound",
]


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


#: store options that configure the codec (see :meth:`StatekeeperSaver.from_url`)
_CODEC_OPTIONS = frozenset({"codec", "keyring", "compression", "format", "types"})


#: records of at least this many bytes are compressed by the store ``from_url`` opens,
#: with the codec's built-in dictionary (``"zstd-dict"``: the JSON Patch and saver
#: vocabulary is in the dictionary, not in each record): a thread's snapshots, its
#: checkpoint events (~0.4-1.5 KB of JSON Patch: 413 -> 204 bytes a record on the
#: 30-step graph, 2x smaller than plain zstd) and its run claims (~90 bytes -> ~50)
_COMPRESS_MIN = 64


class StatekeeperSaver(_SaverPruning):
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
        check_saver_options(**saver_opts)  # before a store is opened (or created) for it
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
        check_saver_options(**saver_opts)  # before a store is opened (or created) for it
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

    def close(self) -> None:
        """Close the store (when the saver opened it) and stop the saver's loop.

        A saver of :meth:`from_url` that is never closed is closed at interpreter exit.
        From code running on the saver's loop it would wait for that loop: it raises
        :class:`~statekeeper.errors.ConfigurationError` there, the saver left open
        (:meth:`aclose` closes it there)."""
        self._portal.refuse_on_loop("closing the saver with close()")
        if self._at_exit is not None:
            atexit.unregister(self._at_exit)
        if not self._portal.running:
            return
        try:
            self._portal.call(self._stop_renewer())
            if self._owns_store:
                self._portal.call(self.store.close())
        finally:
            self._portal.stop()

    async def aclose(self) -> None:
        """Async :meth:`close`. From code running on the saver's own loop (an ``async
        with`` exited in a task of it) the store is closed there, calls are refused
        from then on, and the loop ends once control has left it."""
        if self._at_exit is not None:
            atexit.unregister(self._at_exit)
        if not self._portal.running:
            return
        try:
            await self._portal.run(self._stop_renewer())
            if self._owns_store:
                await self._portal.run(self.store.close())
        finally:
            portal = self._portal
            if isinstance(portal, SharedLoop) and portal.on_loop():
                portal.stop_soon()  # (stop() would wait for the loop this code runs on)
            else:
                await asyncio.to_thread(portal.stop)

    def __enter__(self) -> StatekeeperSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> StatekeeperSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (by ``checkpoint_id``), else the latest one of
        its thread and namespace; None when there is none.

        At the start of a LangGraph run (with ``fork_protection``) this also claims the
        thread for the run, or raises :class:`ThreadBusyError`."""
        begun = self._begin_run(config, sys._getframe(1))
        if begun is not None:
            self._attach(*begun)  # (first: a call that raises ends the run too)
            return self._portal.call(self._claim_and_get(begun[0], config), bare=self._sends_bare)
        return self._portal.call(self._get_tuple(config), bare=self._sends_bare)

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
        return self._portal.call(
            self._put(config, checkpoint, metadata, new_versions), bare=self._sends_bare
        )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes on ``config``'s checkpoint (regular writes
        insert-or-ignore per task and index; error/interrupt/resume writes replace)."""
        self._sync_put_writes(config, writes, task_id, task_path)

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
        up_to: str | None = None,
    ) -> RetentionReport:
        """Apply retention to some threads (all when None).

        ``keep_last=N`` keeps the N newest checkpoints of each namespace. ``ttl``
        (seconds) removes checkpoints older than ``now - ttl`` but the newest of each
        namespace, and deletes a thread whose newest checkpoint is older than that.
        Checkpoint ages come from their (uuid6) ids. ``dry_run`` only reports.
        ``up_to``: a checkpoint id — retention applies to the checkpoints up to it
        (the ones a user was shown; ``keep_last`` counts among them), and every newer
        one is kept.
        """
        return self._portal.call(self._retention(thread_ids, keep_last, ttl, now, dry_run, up_to))

    def get_next_version(self, current: int | str | float | None, channel: None) -> Any:
        """Integer versions (1, 2, …); a thread already holding string versions keeps
        LangGraph's zero-padded string format."""
        if current is None:
            return 1
        if isinstance(current, str):
            return f"{int(current.split('.')[0]) + 1:032}.{random.random():016}"
        return int(current) + 1

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        begun = self._begin_run(config, sys._getframe(1))
        if begun is not None:
            self._attach(*begun)  # (first: a call that raises ends the run too)
            return await self._portal.run(self._claim_and_get(begun[0], config))
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
        up_to: str | None = None,
    ) -> RetentionReport:
        """Async :meth:`prune_retention`."""
        return await self._portal.run(
            self._retention(thread_ids, keep_last, ttl, now, dry_run, up_to)
        )


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
