"""``list``: the saver's threads, every checkpoint of a thread (one pass over its
stream), and the newest ones read backwards only as far as the caller takes."""

from __future__ import annotations

from collections.abc import (
    AsyncIterator,
)
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    CheckpointTuple,
    get_checkpoint_id,
)

from ...errors import AgentNotFound
from . import history as h
from . import mapping as m
from .reads import _SaverReads
from .stream import _Stream


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


class _SaverListing(_SaverReads):
    """The saver's listing."""

    async def _thread_ids(self) -> AsyncIterator[str]:
        """Every thread id, reading only the saver's agents (ids sort by prefix)."""
        await self._require("read", "list", None)  # none readable: refused, not "none"
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

    async def _scan_live(self, thread_id: str) -> h.View | None:
        """The :class:`~.history.View` of a thread never compacted, from one read of
        its base generation (its document is the one the scan ends with), else None
        (absent, moved, not yet sealed, or already cached: :meth:`_open` resolves it).

        ``list(None)`` read every thread twice: ``_open`` folded its document, then
        the scan folded the whole stream again from its first event."""
        if thread_id in self._streams:
            return None
        view_agent = m.agent_id(self.prefix, thread_id)
        try:
            view = await h.scan(self.store, view_agent)
        except AgentNotFound:
            return None
        doc = view.doc
        m.check_format(thread_id, view_agent, doc)
        wrong = self._foreign(thread_id, view_agent, doc)
        if wrong is not None:
            raise wrong
        if doc.get("moved") is not None or not doc.get("sealed", True):
            return None
        return view

    async def _view(self, st: _Stream) -> h.View:
        """Every checkpoint of the thread and its writes (one pass over the stream)."""
        return await h.scan(self.store, st.agent_id, st.doc)

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
            whole = remaining is None and not cid_filter
            # (the common case: the thread read once, see _scan_live)
            view = await self._scan_live(thread_id) if whole else None
            doc = view.doc if view is not None else None
            if view is None:
                st = await self._open(thread_id, create=False)
                if st is None:
                    continue
                if not whole:
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
            assert doc is not None
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


async def _single(value: str) -> AsyncIterator[str]:
    yield value
