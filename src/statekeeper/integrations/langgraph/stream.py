"""The saver's cached view of one thread's stream (``_Stream``), the plan type its
writes are built with, a write waiting in the thread's queue (``_Pending``), and how
its per-namespace heads are kept current.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections import OrderedDict
from collections.abc import (
    Callable,
)
from dataclasses import dataclass, field
from typing import Any

from ... import patch
from . import history as h
from .serde import Built, Memo

Op = dict[str, Any]


@dataclass(eq=False)
class _Stream:
    """The saver's cached view of one generation of a thread's stream."""

    thread_id: str
    agent_id: str
    doc: dict[str, Any]
    seq: int
    heads: dict[str, str | None]
    #: the head tag stored with ``seq`` when this view was read or written (None: not
    #: known): what tells this stream from one deleted and made again up to the same
    #: seq by another process (see ``_SaverStreams._checked_head``)
    tag: bytes | None = None
    #: what the thread's last snapshot costs in storage (its bytes after the store's
    #: compression, estimated: see ``StatekeeperSaver._snapshot_cost``); 0: not known
    #: (a stream read from storage: worked out when a snapshot may be due)
    snap_bytes: int = 0
    #: stored bytes (estimated the same way) of the events appended since (by this saver)
    bytes_since: int = 0
    #: after a snapshot failed: ``bytes_since`` at which it is tried again (0: none failed)
    snap_retry: int = 0
    #: per event type: [its stored/JSON bytes ratio last measured, writes since]
    ratios: dict[str, builtins.list[Any]] = field(default_factory=dict)
    #: messages of the latest checkpoint and of the writes since (see ValueCodec.pack)
    memo: Memo = field(default_factory=dict)
    #: entries of ``memo`` when its dead ones were last dropped (see ``_after_put``)
    memo_kept: int = 0
    #: messages built by the last read of the latest checkpoint
    loaded: Memo = field(default_factory=dict)
    #: id(message) -> (message, [[pointer of a write cell holding it, its packed
    #: reference]], number of puts before the write) for writes of the last two puts
    written: dict[int, tuple[Any, builtins.list[builtins.list[Any]], int]] = field(
        default_factory=dict
    )
    #: checkpoint puts built on this view
    puts: int = 0
    #: (the ops of the plan just built, the document they make of ``doc``, the
    #: namespace whose head they set and its new head, or None, None): made by a
    #: plan with the document it changes in hand (see :mod:`.made`), taken by the
    #: commit of those very ops (the list itself) instead of applying them and parsing
    #: their paths for heads again
    made: tuple[builtins.list[Op], dict[str, Any], str | None, str | None] | None = None
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


@dataclass(eq=False, slots=True)
class _Count:
    """The snapshot count of a thread's view that a write answered "duplicate"
    dropped, for the thread's next view (see ``_SaverStreams._carry_count``): the
    counts only, not the view (its document and message caches, which stayed in
    memory for every thread handed one until its id was written again)."""

    agent_id: str
    #: the dropped view's seq: the landed event is after it (a view at or below it is
    #: of another stream: the thread deleted and made again)
    seq: int
    snap_bytes: int
    bytes_since: int
    snap_retry: int
    ratios: dict[str, builtins.list[Any]]


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
    #: held from when the write is parked until it is settled, then released: its sync
    #: caller waits on it off the loop (a parked write, see ``_SaverCommits._park``).
    #: A plain lock, not a ``threading.Event``: an event is a ``Condition`` written in
    #: Python (made, waited on and set: ~25 Python calls a write), a lock's acquire
    #: and release are C calls
    parked: threading.Lock | None = None
    #: the thread's document as the commit that settled the write left it (None: no
    #: stream): what the write's caller checks after it, whatever the cache holds then
    doc: dict[str, Any] | None = None


class Loading:
    """A load of a thread's document in flight (see ``_SaverStreams._keep``): ``stale``
    once the thread was written or dropped by this saver meanwhile. Compared by
    identity (two loads of a thread may be in flight at once)."""

    __slots__ = ("stale",)

    def __init__(self) -> None:
        self.stale = False


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
