"""What a thread's document no longer holds: where each checkpoint is, and past writes.

A thread's document (see :mod:`.mapping`) describes the latest checkpoint of each
namespace and the pending writes of that checkpoint only, so that a cold read of the
latest checkpoint decodes nothing it does not return. The rest is found in the stream:

* **Where a checkpoint is.** Each checkpoint event is appended with an idempotency key
  derived from its namespace and id (:func:`checkpoint_key`): the store's key index
  finds its seq in one indexed read, and the document at that seq is the checkpoint.
  A checkpoint put again (same id, rare: an older id put after a newer one) is listed
  in the namespace's ``re`` map instead; streams written in format 1 keep their frozen
  ``idx`` map for the checkpoints put then.
* **Past pending writes.** When a namespace's next checkpoint is put, the writes of the
  one it replaces are removed from the document by an op of that checkpoint's event
  (after every other op of it). They are therefore all in the events between their
  checkpoint and the next checkpoint of its namespace (:func:`older_writes` reads that
  window, usually one or two events); writes made later on an older checkpoint stay in
  the document (:func:`merge_tasks` joins both).

:func:`scan` rebuilds the whole index and every checkpoint's writes from the stream in
one forward pass, for ``list`` and the copy, prune and retention passes, which read every
checkpoint anyway.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ... import patch
from . import mapping as m

if TYPE_CHECKING:
    from ...store.store import StateStore

__all__ = [
    "View",
    "checkpoint_key",
    "merge_tasks",
    "older_writes",
    "put_again",
    "scan",
]

#: events read per round trip while looking for the end of a checkpoint's writes
WINDOW = 8


def checkpoint_key(ns: str, cid: str) -> str:
    """The idempotency key of the event that put checkpoint ``cid`` of namespace ``ns``
    (a digest: namespaces and ids may hold characters keys may not)."""
    raw = f"{ns}\x00{cid}".encode("utf-8", "surrogatepass")
    return "lg.cp." + hashlib.blake2b(raw, digest_size=16).hexdigest()


def ns_head(nsd: dict[str, Any]) -> str | None:
    """The namespace's latest checkpoint id (the greatest id put)."""
    top = nsd.get("top")
    if top is not None:
        return str(top)
    legacy = nsd.get("idx")
    return max(legacy) if legacy else None


def stored_seq(nsd: dict[str, Any], cid: str) -> int | None:
    """The seq of checkpoint ``cid`` when the document says it (a re-put or a format 1
    checkpoint); None: ask the key index."""
    again = put_again(nsd, cid)
    if again:
        return again[-1]
    legacy = nsd.get("idx")
    if legacy and cid in legacy:
        return int(legacy[cid])
    return None


def put_again(nsd: dict[str, Any], cid: str) -> list[int]:
    """The seqs at which checkpoint ``cid`` was put again, oldest first (``re`` holds a
    list; a single seq in streams written before it kept them all)."""
    again = nsd.get("re")
    if not again or cid not in again:
        return []
    seqs = again[cid]
    return [int(s) for s in seqs] if isinstance(seqs, list) else [int(seqs)]


def merge_tasks(
    archived: dict[str, Any] | None, current: dict[str, Any] | None
) -> dict[str, Any] | None:
    """One checkpoint's writes from its archived part and what the document holds. A
    regular write (index >= 0) is insert-or-ignore, so the archived (earlier) one wins;
    error, interrupt and resume writes (negative index) replace, so the later wins."""
    if not archived:
        return current
    if not current:
        return archived
    out = {t: {"p": task["p"], "i": dict(task["i"])} for t, task in archived.items()}
    for task_id, task in current.items():
        mine = out.setdefault(task_id, {"p": task["p"], "i": {}})
        for idx, entry in task["i"].items():
            if int(idx) < 0 or idx not in mine["i"]:
                mine["i"][idx] = entry
    return out


def _tokens(path: str) -> list[str]:
    return [patch.unescape(t) for t in path[4:].split("/")]


async def older_writes(
    store: StateStore, agent: str, ns: str, cid: str, seq: int, at: dict[str, Any]
) -> dict[str, Any] | None:
    """The writes of checkpoint ``cid`` archived after it was replaced: those made from
    its event at ``seq`` (``at``: its namespace document there) to the next checkpoint
    of ``ns`` (the event that removed them from the document), included."""
    base = m.ptr("ns", ns)
    wbase = m.ptr("ns", ns, "w", cid)
    found: Any = at["w"].get(cid)
    pos = seq
    while True:
        read = 0
        async for event in store.history(agent, after_seq=pos, to_seq=pos + WINDOW):
            read += 1
            pos = event.seq
            replaced = False
            for op in event.ops or ():
                path = op["path"]
                if path == wbase:
                    if op["op"] == "remove":  # archived here: what follows is in the document
                        return found  # type: ignore[no-any-return]
                    found = op.get("value")
                elif path.startswith(wbase + "/"):
                    rel = dict(op, path=path[len(wbase) :])
                    found = patch.apply(found if found is not None else {}, [rel])
                elif path == base + "/cp" or path.startswith(base + "/cp/"):
                    replaced = True
            if replaced:  # the next checkpoint: nothing of cid's was archived after it
                return found  # type: ignore[no-any-return]
        if read < WINDOW:
            return found  # type: ignore[no-any-return]


@dataclass
class View:
    """Every checkpoint of a stream generation, from one pass over its events."""

    #: ns -> checkpoint id -> seq of the event that put it (last)
    idx: dict[str, dict[str, int]] = field(default_factory=dict)
    #: seq -> the document at it (structurally shared: never mutate)
    docs: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: ns -> checkpoint id -> its pending writes (``{task: {"p", "i"}}``)
    writes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def nsd_at(self, ns: str, cid: str) -> dict[str, Any]:
        """The namespace document at checkpoint ``cid``."""
        return self.docs[self.idx[ns][cid]]["ns"][ns]  # type: ignore[no-any-return]


async def scan(store: StateStore, agent: str, current: dict[str, Any]) -> View:
    """The :class:`View` of ``agent`` (``current``: its document now, for the writes
    still held there)."""
    view = View()
    archived: dict[str, dict[str, dict[str, Any]]] = {}
    doc: dict[str, Any] = (await store.load(agent, at_seq=1)).data
    async for event in store.history(agent, after_seq=1):
        put: set[str] = set()
        for op in event.ops or ():
            path = op["path"]
            if path.startswith("/ns/"):
                tokens = _tokens(path)
                if len(tokens) == 3 and tokens[1] == "w" and op["op"] == "remove":
                    held = doc["ns"][tokens[0]]["w"].get(tokens[2])
                    at = archived.setdefault(tokens[0], {})
                    at[tokens[2]] = merge_tasks(at.get(tokens[2]), held) or {}
                elif (len(tokens) == 1 and op["op"] != "remove") or (
                    len(tokens) > 1 and tokens[1] == "cp"
                ):
                    put.add(tokens[0])
            doc = patch.apply(doc, [op])
        for ns in put:
            nsd = doc["ns"].get(ns)
            if nsd is not None and nsd["cp"] is not None:
                view.idx.setdefault(ns, {})[nsd["cp"]["h"][0]] = event.seq
                view.docs[event.seq] = doc
    for ns, cids in view.idx.items():
        held = current["ns"].get(ns, {}).get("w", {})
        old = archived.get(ns, {})
        view.writes[ns] = {
            cid: tasks for cid in cids if (tasks := merge_tasks(old.get(cid), held.get(cid)))
        }
    return view
