"""Moving LangGraph threads between LangGraph's own savers and statekeeper.

:func:`import_threads` copies every thread — every checkpoint of every namespace
(subgraphs included), its metadata and its pending writes, ids, timestamps, parents
and channel versions kept — from a ``SqliteSaver`` / ``PostgresSaver`` database into a
statekeeper store through :class:`~.saver.StatekeeperSaver`; :func:`export_threads`
goes the other way. Both:

* read the source through its saver's public API (see :mod:`.peers` for the little
  read with SQL), opened read-only: nothing in the source is ever modified;
* are **resumable**: a checkpoint is written after its pending writes, so a checkpoint
  present in the target is complete and is skipped by the next run (writes are
  idempotent per task and index on every saver); a target thread holding a checkpoint
  the source does not have is refused before anything is written
  (:class:`~.peers.IncompatibleTarget`);
* **verify** the result: for every thread, ``list`` through the target saver equals
  ``list`` through the source saver — checkpoint ids and order, namespaces, parents,
  timestamps, channel values and versions, versions seen, metadata and pending writes
  (per task, in order), and each pending write's index (read from both databases:
  ``list`` does not show it; it is kept as the source has it) — else
  :class:`MigrationMismatch`.

``dry_run`` counts what would be copied and writes nothing.

The two sides (a LangGraph database, a statekeeper store) are :mod:`.migrate_sides`;
the verification is :mod:`.migrate_compare`; this module plans and copies.
"""

from __future__ import annotations

import builtins
import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    CheckpointTuple,
)

from ..._files import staged_new_file
from ...errors import BackendError, ConfigurationError
from .faults import ThreadNotFound
from .migrate_compare import (
    MigrationMismatch,
    _parent,
    _peer_tuple,
    _writes_by_task,
    compare_indexes,
    compare_threads,
)
from .migrate_sides import _NEW, Indexes, _Empty, _open_statekeeper, _PeerSide, _Side
from .peers import IncompatibleTarget, NotALangGraphDatabase, _sqlite_path, open_peer

if TYPE_CHECKING:
    from ...codec.keys import Keyring

__all__ = [
    "IncompatibleTarget",
    "MigrationMismatch",
    "MigrationReport",
    "NotALangGraphDatabase",
    "compare_threads",
    "export_threads",
    "import_threads",
]

Progress = Callable[[int], None]


@dataclass
class MigrationReport:
    """What an import or export found, copied and verified."""

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    #: checkpoints (and writes) written by this run
    checkpoints_copied: int = 0
    writes_copied: int = 0
    #: checkpoints already in the target (an earlier, interrupted run copied them)
    checkpoints_present: int = 0
    threads_verified: int = 0
    dry_run: bool = False
    namespaces: int = 0
    thread_ids: builtins.list[str] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "threads": self.threads,
            "namespaces": self.namespaces,
            "checkpoints": self.checkpoints,
            "writes": self.writes,
            "checkpoints_copied": self.checkpoints_copied,
            "writes_copied": self.writes_copied,
            "checkpoints_present": self.checkpoints_present,
            "threads_verified": self.threads_verified,
        }


# -- copying ---------------------------------------------------------------------------


def _indexed(
    writes: builtins.list[tuple[str, Any]], stored: builtins.list[tuple[int, str]]
) -> builtins.list[tuple[int, str, Any]]:
    """A task's pending writes (as listed: by index) with the index each has in the
    source (``stored``: ``(idx, channel)`` by index); a write the listing has and the
    index read does not (written between the two reads) gets LangGraph's own numbering."""
    by_channel: dict[str, builtins.list[int]] = {}
    for idx, ch in stored:
        by_channel.setdefault(ch, []).append(idx)
    out = []
    for i, (ch, v) in enumerate(writes):
        found = by_channel.get(ch)
        out.append((found.pop(0) if found else WRITES_IDX_MAP.get(ch, i), ch, v))
    return out


