"""Comparing LangGraph threads after a migration (:mod:`.migrate`): two savers' ``list``
of a thread must agree on every checkpoint — ids and order, namespaces, parents,
timestamps, channel values and versions (statekeeper's integers in the zero-padded
form LangGraph's own savers use), metadata and pending writes."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
)

from ...errors import IntegrityError

if TYPE_CHECKING:
    pass

__all__ = ["MigrationMismatch", "compare_indexes", "compare_threads", "peer_checkpoint"]


class MigrationMismatch(IntegrityError):
    """After the copy, a thread read through the target saver differs from the source.

    ``thread_id``, ``checkpoint_id`` and ``what`` (the field) say where."""

    def __init__(self, thread_id: str, checkpoint_id: str | None, what: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.what = what
        super().__init__(
            f"langgraph thread {thread_id!r}",
            None,
            "the copy differs from the source"
            + (f" at checkpoint {checkpoint_id}" if checkpoint_id else "")
            + f": {what}",
        )


# -- channel versions -------------------------------------------------------------------


def _peer_version(version: Any) -> Any:
    """An integer channel version (``StatekeeperSaver``'s) in the zero-padded string
    form LangGraph's SQLite and PostgreSQL savers use: their ``get_next_version``
    returns strings, and LangGraph compares a thread's old and new versions."""
    if isinstance(version, int) and not isinstance(version, bool):
        return f"{version:032}.{0:016}"
    return version


def peer_checkpoint(checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` with its channel versions in LangGraph's string form."""
    out = dict(checkpoint)
    out["channel_versions"] = {
        ch: _peer_version(v) for ch, v in checkpoint["channel_versions"].items()
    }
    out["versions_seen"] = {
        node: {ch: _peer_version(v) for ch, v in seen.items()}
        for node, seen in checkpoint["versions_seen"].items()
    }
    return cast(Checkpoint, out)


def _peer_tuple(tup: CheckpointTuple) -> CheckpointTuple:
    return tup._replace(checkpoint=peer_checkpoint(tup.checkpoint))


# -- comparing -------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Equal values; values without a useful ``==`` compare by their serialized form."""
    if a == b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    try:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        serde = JsonPlusSerializer()
        return serde.dumps_typed(a) == serde.dumps_typed(b)
    except Exception:
        return False


def _writes_by_task(tup: CheckpointTuple) -> dict[str, builtins.list[tuple[str, Any]]]:
    tasks: dict[str, builtins.list[tuple[str, Any]]] = {}
    for task_id, channel, value in tup.pending_writes or ():
        tasks.setdefault(str(task_id), []).append((channel, value))
    return tasks


def _parent(tup: CheckpointTuple) -> str | None:
    if tup.parent_config is None:
        return None
    found = tup.parent_config["configurable"].get("checkpoint_id")
    return str(found) if found else None


def _differences(a: CheckpointTuple, b: CheckpointTuple) -> str | None:
    """What differs between two tuples of the same checkpoint (None: nothing)."""
    ca, cb = a.config["configurable"], b.config["configurable"]
    if (ca.get("checkpoint_ns") or "") != (cb.get("checkpoint_ns") or ""):
        return "namespace"
    if _parent(a) != _parent(b):
        return f"parent ({_parent(a)} != {_parent(b)})"
    pa, pb = a.checkpoint, b.checkpoint
    for key in ("id", "ts"):
        if pa.get(key) != pb.get(key):
            return f"checkpoint {key}"
    # versions compared in one form: a thread exported, continued on LangGraph's saver
    # and imported back holds statekeeper's integers in the checkpoints it made and the
    # peer's strings in the others (the same versions; each checkpoint keeps one form)
    peer_a, peer_b = peer_checkpoint(pa), peer_checkpoint(pb)
    if peer_a["channel_versions"] != peer_b["channel_versions"]:
        return "checkpoint channel_versions"
    if peer_a["versions_seen"] != peer_b["versions_seen"]:
        return "checkpoint versions_seen"
    if list(pa.get("updated_channels") or []) != list(pb.get("updated_channels") or []):
        return "checkpoint updated_channels"
    va, vb = pa["channel_values"], pb["channel_values"]
    if va.keys() != vb.keys():
        return f"channels ({sorted(va)} != {sorted(vb)})"
    for ch in va:
        if not _same(va[ch], vb[ch]):
            return f"channel {ch!r}"
    if not _same(dict(a.metadata or {}), dict(b.metadata or {})):
        return "metadata"
    wa, wb = _writes_by_task(a), _writes_by_task(b)
    if wa.keys() != wb.keys():
        return f"pending writes: tasks {sorted(wa)} != {sorted(wb)}"
    for task in wa:
        if [c for c, _ in wa[task]] != [c for c, _ in wb[task]]:
            return f"pending writes of task {task}: channels"
        if not _same([v for _, v in wa[task]], [v for _, v in wb[task]]):
            return f"pending writes of task {task}: values"
    return None


def compare_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_id: str,
    *,
    expect: Callable[[CheckpointTuple], CheckpointTuple] | None = None,
) -> None:
    """Check that ``list`` of a thread through ``target`` equals it through ``source``
    (every namespace, newest first); raise :class:`MigrationMismatch` otherwise.
    ``expect`` turns a source tuple into what the target should hold."""
    config: Any = {"configurable": {"thread_id": thread_id}}
    src: Iterator[CheckpointTuple] = iter(source.list(config))
    dst: Iterator[CheckpointTuple] = iter(target.list(config))
    try:
        _compare(src, dst, thread_id, expect)
    finally:  # a mismatch leaves the savers' cursors open: close them now
        for it in (src, dst):
            close = getattr(it, "close", None)
            if close is not None:
                close()


def _compare(
    src: Iterator[CheckpointTuple],
    dst: Iterator[CheckpointTuple],
    thread_id: str,
    expect: Callable[[CheckpointTuple], CheckpointTuple] | None,
) -> None:
    missing = object()
    while True:
        a = next(src, missing)
        b = next(dst, missing)
        if a is missing and b is missing:
            return
        if a is missing:
            b = cast(CheckpointTuple, b)
            raise MigrationMismatch(thread_id, b.checkpoint["id"], "not in the source")
        if b is missing:
            a = cast(CheckpointTuple, a)
            raise MigrationMismatch(thread_id, a.checkpoint["id"], "missing from the copy")
        a, b = cast(CheckpointTuple, a), cast(CheckpointTuple, b)
        if expect is not None:
            a = expect(a)
        if a.checkpoint["id"] != b.checkpoint["id"]:
            raise MigrationMismatch(
                thread_id, a.checkpoint["id"], f"listed in another order ({b.checkpoint['id']})"
            )
        diff = _differences(a, b)
        if diff is not None:
            raise MigrationMismatch(thread_id, a.checkpoint["id"], diff)


def compare_indexes(
    source: Mapping[tuple[str, str, str], builtins.list[tuple[int, str]]],
    target: Mapping[tuple[str, str, str], builtins.list[tuple[int, str]]],
    thread_id: str,
) -> None:
    """Check that every pending write of the source has its index (and channel) in the
    target (``{(namespace, checkpoint id, task id): [(idx, channel)]}`` of each side,
    which ``list`` does not show); raise :class:`MigrationMismatch` otherwise."""
    for (ns, cid, task_id), stored in sorted(source.items()):
        copied = target.get((ns, cid, task_id), [])
        if copied != stored:
            where = f" (namespace {ns!r})" if ns else ""
            raise MigrationMismatch(
                thread_id,
                cid,
                f"pending writes of task {task_id}{where}: indexes "
                f"{[i for i, _ in stored]} != {[i for i, _ in copied]}",
            )
