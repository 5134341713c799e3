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

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ... import patch
from . import mapping as m

if TYPE_CHECKING:
    from ...records import Event
    from ...store.store import StateStore

__all__ = [
    "View",
    "checkpoint_key",
    "from_record",
    "legacy_checkpoint_key",
    "merge_tasks",
    "older_writes",
    "put_again",
    "record",
    "scan",
    "writes_at",
]

#: events read per round trip while looking for the end of a checkpoint's writes
WINDOW = 8
#: events after an older checkpoint's own read with it: a chat turn's checkpoints are
#: followed by the next one within 3 events (its writes; or, for a turn's last, the
#: run's release and the next run's claim), and a shorter first read than the window
#: would cost a second read (measured: 11 events decoded instead of 4 with 2)
FIRST_WINDOW = 3
#: a channel whose packed value has at most this many JSON bytes is copied into each
#: checkpoint's record (``None``, a branch marker, a ``{"$p": key}`` reference); a
#: bigger one is named only, and read from the latest document while it is unchanged
INLINE_MAX = 256


def checkpoint_key(ns: str, cid: str) -> str:
    """The idempotency key of the event that put checkpoint ``cid`` of namespace ``ns``
    (a digest: namespaces and ids may hold characters keys may not).

    ``"k"`` + 96 bits in base64url (17 characters): the key index holds one row per
    checkpoint, and the 38-character keys written before (:func:`legacy_checkpoint_key`,
    still looked up) made it 9-13 % of a small graph's file. Two checkpoints of one
    thread with the same key would make the second put look like a retry of the
    first: at 96 bits that takes ~2**48 checkpoints in one thread."""
    raw = f"{ns}\x00{cid}".encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(raw, digest_size=12).digest()
    return "k" + base64.urlsafe_b64encode(digest).decode("ascii")


def legacy_checkpoint_key(ns: str, cid: str) -> str:
    """The key of checkpoint ``cid`` as the saver wrote it before :func:`checkpoint_key`
    (a thread's checkpoints put then are found by it)."""
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


def record(
    prev: dict[str, Any] | None,
    prev_cid: str | None,
    old_vals: dict[str, Any],
    vals: dict[str, Any],
    appended: Iterable[str],
    seq: int,
    cid: str,
) -> dict[str, Any]:
    """The record of checkpoint ``cid`` put at ``seq`` with channel values ``vals``
    (packed), after the namespace's checkpoint ``prev_cid`` whose values were
    ``old_vals`` and whose record was ``prev``; ``appended``: the list channels the
    put only appended to.

    ``{"c": cid, "b": base, "n": {list channel: length}, "v": {small channel: value},
    "k": [big channels], "sn": {channel: seq}}``: records from ``base`` on were all
    written in an unbroken chain (each put found the record of the one before it; a
    writer that keeps none breaks it), and ``sn`` holds, per channel an older record
    may read from the latest document (a list, a big value), the seq of the last change
    to it that was not an append.
    """
    chain = prev is not None and prev_cid is not None and prev.get("c") == prev_cid
    if chain:
        assert prev is not None
        base: int = prev["b"]
        since: dict[str, int] = dict(prev.get("sn") or {})
        prev_small: dict[str, Any] = prev.get("v") or {}
        prev_big = set(prev.get("k") or ())
    else:
        base, since, prev_small, prev_big = seq, {}, {}, set()
    grown = set(appended)
    for ch, old in old_vals.items():
        if vals.get(ch, _ABSENT) is old or ch in grown or ch in prev_small:
            continue  # unchanged, appended to, or copied into every record that has it
        since[ch] = seq
    lengths: dict[str, int] = {}
    small: dict[str, Any] = {}
    big: list[str] = []
    for ch, cell in vals.items():
        if type(cell) is list:
            lengths[ch] = len(cell)
        elif chain and cell is old_vals.get(ch, _ABSENT) and (ch in prev_small or ch in prev_big):
            if ch in prev_small:
                small[ch] = prev_small[ch]  # a copy made earlier: never patched in place
            else:
                big.append(ch)
        else:
            blob = orjson.dumps(cell)
            if len(blob) <= INLINE_MAX:
                small[ch] = orjson.loads(blob)  # a copy: vals are patched in place
            else:
                big.append(ch)
    rec: dict[str, Any] = {"c": cid, "b": base}
    if lengths:
        rec["n"] = lengths
    if small:
        rec["v"] = small
    if big:
        rec["k"] = big
    if since:
        rec["sn"] = since
    return rec


_ABSENT = object()


def from_record(
    ops: Iterable[dict[str, Any]], ns: str, cid: str, seq: int, now: dict[str, Any]
) -> dict[str, Any] | None:
    """Namespace ``ns``'s document at checkpoint ``cid`` from ``ops`` (those of its
    event, at ``seq``) and ``now`` (the namespace's latest document), without its
    writes; None when that event carries no record or the latest document cannot
    supply what the record refers to (then ``store.load(at_seq=seq)`` can)."""
    base = m.ptr("ns", ns)
    cp = meta = rec = None
    has_meta = False
    for op in ops:
        path = op["path"]
        if path == base:
            if op["op"] == "remove":
                return None
            value = op["value"]
            cp, rec = value.get("cp"), value.get("rec")
            meta, has_meta = value.get("meta"), "meta" in value
        elif path == base + "/cp":
            cp = op.get("value")
        elif path == base + "/meta":
            meta, has_meta = op.get("value"), op["op"] != "remove"
        elif path == base + "/rec":
            rec = op.get("value")
    if cp is None or rec is None or not has_meta or cp["h"][0] != cid or rec.get("c") != cid:
        return None
    if rec.get("w"):  # it had writes before its put: they are in the document at seq only
        return None
    latest = now.get("rec")
    if (
        latest is None
        or now["cp"] is None
        or latest.get("c") != now["cp"]["h"][0]
        or seq < latest["b"]
    ):
        return None  # a put since kept no record: the chain is broken
    since: dict[str, int] = latest.get("sn") or {}
    current: dict[str, Any] = now["vals"]
    vals: dict[str, Any] = {}
    for ch, length in (rec.get("n") or {}).items():
        cell = current.get(ch)
        if since.get(ch, 0) > seq or type(cell) is not list or len(cell) < length:
            return None
        vals[ch] = cell[:length]
    for ch in rec.get("k") or ():
        if since.get(ch, 0) > seq or ch not in current:
            return None
        vals[ch] = current[ch]
    vals.update(rec.get("v") or {})
    ordered = {ch: vals.pop(ch) for ch in cp["cv"] if ch in vals}
    ordered.update(vals)
    return {"cp": cp, "meta": meta, "vals": ordered, "w": {}}