def _put_writes(
    target: _Side,
    config: Any,
    tup: CheckpointTuple,
    paths: dict[tuple[str, str, str], str],
    indexes: Indexes,
    ns: str,
    cid: str,
) -> int:
    """Write a checkpoint's pending writes, task by task, each at the index it has in
    the source (regular writes are insert-or-ignore per task and index): a task's
    regular writes in one call, each special write (error, interrupt, resume,
    scheduled) in its own (a special write replaces)."""
    n = 0
    for task_id, writes in _writes_by_task(tup).items():
        path = paths.get((ns, cid, task_id), "")
        items = _indexed(writes, indexes.get((ns, cid, task_id), []))
        regular = [item for item in items if item[1] not in WRITES_IDX_MAP]
        if regular:
            target.put_writes_at(config, regular, task_id, path)
        for item in items:
            if item[1] in WRITES_IDX_MAP:
                target.put_writes_at(config, [item], task_id, path)
        n += len(writes)
    return n


def _copy_thread(
    source: _Side,
    target: _Side,
    thread_id: str,
    present: set[tuple[str, str]],
    tick: Progress,
    convert: Callable[[CheckpointTuple], CheckpointTuple] | None,
) -> tuple[int, int]:
    """Copy a thread's missing checkpoints (each after its pending writes), in the order
    the source reads them best. Returns (checkpoints, writes)."""
    paths = source.task_paths(thread_id)
    indexes = source.write_indexes(thread_id)
    written: set[tuple[str, str, Any]] = set()  # (ns, channel, version) stored by this run
    copied = writes = 0
    src_counts = source.write_counts(thread_id)
    dst_counts = target.write_counts(thread_id) if present else {}
    index = source.index(thread_id)
    # complete when copied; the source may have stored writes on one since
    topped = [
        key for key in index if key in present and src_counts.get(key, 0) != dst_counts.get(key, 0)
    ]
    for found in source.tuples(thread_id, topped):
        cid, ns = found.checkpoint["id"], found.config["configurable"]["checkpoint_ns"]
        conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
        writes += _put_writes(target, {"configurable": conf}, found, paths, indexes, ns, cid)
    tick(sum(1 for key in index if key in present))
    for tup in source.tuples(thread_id, [key for key in index if key not in present]):
        cid, ns = tup.checkpoint["id"], tup.config["configurable"]["checkpoint_ns"]
        conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
        if convert is not None:
            tup = convert(tup)
        checkpoint = tup.checkpoint
        writes += _put_writes(target, {"configurable": conf}, tup, paths, indexes, ns, cid)
        parent = _parent(tup)
        put_conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
        if parent is not None:
            put_conf["checkpoint_id"] = parent
        # a channel's value is sent when this run has not stored that version yet
        versions = checkpoint["channel_versions"]
        new_versions = {ch: v for ch, v in versions.items() if (ns, ch, str(v)) not in written}
        target.saver.put({"configurable": put_conf}, checkpoint, tup.metadata, new_versions)
        written.update((ns, ch, str(v)) for ch, v in versions.items())
        copied += 1
        tick(1)
    return copied, writes


def _plan(
    source: _Side, target: _Side, thread_ids: Iterable[str] | None
) -> tuple[MigrationReport, dict[str, set[tuple[str, str]]]]:
    """Count the source and check the target before anything is written."""
    report = MigrationReport()
    present: dict[str, set[tuple[str, str]]] = {}
    threads = source.threads() if thread_ids is None else [str(t) for t in thread_ids]
    namespaces = 0
    for thread_id in threads:
        index = source.index(thread_id)
        if not index:
            if thread_ids is not None:  # a mistyped id is named, not "copied 0 …"
                raise ThreadNotFound(thread_id, source=True)
            continue
        report.thread_ids.append(thread_id)
        report.checkpoints += len(index)
        counts = source.write_counts(thread_id)
        report.writes += sum(counts.get(key, 0) for key in index)
        namespaces += len({ns for _, ns in index})
        have = set(target.index(thread_id))
        extra = have - set(index)
        if extra:
            cid, ns = min(extra)
            raise IncompatibleTarget(
                target.location,
                f"its thread {thread_id!r} has checkpoint {cid}"
                + (f" (namespace {ns!r})" if ns else "")
                + " that the source does not have: it is not a copy of this source; "
                "choose an empty target",
            )
        present[thread_id] = have
        report.checkpoints_present += len(have)
    report.threads = len(report.thread_ids)
    report.namespaces = namespaces
    return report, present


