"""Where LangGraph's concepts live in statekeeper.

**One stream per thread.** Every checkpoint namespace of a LangGraph thread lives in one
statekeeper stream (agent id ``{prefix}{quoted thread id}#{generation}``). Its state
document describes the *last checkpoint put* per namespace in full, and nothing of the
older ones, so ``get_tuple`` of the latest checkpoint decodes one small document::

    {
      "lg": 2, "thread": "<thread id>", "sealed": true,
      "pool": {"<hash>": <message or blob cell>},          # each big value once
      "ns": {
        "<checkpoint_ns>": {
          "cp":   {"h": [id, ts, parent id], "v": format, "cv": channel_versions,
                   "vs": versions_seen, "uc": updated_channels, "x": {other keys}},
          "meta": <packed metadata>,
          "vals": {"<channel>": <packed value>},            # values of "cp"
          "top":  "<greatest checkpoint id put>",
          "rec":  {"c": id, "b": seq, "n": {...}, "v": {...}, "k": [...], "sn": {...}},
                                                              # see history.record
          "re":   {"<checkpoint id>": <seq>},                # ids put again (rare)
          "w":    {"<checkpoint id>": {"<task id>": {"p": task_path,
                                                     "i": {"<idx>": [channel, packed]}}}}
        }
      }
    }

Each ``put`` is one ``lg.cp`` event whose JSON Patch changes only what changed in
the values (the channel values in ``new_versions`` — for a list only the appended
items —, the new pool entries and ``top``) and replaces the header ``cp``, ``meta`` and
the record ``rec`` whole (small), so a chat costs storage linear in its length and the
event alone, with the latest document, describes its checkpoint (see
:func:`.history.from_record`). The event carries an idempotency key naming the checkpoint
(:func:`.history.checkpoint_key`): the document *at* its seq is that checkpoint, so an
older checkpoint is one key lookup and ``store.load(at_seq=...)``. Each ``put_writes``
is one ``lg.w`` event adding entries under ``w``; the next checkpoint's event removes
them from the document again (they stay in the stream: see :mod:`.history`).

**Format 1** (written before the history left the document) kept an ``idx`` map of
every checkpoint's seq and every checkpoint's writes in the document; such streams
still load, their ``idx`` frozen, and new checkpoints are added the format 2 way.

**Generations.** Streams are append-only, so removing checkpoints (``prune``,
retention, ``delete_for_runs``) writes the kept ones into a new generation of the
thread's stream, then *fences* the old one with an ``lg.moved`` event appended at the
head it copied (a compare-and-append: a concurrent writer makes it fail), then seals the
new one (``lg.sealed``) and deletes the old one. The live generation is the newest
sealed, not moved one, or the target of a ``moved`` fence.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any
from urllib.parse import quote, unquote

from ... import patch
from ...errors import InvalidArgument
from .faults import ThreadFormatTooNew

__all__ = [
    "FORMAT",
    "agent_id",
    "apply_once",
    "check_format",
    "checkpoint_time",
    "new_doc",
    "new_ns",
    "next_generation",
    "parse_agent",
    "ptr",
    "thread_prefix",
]

FORMAT = 2
BASE_GENERATION = "0"


def check_format(thread_id: str, agent: str, doc: dict[str, Any]) -> None:
    """Raise :class:`ThreadFormatTooNew` when a thread's document is of a newer
    format than :data:`FORMAT` (a newer statekeeper wrote it, during a rolling deploy
    say): read as this format it would be misread, and written on, corrupted."""
    stored = doc.get("lg")
    if type(stored) is int and stored > FORMAT:
        raise ThreadFormatTooNew(thread_id, agent, stored, FORMAT)


# event types written by the saver
EV_THREAD = "lg.thread"
EV_CHECKPOINT = "lg.cp"
EV_WRITES = "lg.w"
EV_BATCH = "lg.batch"  # a put and writes coalesced into one commit
EV_MOVED = "lg.moved"
EV_SEALED = "lg.sealed"
EV_RUN = "lg.run"  # a run claims, renews or releases its thread (fork protection)

_UUID_EPOCH = 0x01B21DD213814000  # 100 ns intervals from 1582-10-15 to 1970-01-01


def thread_prefix(prefix: str, thread_id: str) -> str:
    """The agent-id prefix shared by every generation of a thread's stream.
    :class:`~statekeeper.errors.InvalidArgument` for a thread id that is not valid
    Unicode (a lone surrogate: it has no UTF-8 to quote, and quoting raised a bare
    ``UnicodeEncodeError``)."""
    try:
        return f"{prefix}{quote(thread_id, safe='')}#"
    except UnicodeEncodeError:
        raise InvalidArgument(
            "thread_id", f"thread_id {thread_id!r:.60} is not valid Unicode (a lone surrogate)"
        ) from None


def agent_id(prefix: str, thread_id: str, generation: str = BASE_GENERATION) -> str:
    """The statekeeper agent id of one generation of a thread's stream."""
    return thread_prefix(prefix, thread_id) + generation


def parse_agent(prefix: str, agent: str) -> tuple[str, str] | None:
    """``(thread_id, generation)`` of a saver agent id, or None for any other agent."""
    if not agent.startswith(prefix):
        return None
    quoted, sep, generation = agent[len(prefix) :].rpartition("#")
    if not sep:
        return None
    return unquote(quoted), generation