def _tokens(path: str) -> list[str]:
    return [patch.unescape(t) for t in path[4:].split("/")]


async def older_writes(
    store: StateStore,
    agent: str,
    ns: str,
    cid: str,
    seq: int,
    at: dict[str, Any],
    read: list[Event] | None = None,
    read_window: int = WINDOW,
) -> dict[str, Any] | None:
    """The writes of checkpoint ``cid`` archived after it was replaced: those made from
    its event at ``seq`` (``at``: its namespace document there) to the next checkpoint
    of ``ns`` (the event that removed them from the document), included. ``read``: the
    events ``seq + 1 .. seq + read_window`` already read (all there are)."""
    base = m.ptr("ns", ns)
    wbase = m.ptr("ns", ns, "w", cid)
    found: Any = at["w"].get(cid)
    pos = seq
    events: Any = read
    window = read_window if read is not None else WINDOW
    while True:
        count = 0
        if events is None:
            events = [e async for e in store.history(agent, after_seq=pos, to_seq=pos + WINDOW)]
        for event in events:
            count += 1
            pos = event.seq
            done, found = _window_step(event.ops or (), base, wbase, found)
            if done:
                return found  # type: ignore[no-any-return]
        if count < window:  # the end of the stream
            return found  # type: ignore[no-any-return]
        events, window = None, WINDOW


def writes_at(ops: Iterable[dict[str, Any]], ns: str, cid: str) -> dict[str, Any]:
    """The writes of checkpoint ``cid`` after its own event (``ops``), as the document
    at its seq holds them (``{"w": {cid: ...}}`` or empty), for a checkpoint put once
    with no writes before its put (see :func:`from_record`)."""
    found = _window_step(ops, m.ptr("ns", ns), m.ptr("ns", ns, "w", cid), None)[1]
    return {cid: found} if found is not None else {}


def _window_step(
    ops: Iterable[dict[str, Any]], base: str, wbase: str, found: Any
) -> tuple[bool, Any]:
    """One event of a checkpoint's writes window: (whether the window ends with it,
    the writes so far)."""
    replaced = False
    for op in ops:
        path = op["path"]
        if path == wbase:
            if op["op"] == "remove":  # archived here: what follows is in the document
                return True, found
            found = op.get("value")
        elif path.startswith(wbase + "/"):
            rel = dict(op, path=path[len(wbase) :])
            found = patch.apply(found if found is not None else {}, [rel])
        elif path == base + "/cp" or path.startswith(base + "/cp/"):
            replaced = True
    # the next checkpoint: nothing of the checkpoint's was archived after it
    return replaced, found


@dataclass
class View:
    """Every checkpoint of a stream generation, from one pass over its events."""

    #: ns -> checkpoint id -> seq of the event that put it (last)
    idx: dict[str, dict[str, int]] = field(default_factory=dict)
    #: seq -> the document at it (structurally shared: never mutate)
    docs: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: ns -> checkpoint id -> its pending writes (``{task: {"p", "i"}}``)
    writes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: the document after the last event read (the stream's current one)
    doc: dict[str, Any] = field(default_factory=dict)

    def nsd_at(self, ns: str, cid: str) -> dict[str, Any]:
        """The namespace document at checkpoint ``cid``."""
        return self.docs[self.idx[ns][cid]]["ns"][ns]  # type: ignore[no-any-return]


async def scan(store: StateStore, agent: str, current: dict[str, Any] | None = None) -> View:
    """The :class:`View` of ``agent`` (``current``: its document now, for the writes
    still held there; None: the document the scan ends with, ``View.doc``, is it —
    ``list`` reads a thread once, not once to fold its document and again to scan it)."""
    view = View()
    archived: dict[str, dict[str, dict[str, Any]]] = {}
    doc: dict[str, Any] | None = None
    async for event in store.history(agent):
        if doc is None:
            ops = event.ops or ()
            if (
                event.seq == 1
                and len(ops) == 1
                and ops[0]["op"] == "replace"
                and not ops[0]["path"]
            ):
                # the document the thread was created with, whole (a read of it at seq
                # 1 cost a second read of the stream and a fold)
                doc = ops[0]["value"]
                continue
            doc = (await store.load(agent, at_seq=1)).data
            if event.seq == 1:
                continue
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
    if doc is None:  # no event read: a stream not there raises AgentNotFound
        doc = (await store.load(agent, at_seq=1)).data
    view.doc = doc
    if current is None:
        current = doc
    for ns, cids in view.idx.items():
        held = current["ns"].get(ns, {}).get("w", {})
        old = archived.get(ns, {})
        view.writes[ns] = {
            cid: tasks for cid in cids if (tasks := merge_tasks(old.get(cid), held.get(cid)))
        }
    return view