def _run(
    source: _Side,
    target: _Side,
    *,
    thread_ids: Iterable[str] | None,
    dry_run: bool,
    verify: bool,
    progress: Callable[[int], Progress] | None,
    convert: Callable[[CheckpointTuple], CheckpointTuple] | None = None,
) -> MigrationReport:
    report, present = _plan(source, target, thread_ids)
    report.dry_run = dry_run
    if dry_run:
        return report
    tick = progress(report.checkpoints) if progress is not None else (lambda n: None)
    for thread_id in report.thread_ids:
        copied, writes = _copy_thread(source, target, thread_id, present[thread_id], tick, convert)
        report.checkpoints_copied += copied
        report.writes_copied += writes
    checker = target.settled()
    if verify:
        for thread_id in report.thread_ids:
            compare_threads(source.saver, checker, thread_id, expect=convert)
            compare_indexes(
                source.write_indexes(thread_id), target.write_indexes(thread_id), thread_id
            )
            report.threads_verified += 1
            tick(0)  # a point where the caller may stop the run (the CLI's Ctrl-C)
    return report


@contextlib.contextmanager
def _database_errors(*urls: str) -> Iterator[None]:
    """A SQLite or PostgreSQL driver error of LangGraph's savers as a
    :class:`~statekeeper.errors.BackendError` (one line, passwords masked). The copy is
    resumable: run it again."""
    import sqlite3

    from ...backends.redact import scrub

    kinds: tuple[type[BaseException], ...] = (sqlite3.Error,)
    try:
        import psycopg

        kinds = (sqlite3.Error, psycopg.Error)
    except ImportError:  # pragma: no cover - without the postgres extra
        pass
    try:
        yield
    except kinds as exc:
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        for url in urls:
            message = scrub(message, url)
        raise BackendError(
            f"LangGraph saver database error: {message} (the copy is resumable: run it again)",
            maybe_applied=True,
        ) from None


def _same_place(source: str, target: str) -> None:
    """Refuse a copy onto its source, and either URL with a password holding an
    unencoded ``/ ? # [ ]`` (the store's rule for both sides: libpq read
    ``postgresql://u:p#w@db/x`` whole where every statekeeper command refuses it)."""
    from ...backends.url import refuse_reserved_in_password

    for url in (source, target):
        refuse_reserved_in_password(url)
    if source == target:
        raise ConfigurationError("the source and the target are the same database")


def import_threads(
    source_url: str,
    target_url: str,
    *,
    keyring: Keyring | None = None,
    thread_ids: Iterable[str] | None = None,
    dry_run: bool = False,
    verify: bool = True,
    progress: Callable[[int], Progress] | None = None,
    store_options: Mapping[str, Any] | None = None,
) -> MigrationReport:
    """Copy LangGraph threads from a ``SqliteSaver`` / ``PostgresSaver`` database into
    the statekeeper store at ``target_url`` (which must exist: ``statekeeper init``).

    ``keyring``: the target's keys (an encrypted store). ``thread_ids``: only these.
    ``progress(total)`` returns a callback advanced once per checkpoint.
    ``store_options``: more :class:`~statekeeper.StateStore` options for the store the
    copy writes through (``principal``, ``policy``, ``audit``: the copy's writes are
    checked and audited as that principal's)."""
    _same_place(source_url, target_url)
    extra = dict(store_options or {})
    return _copy(
        (source_url, lambda: _PeerSide(open_peer(source_url, readonly=True))),
        (
            target_url,
            lambda: _open_statekeeper(target_url, keyring, readonly=dry_run, extra=extra),
        ),
        thread_ids=thread_ids,
        dry_run=dry_run,
        verify=verify,
        progress=progress,
    )


