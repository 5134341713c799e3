"""Documents made with their plans: the document a write's plan makes of the thread's
cached one, made where the plan is built with its parts in hand, and noted on the
thread's view (``_Stream.made``, keyed by the plan's op list itself) for the commit of
those very ops to take — instead of applying the ops path by path (``apply_once``) and
parsing their paths again for the namespace's head (``_update_heads``). A plan of any
other shape notes nothing and is applied op by op.
``tests/integrations/test_langgraph_made.py`` holds each to ``patch.apply``."""

from __future__ import annotations

import builtins
from typing import Any

from . import mapping as m
from .stream import Op, _Stream


def _claimed(after: dict[str, Any], claim: builtins.list[Op]) -> bool:
    """Set a run claim riding on a plan (``/run``); False for any other op."""
    for op in claim:
        if op["path"] != "/run" or op["op"] != "add":
            return False
    for op in claim:
        after["run"] = op["value"]
    return True


def _copy(
    doc: dict[str, Any],
    ns: str,
    nsd: dict[str, Any],
    claim: builtins.list[Op],
    new_pool: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A copy of ``doc`` for a plan to change (the root, its namespaces, namespace
    ``ns`` and, with ``new_pool`` added, the pool, each copied once; the run claim set):
    the copy and its namespace ``ns``; None for a claim of another shape."""
    after = dict(doc)
    if not _claimed(after, claim):
        return None
    spaces = after["ns"] = dict(doc["ns"])
    fresh = spaces[ns] = dict(nsd)
    if new_pool:
        pool = after["pool"] = dict(doc["pool"])
        pool.update(new_pool)
    return after, fresh


def checkpoint(
    st: _Stream,
    out: builtins.list[Op],
    ns: str,
    cid: str,
    header: dict[str, Any],
    meta: Any,
    vals: dict[str, Any],
    new_pool: dict[str, Any],
    ops: builtins.list[Op],
    archive: builtins.list[Op],
    claim: builtins.list[Op],
) -> None:
    """Note in ``st.made`` the document the checkpoint plan ``out`` makes of
    ``st.doc``, made here with its parts in hand: what applying ``out`` (and parsing
    its paths again for the namespace's head) would make, one copy of the root, the
    namespaces, the namespace and the pool, no path walked. Only for the plan of a
    new head on an existing namespace (``_ops_checkpoint``'s last two ops are then
    its record and its ``top``), a run claim riding on it (``/run``) and the
    previous checkpoint's writes archived (``archive``); a plan with anything else
    (messages of writes refreshed, an id put again, a namespace's first checkpoint)
    is applied op by op as before. ``tests/integrations/test_langgraph_made.py``
    holds this to ``patch.apply`` of the same ops."""
    nsd = st.doc["ns"].get(ns)
    n = len(ops) - len(archive)  # the checkpoint's own ops end there
    if nsd is None or n < 2:
        return
    top, rec = ops[n - 1], ops[n - 2]
    base = m.ptr("ns", ns)
    if (
        top["path"] != base + "/top"
        or rec["path"] != base + "/rec"
        or top["op"] != "add"
        or rec["op"] != "add"
        or top["value"] != cid
    ):
        return
    copied = _copy(st.doc, ns, nsd, claim, new_pool)
    if copied is None:
        return
    after, fresh = copied
    fresh["cp"] = header
    fresh["meta"] = meta
    fresh["vals"] = vals
    fresh["rec"] = rec["value"]
    fresh["top"] = cid
    if archive:  # (``_archive_ops``: the previous checkpoint's writes, there)
        prev = nsd["cp"]["h"][0]
        fresh["w"] = {c: w for c, w in nsd["w"].items() if c != prev}
    st.made = (out, after, ns, cid)


def writes(
    st: _Stream,
    out: builtins.list[Op],
    ns: str,
    cid: str,
    task_id: str,
    entries: dict[str, Any],
    new_pool: dict[str, Any],
    claim: builtins.list[Op],
) -> None:
    """Note in ``st.made`` the document a task's writes plan ``out`` makes of
    ``st.doc`` (no head moves): for the writes of a checkpoint with none yet, or of a
    task new to it (``_ops_writes``'s one ``add`` of the task); a task's writes added
    to those it has, or a namespace's first, are applied op by op."""
    nsd = st.doc["ns"].get(ns)
    if nsd is None:
        return
    at = nsd["w"].get(cid)
    if at is not None and task_id in at:
        return
    copied = _copy(st.doc, ns, nsd, claim, new_pool)
    if copied is None:
        return
    after, fresh = copied
    w = fresh["w"] = dict(nsd["w"])
    task = out[-1]["value"][task_id] if at is None else out[-1]["value"]
    if at is None:
        w[cid] = {task_id: task}
    else:
        tasks = w[cid] = dict(at)
        tasks[task_id] = task
    st.made = (out, after, None, None)