def generation_order(generation: str) -> tuple[int, str]:
    """Sort key of generation names (``"0"``, ``"1.ab12cd34"``, …)."""
    head, _, tail = generation.partition(".")
    return (int(head) if head.isdigit() else -1, tail)


def next_generation(generation: str) -> str:
    """A fresh, never-reused name for the generation after ``generation``."""
    return f"{generation_order(generation)[0] + 1}.{secrets.token_hex(4)}"


def new_doc(thread_id: str, *, sealed: bool = True) -> dict[str, Any]:
    """The state document of a new thread stream."""
    return {"lg": FORMAT, "thread": thread_id, "sealed": sealed, "pool": {}, "ns": {}}


def new_ns() -> dict[str, Any]:
    """The part of the document for a namespace with no checkpoint yet."""
    return {"cp": None, "meta": None, "vals": {}, "w": {}}


def ptr(*tokens: str) -> str:
    """A JSON Pointer from raw tokens (escaped)."""
    for token in tokens:
        if "~" in token or "/" in token:  # rare: escape them all
            return "/" + "/".join(patch.escape(t) for t in tokens)
    return "/" + "/".join(tokens)


def checkpoint_time(checkpoint_id: str) -> float | None:
    """Seconds since the epoch encoded in a time-based (v1/v6/v7) checkpoint id."""
    try:
        u = uuid.UUID(checkpoint_id)
    except (ValueError, AttributeError, TypeError):
        return None
    if u.version == 6:
        ticks = (u.int >> 80) << 12 | ((u.int >> 64) & 0x0FFF)
        return (ticks - _UUID_EPOCH) / 1e7
    if u.version == 1:
        return (u.time - _UUID_EPOCH) / 1e7
    if u.version == 7:
        return (u.int >> 80) / 1000.0
    return None


def apply_once(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """``patch.apply(doc, ops)`` (copy-on-write: ``doc`` and the ops' values are never
    changed), each container on the ops' paths copied once instead of once per op.

    ``patch.apply`` copies the root and every container on an op's path for every op:
    a checkpoint's ~10 ops under ``/ns/<ns>/`` copied the document's root, ``ns`` and
    the namespace ~10 times each. Here the copies made by earlier ops of the same call
    are remembered in a tree of the paths walked (``[copy, {token: subtree}]``) and
    changed in place; an op drops the subtree at the key it changes (and every subtree
    of a list it changes: its indices may move). Only the saver's own ops take this
    path (``add``, ``replace`` and ``remove`` below the root); anything else — and any
    op that does not fit the document — is left to ``patch.apply`` on the untouched
    ``doc``, which raises the same :class:`~statekeeper.errors.PatchError` as always.
    """
    t = type(doc)
    if t is not dict and t is not list:
        return patch.apply(doc, ops)
    root = dict(doc) if t is dict else list(doc)
    top: list[Any] = [root, {}]
    for op in ops:
        kind = op["op"]
        path = op["path"]
        if (kind != "add" and kind != "replace" and kind != "remove") or path[:1] != "/":
            return patch.apply(doc, ops)
        tokens = path[1:].split("/")
        if "~" in path:
            tokens = [patch.unescape(t) for t in tokens]
        last = tokens.pop()
        tree = top
        node = root
        for tok in tokens:
            sub = tree[1].get(tok)
            if sub is not None:  # copied by an earlier op
                tree = sub
                node = sub[0]
                continue
            if type(node) is dict:
                child = node.get(tok, _ABSENT)
                if child is _ABSENT:
                    return patch.apply(doc, ops)
                at: Any = tok
            elif type(node) is list:
                at = _list_index(node, tok, end=False)
                if at is None:
                    return patch.apply(doc, ops)
                child = node[at]
            else:
                return patch.apply(doc, ops)
            t = type(child)
            if t is dict:
                child = dict(child)
            elif t is list:
                child = list(child)
            else:
                return patch.apply(doc, ops)
            node[at] = child
            sub = [child, {}]
            tree[1][tok] = sub
            tree = sub
            node = child
        if type(node) is dict:
            if kind == "add":
                node[last] = op["value"]
            elif last not in node:
                return patch.apply(doc, ops)
            elif kind == "replace":
                node[last] = op["value"]
            else:
                del node[last]
            tree[1].pop(last, None)
        elif type(node) is list:
            tree[1].clear()  # indices may move: copies are found again
            if kind == "add" and last == "-":
                node.append(op["value"])
                continue
            i = _list_index(node, last, end=kind == "add")
            if i is None:
                return patch.apply(doc, ops)
            if kind == "add":
                node.insert(i, op["value"])
            elif kind == "replace":
                node[i] = op["value"]
            else:
                del node[i]
        else:
            return patch.apply(doc, ops)
    return root


_ABSENT = object()


def _list_index(node: list[Any], token: str, *, end: bool) -> int | None:
    """An array index as ``patch`` accepts it (``end``: the list's length too)."""
    if not (token.isascii() and token.isdigit()) or (len(token) > 1 and token[0] == "0"):
        return None
    i = int(token)
    return i if i < len(node) + (1 if end else 0) else None