def export_threads(
    source_url: str,
    target_url: str,
    *,
    keyring: Keyring | None = None,
    thread_ids: Iterable[str] | None = None,
    dry_run: bool = False,
    verify: bool = True,
    progress: Callable[[int], Progress] | None = None,
) -> MigrationReport:
    """Copy the LangGraph threads of the statekeeper store at ``source_url`` into a
    ``SqliteSaver`` / ``PostgresSaver`` database at ``target_url`` (created and set up
    by the saver when missing or empty). ``keyring``: the source's keys."""
    _same_place(source_url, target_url)
    from .peers import is_langgraph_url

    if not is_langgraph_url(target_url):
        raise IncompatibleTarget(
            target_url.split("://", 1)[0] + "://…",
            "LangGraph's savers keep threads in SQLite (a path or sqlite:///file.db) or "
            "PostgreSQL (postgresql://…)",
        )
    private = keyring is not None  # decrypted records: a new SQLite file is its owner's only

    def copy(into: str) -> MigrationReport:
        return _copy(
            (source_url, lambda: _open_statekeeper(source_url, keyring, readonly=True)),
            (target_url, lambda: _peer_target(into, dry_run, private=private, shown=target_url)),
            thread_ids=thread_ids,
            dry_run=dry_run,
            verify=verify,
            progress=progress,
            convert=_peer_tuple,
        )

    new_file = _new_sqlite_file(target_url, dry_run)
    if new_file is None:  # PostgreSQL, a dry run, or a database there (resumed in place)
        return copy(target_url)
    # built beside it and put there once copied and verified: a failed export leaves no
    # partial (or unverified) file that looks like a good one
    with staged_new_file(new_file, 0o600 if private else 0o666) as staged:
        return copy(str(staged))


def _new_sqlite_file(url: str, dry_run: bool) -> Path | None:
    """The SQLite file an export would create (None: none, or it exists)."""
    if dry_run or url.split("://", 1)[0].lower() in ("postgresql", "postgres"):
        return None
    path = _sqlite_path(url)
    if os.path.lexists(path) or not path.parent.is_dir():  # (open_peer says why not)
        return None
    return path


def _peer_target(url: str, dry_run: bool, *, private: bool = False, shown: str = "") -> _Side:
    """The LangGraph database an export writes into; for a dry run, read-only, and a
    database that does not exist yet counts as empty (everything would be copied).
    ``private``: a SQLite file created is its owner's only (0600). ``shown``: the
    target as the caller named it (``url`` is then the temporary file it is built in)."""
    if not dry_run:
        staged = bool(shown) and shown != url  # (the empty file made for it: not refused)
        side = _PeerSide(open_peer(url, readonly=False, private=private, staged=staged))
        if staged:
            side.location = side.db.location = str(_sqlite_path(shown))
        return side
    try:
        return _PeerSide(open_peer(url, readonly=True))
    except NotALangGraphDatabase as exc:
        if not exc.reason.startswith(_NEW):
            raise IncompatibleTarget(exc.location, exc.reason) from None
        return _Empty(url)


def _copy(
    source: tuple[str, Callable[[], _Side]],
    target: tuple[str, Callable[[], _Side]],
    *,
    thread_ids: Iterable[str] | None,
    dry_run: bool,
    verify: bool,
    progress: Callable[[int], Progress] | None,
    convert: Callable[[CheckpointTuple], CheckpointTuple] | None = None,
) -> MigrationReport:
    """Open both sides (``(url, opener)``), run the copy, close them (target first),
    with the savers' database errors told as :class:`~statekeeper.errors.BackendError`."""
    named = None if thread_ids is None else [str(t) for t in thread_ids]
    with _database_errors(source[0], target[0]), contextlib.ExitStack() as sides:
        source_side = source[1]()
        sides.callback(source_side.close)
        # a mistyped --thread fails before the target is opened: an export's new
        # SQLite file or PostgreSQL tables are not left behind, set up and empty
        for thread_id in named or ():
            if not source_side.index(thread_id):
                raise ThreadNotFound(thread_id, source=True)
        target_side = target[1]()
        sides.callback(target_side.close)
        return _run(
            source_side,
            target_side,
            thread_ids=named,
            dry_run=dry_run,
            verify=verify,
            progress=progress,
            convert=convert,
        )
