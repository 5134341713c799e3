"""Finding, loading, creating and caching a thread's live stream (its generations,
the cut-over after a compaction), the codec and the per-thread lock."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ...errors import AgentNotFound, AgentOnHold, ConfigurationError, ConflictError
from ...namespaces import namespace_of
from ...store.conditional import delete_only_at
from ...store.governed import governance_of
from ...store.holds import list_holds
from ...store.namespaced import stored_id
from ...store.writes import SEEN, Seen
from . import mapping as m
from .serde import ValueCodec
from .state import _SaverState
from .stream import Loading, _Count, _heads, _Stream

if TYPE_CHECKING:
    from ...store.store import StateStore


class _SaverStreams(_SaverState):
    """The saver's stream cache: a thread's live stream with a current document."""

    @property
    def _codec(self) -> ValueCodec:
        codec = self._codec_cache
        if codec is None or codec.serde is not self.serde:
            codec = ValueCodec(self.serde, native=self.native_json)
            self._codec_cache = codec
        return codec

    def _lock(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(thread_id)

    def _remember(self, st: _Stream, *, new: bool = True) -> None:
        """Cache ``st``; ``new``: a view just read or made (it takes a count handed on)."""
        if new and self._counts:
            self._carry_count(st)
        self._streams[st.thread_id] = st
        self._streams.move_to_end(st.thread_id)
        while len(self._streams) > max(self.cache_size, 1):
            evicted = self._streams.popitem(last=False)[1]
            if evicted.snap_retry:  # (a failed snapshot's retry: not known to the store)
                self._hand_count(evicted)

    def _hand_count(self, dropped: _Stream) -> None:
        """Keep the snapshot count of ``dropped`` for its thread's next view (see
        :meth:`_carry_count`); a bounded number of threads (not all are written again)."""
        counts = self._counts
        counts.pop(dropped.thread_id, None)
        counts[dropped.thread_id] = _Count(
            dropped.agent_id,
            dropped.seq,
            dropped.snap_bytes,
            dropped.bytes_since,
            dropped.snap_retry,
            dropped.ratios,
        )
        if len(counts) > max(self.cache_size, 1):
            del counts[next(iter(counts))]

    def _carry_count(self, st: _Stream) -> None:
        """Give ``st``, a new view of its thread, the snapshot count of the view a
        write answered "duplicate" dropped (see ``_SaverCommits._append``): the bytes
        appended since the thread's last snapshot as this saver counted them (a view
        read from storage has the store's count, :meth:`_load`), and a failed
        snapshot's retry. Not to a view of another stream under the same id (the
        thread deleted and made again: at or below the dropped seq)."""
        dropped = self._counts.pop(st.thread_id, None)
        if dropped is None or dropped.agent_id != st.agent_id or st.seq <= dropped.seq:
            return
        st.bytes_since = dropped.bytes_since
        st.snap_retry = dropped.snap_retry
        st.snap_bytes = dropped.snap_bytes or st.snap_bytes
        for kind, ratio in dropped.ratios.items():
            st.ratios.setdefault(kind, ratio)

    def _deleted(self, thread_id: str) -> None:
        """The thread is being deleted: no view of it, nor a count for the next (a
        thread made again under its id is another stream, counted from zero)."""
        self._forget(thread_id)
        self._counts.pop(thread_id, None)

    def _forget(self, thread_id: str) -> None:
        self._streams.pop(thread_id, None)
        self._outdate(thread_id)

    def _outdate(self, thread_id: str) -> None:
        """The thread was written or dropped: its loads in flight read before that, and
        are not cached (see :meth:`_keep`)."""
        for mark in self._loading.get(thread_id, ()):
            mark.stale = True

    @contextmanager
    def _in_flight(self, thread_id: str) -> Iterator[Loading]:
        """A load of the thread in flight: its mark is set when the thread is written or
        dropped before the load ends (:meth:`_outdate`)."""
        mark = Loading()
        self._loading.setdefault(thread_id, []).append(mark)
        try:
            yield mark
        finally:
            marks = self._loading.get(thread_id)
            if marks is not None:
                marks.remove(mark)
                if not marks:
                    del self._loading[thread_id]

    def _keep(self, st: _Stream, mark: Loading) -> None:
        """Cache a stream a load read, unless the thread was written or dropped while
        the load was in flight: another task of the saver (a LangGraph graph's
        parallel subgraph runs share the thread) committed a newer document, and
        caching the one read over it had the next write planned on the older one (a
        put refused as a fork, a run's write as busy: its claim not in it)."""
        if not mark.stale:
            self._remember(st)

    def _wrote(self, st: _Stream) -> None:
        """After a commit on ``st``: it is the thread's newest document in this saver
        (its writes are serialised by the thread's lock), cached again if a read
        replaced or evicted it during the commit, and loads in flight are older."""
        self._outdate(st.thread_id)
        if self._streams.get(st.thread_id) is not st:
            self._remember(st, new=False)

    async def _require(self, permission: str, operation: str, thread_id: str | None) -> None:
        """On a store opened as a principal: raise
        :class:`~statekeeper.errors.AccessDenied` (audited) unless it has ``permission``
        on ``thread_id``'s stream, or (None) somewhere in the saver's namespace. Listing
        filters what the principal may not read, so without this a thread it may not
        see would look absent: deleting it would "succeed" having deleted nothing, and
        listing the threads of a namespace it may not read would answer "none"."""
        gov = governance_of(self.store)
        if gov is None:
            return
        stream = stored_id(self.store, m.agent_id(self.prefix, thread_id or "-"))
        if thread_id is not None:
            await gov.require(stream, permission, operation)
        else:
            await gov.require_reach(namespace_of(stream), permission, operation)

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

    async def _held(
        self, thread_id: str, operation: str, agents: builtins.list[str] | None = None
    ) -> AgentOnHold | None:
        """The refusal of ``operation`` on the thread when a legal hold covers any of its
        streams (``agents``: its generations, listed when not given), else None: every
        part is checked before any is deleted, so a thread goes whole or not at all."""
        holds = await list_holds(self.store)
        if not holds:
            return None
        for agent in agents if agents is not None else await self._generations(thread_id):
            for hold in holds:
                if hold.covers(stored_id(self.store, agent)):
                    return AgentOnHold(agent, hold.pattern, hold.reason, operation)
        return None

    async def _load(self, thread_id: str, agent: str) -> _Stream:
        # a plain store hands over its own folded document: the saver changes its
        # documents copy-on-write only (as the one it hands to ``append_applied``), so
        # the store neither copies nor serialises one for it (see ``Reads.public``)
        store = self.store
        seen = Seen(0, None)  # (told the tag of the state read: see _tag_of)
        token = SEEN.set(seen)
        try:
            snap = await (store.get(agent) if self._fast is None else store._get_shared(agent))
        finally:
            SEEN.reset(token)
        if snap is None:
            raise AgentNotFound(agent)
        doc = snap.data
        m.check_format(thread_id, agent, doc)
        wrong = self._foreign(thread_id, agent, doc)
        if wrong is not None:
            raise wrong
        # (the record the read just used, no await since: the tag of this very state)
        st = _Stream(
            thread_id, agent, doc, snap.seq, _heads(doc), _tag_of(store, agent, snap.seq, seen)
        )
        # the thread's snapshot count goes on from what the store stored since its last
        # snapshot: a view read again (evicted, dropped on a conflict, another process)
        # counted from zero, and a thread read again every few turns was never snapshotted
        if (replay := seen.adopted_replay) is not None:
            st.bytes_since, st.snap_bytes = replay
        return st

    def _foreign(self, thread_id: str, agent: str, doc: Any) -> ConfigurationError | None:
        """The refusal of a stream that holds another saver's thread: one whose prefix
        continues this one's (``app`` and ``app2``: ``app``'s thread ``2x`` is the
        agent ``app2x#0``, ``app2``'s thread ``x``). Its document names its thread."""
        held = doc.get("thread") if isinstance(doc, dict) else None
        if held is None or str(held) == thread_id:  # (as every thread id is taken: str)
            return None
        return ConfigurationError(
            f"agent {agent!r} holds LangGraph thread {held!r} of another saver, not thread"
            f" {thread_id!r} of this one (prefix {self.prefix!r}): that saver's prefix"
            " starts with this one's, and its thread ids continue it; give the savers of a"
            " store prefixes ending in '/' (e.g. 'app/' and 'app2/'; the default is 'lg/')."
            " Nothing was read or written"
        )

    async def _resolve(self, thread_id: str, *, base_first: bool = True) -> _Stream | None:
        """Find the live generation of a thread's stream (see :mod:`.mapping`).

        The base generation is read first: when it is there, sealed and not fenced, it
        is the live one (a newer generation is sealed only after the one before it is
        fenced), so a thread never compacted is one store read, not a listing and a
        read; and that read makes the checks of a store's first use (its witness: a
        thread that a rollback of the file removed raises ``RollbackDetected`` instead
        of reading as absent, which a listing alone did not check). ``base_first=False``:
        the generations are listed first (one read for a thread that is not there)."""
        base = m.agent_id(self.prefix, thread_id)
        first: _Stream | None = None
        if base_first:
            with contextlib.suppress(AgentNotFound):
                first = await self._load(thread_id, base)
        if first is not None and first.doc.get("moved") is None and first.doc.get("sealed", True):
            return first
        loaded: dict[str, _Stream] = {}
        for agent in await self._generations(thread_id):
            if agent == base and first is not None:
                loaded[m.BASE_GENERATION] = first
                continue
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
                try:
                    return await self._load(thread_id, st.agent_id)
                except AgentNotFound:  # the thread deleted meanwhile (maybe made again)
                    return await self._resolve(thread_id, base_first=base_first)
        return None

    async def _finish_cutover(self, st: _Stream, old: builtins.list[_Stream]) -> None:
        await self.store.append(
            st.agent_id, m.EV_SEALED, ops=[{"op": "replace", "path": "/sealed", "value": True}]
        )
        store = self.store
        for prev in old:
            # only the fenced stream read: at its head's identity (its seq and stored
            # checksum, compared by the engine in the delete's commit) — a thread
            # deleted and made again by another process meanwhile is not deleted (with
            # the store's cache off it was deleted at the seq alone: no checksum known)
            checksum = await checksum_as_read(store, prev.agent_id, prev.seq, prev.tag)
            if checksum is None:  # another stream now, or its identity not known: kept
                continue
            with contextlib.suppress(ConflictError), delete_only_at(prev.seq, checksum):
                await store.delete(prev.agent_id)

    async def _checked_head(self, st: _Stream) -> int:
        """The stored head seq of ``st``'s stream, or -1 when the stream there is not
        the one ``st`` holds: deleted and made again up to the same seq by another
        saver (a head seq alone cannot tell them apart — ``get_tuple`` served the
        deleted checkpoint). The head is read with its tag — the same row, one more
        column (SQLite, PostgreSQL), the same ``HMGET`` (Redis) — and the tag compared
        with the one of ``st``'s document: on a plain store whose record cache still
        holds that very document (``data is st.doc``, at ``st.seq``, its tag known),
        the record's; else (a governed or namespaced store, buffered writes, the
        record evicted) the one ``st`` remembers from when it was read or written. The
        seq alone only when neither is known (a stream stored without head tags)."""
        store = self.store
        agent = st.agent_id
        if self._fast is not None and agent not in store._reads.pinned:
            await store._ready(agent)
            record = store._reads.cache.peek(agent)
            if (
                record is not None
                and record.tag_known
                and record.seq == st.seq
                and record.data is st.doc
            ):
                head, tag = await store.backend.head_tag(agent)
                return head if head != st.seq or tag == record.tag else -1
        if st.tag is not None:  # (the store's wrapper, if any, checks and maps the read)
            head, tag = await store._head_tag(agent)
            return head if head != st.seq or tag == st.tag else -1
        return await store.head(agent)

    async def _open(
        self, thread_id: str, *, create: bool, check: bool = True, base_first: bool = True
    ) -> _Stream | None:
        """The thread's live stream with a current document (cached, head-checked).

        ``check=False``: a cached document is used without reading the stored head —
        for a write, whose compare-and-append at the document's seq is the check (a
        stale document loses it, is dropped, and the write is planned again on a
        fresh read), and for a read made right after such a write succeeded.
        ``base_first``: see :meth:`_resolve` (a write that may create the thread lists
        its generations first: one read when it is new).
        """
        st = self._streams.get(thread_id)
        if st is not None and not check and st.doc.get("moved") is None:
            self._streams.move_to_end(thread_id)
            return st
        if st is not None:
            head = await self._checked_head(st)
            # the cache may have changed during the read: another task of the thread
            # (a LangGraph graph's parallel subgraph runs share it) dropped the entry,
            # replaced it with its own newer document, or evicted it. Before, a
            # move_to_end here raised KeyError into the graph run.
            cached = self._streams.get(thread_id) is st
            if head == st.seq and st.doc.get("moved") is None:
                if cached:
                    self._streams.move_to_end(thread_id)
                return st
            if cached:
                self._forget(thread_id)
            if head > 0:
                with self._in_flight(thread_id) as mark:
                    try:
                        fresh = await self._load(thread_id, st.agent_id)
                    except AgentNotFound:
                        fresh = None
                if fresh is not None and fresh.doc.get("moved") is None:
                    self._keep(fresh, mark)
                    return fresh
        for _ in range(self.max_retries):
            with self._in_flight(thread_id) as mark:
                found = await self._resolve(thread_id, base_first=base_first and not create)
            if found is not None:
                self._keep(found, mark)
                return found
            if not create:
                return None
            agent = m.agent_id(self.prefix, thread_id)
            seen = Seen(0, None)
            token = SEEN.set(seen)
            try:
                created = await self.store.create(agent, m.new_doc(thread_id))
            except ConflictError:
                continue  # created concurrently (or a stale base generation): resolve again
            finally:
                SEEN.reset(token)
            # the document is the one just created, at the seq the store gave it: no
            # listing and load again (a new thread's first write cost 2 store reads
            # more). Another writer moving or deleting it meanwhile makes the write's
            # compare-and-append fail, and the plan runs again on a fresh resolve.
            seq = created.last_seq
            fresh = _Stream(
                thread_id,
                agent,
                m.new_doc(thread_id),
                seq,
                {},
                _tag_of(self.store, agent, seq, seen),
            )
            self._remember(fresh)
            return fresh
        raise ConflictError(m.agent_id(self.prefix, thread_id), 0, -1)


def _tag_of(store: StateStore, agent: str, seq: int, seen: Seen) -> bytes | None:
    """The head tag stored with ``seq`` of ``agent``'s stream, as the store last read or
    wrote it: from its cached record, else as the call just made told it (``seen``) —
    with the store's cache off (``cache_size=0``) or the record evicted, the saver
    otherwise knew no tag, and a write onto a thread deleted and made again up to the
    same seq by another process was made at the seq alone (its ops applied onto the
    other stream's document: a checkpoint read back with the other process's values)."""
    tag = store._tag_at(agent, seq)
    return tag if tag is not None else seen.adopted_tag


async def checksum_as_read(
    store: StateStore, agent: str, seq: int, tag: bytes | None
) -> bytes | None:
    """The stored checksum of the event at ``seq`` of ``agent``'s stream as the saver
    read it at that head (``tag``: the head tag read with it), what a delete of that
    stream only is conditional on: the store's cached record's, else (cache off, or
    evicted) read — the head event's identity, then the tag stored with the head, so a
    stream made again before the tag's read has another tag, and one made again after
    the identity's read another checksum (the engine refuses the delete). None: the
    stream there is no longer the one read, or the tag was not known (delete nothing:
    a delete at the seq alone would take a thread made again up to it)."""
    checksum = store._checksum_at(agent, seq)
    if checksum is not None or tag is None:
        return checksum
    from ...store.delete_shown import head_identity  # (only a cache-less delete reads it)

    head = await head_identity(store, agent)
    if head is None or head[0] != seq or await store._head_tag(agent) != (seq, tag):
        return None
    return head[2]
