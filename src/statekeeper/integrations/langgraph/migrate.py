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
  (per task, in order) — else :class:`MigrationMismatch`.

``dry_run`` counts what would be copied and writes nothing.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
)

from ...errors import BackendError, ConfigurationError, IntegrityError
from .peers import IncompatibleTarget, NotALangGraphDatabase, PeerDatabase, open_peer

if TYPE_CHECKING:
    from ...codec.keys import Keyring
    from .saver import StatekeeperSaver

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
#: checkpoints read per ``list`` call from a statekeeper source
_PAGE = 64


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


# -- the two kinds of sides ------------------------------------------------------------


class _Side:
    """What the copy needs of a saver's database."""

    saver: BaseCheckpointSaver[Any]
    location: str

    def threads(self) -> builtins.list[str]:
        raise NotImplementedError

    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        raise NotImplementedError

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        """``{(checkpoint id, namespace): number of pending writes}``."""
        raise NotImplementedError

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def settled(self) -> BaseCheckpointSaver[Any]:
        """Make every write durable; the saver to verify the copy with."""
        return self.saver

    def tuples(
        self, thread_id: str, wanted: builtins.list[tuple[str, str]]
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints ``wanted`` (``(id, namespace)``, oldest first), read one by one
        with ``get_tuple``."""
        for cid, ns in wanted:
            conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            found = self.saver.get_tuple({"configurable": conf})
            if found is not None:  # else deleted from the source meanwhile
                yield found


class _PeerSide(_Side):
    def __init__(self, db: PeerDatabase) -> None:
        self.db = db
        self.saver = db.saver
        self.location = db.location

    def threads(self) -> builtins.list[str]:
        return self.db.threads()

    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        return self.db.index(thread_id)

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        return self.db.write_counts(thread_id)

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        return self.db.task_paths(thread_id)

    def close(self) -> None:
        self.db.close()


class _StatekeeperSide(_Side):
    """A statekeeper store through :class:`StatekeeperSaver`; the thread index and task
    paths come from the thread's document (see :mod:`.mapping`)."""

    def __init__(
        self,
        saver: StatekeeperSaver,
        location: str,
        reopen: Callable[[], StatekeeperSaver] | None = None,
    ) -> None:
        self.saver = saver
        self.sk = saver
        self.location = location
        self.reopen = reopen

    def settled(self) -> BaseCheckpointSaver[Any]:
        """Flush the store (the copy writes behind), close it, and verify through a new
        saver on a new store: what is compared is read back from the backend."""
        if self.reopen is None:
            return self.saver
        self.sk._portal.call(self.sk.store.flush())
        self.sk.close()
        self.sk = self.reopen()
        self.saver = self.sk
        return self.saver

    def _doc(self, thread_id: str) -> dict[str, Any] | None:
        st = self.sk._portal.call(self.sk._open(thread_id, create=False))
        return None if st is None else st.doc

    def tuples(
        self, thread_id: str, wanted: builtins.list[tuple[str, str]]
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints ``wanted``, newest first, by ``list`` in pages (one pass over
        the thread's stream per page, where ``get_tuple`` of an older checkpoint
        replays the stream from a snapshot each time)."""
        todo = set(wanted)
        config: Any = {"configurable": {"thread_id": thread_id}}
        before: Any = None
        while todo:
            page = builtins.list(self.saver.list(config, before=before, limit=_PAGE))
            for tup in page:
                key = (tup.checkpoint["id"], tup.config["configurable"]["checkpoint_ns"])
                if key in todo:
                    todo.discard(key)
                    yield tup
            if len(page) < _PAGE:
                return
            before = page[-1].config

    def threads(self) -> builtins.list[str]:
        async def collect() -> builtins.list[str]:
            return [t async for t in self.sk._thread_ids()]

        return sorted(self.sk._portal.call(collect()))

    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        doc = self._doc(thread_id)
        if doc is None:
            return []
        return sorted((cid, ns) for ns, nsd in doc["ns"].items() for cid in nsd["idx"])

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        doc = self._doc(thread_id)
        if doc is None:
            return {}
        return {
            (cid, ns): sum(len(task["i"]) for task in tasks.values())
            for ns, nsd in doc["ns"].items()
            for cid, tasks in nsd["w"].items()
        }

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        doc = self._doc(thread_id)
        if doc is None:
            return {}
        return {
            (ns, cid, task_id): str(task.get("p") or "")
            for ns, nsd in doc["ns"].items()
            for cid, tasks in nsd["w"].items()
            for task_id, task in tasks.items()
        }

    def close(self) -> None:
        self.sk.close()


def _open_statekeeper(
    url: str, keyring: Keyring | None, *, readonly: bool, serde: Any = None
) -> _StatekeeperSide:
    from ...backends.redact import mask_url
    from ...backends.url import open_backend
    from ...errors import NotAStore
    from .saver import StatekeeperSaver

    async def check() -> None:
        backend = open_backend(url, readonly=True)
        try:
            await backend.ensure_store()
            if not readonly:
                await _check_keys(backend, url, keyring)
        finally:
            await backend.close()

    try:
        _run_sync(check())
    except NotAStore as exc:
        if readonly:
            raise
        raise IncompatibleTarget(
            mask_url(url),
            f"it is not a statekeeper store ({exc.reason}); create one with `statekeeper init URL`",
        ) from None
    options: dict[str, Any] = {"keyring": keyring, "fork_protection": False}
    if serde is not None:
        options["serde"] = serde

    def reading() -> StatekeeperSaver:
        # read through a read-only backend: nothing can be written
        return StatekeeperSaver.from_url(cast(Any, open_backend(url, readonly=True)), **options)

    if readonly:
        return _StatekeeperSide(reading(), mask_url(url))
    # The copy writes behind (batched commits): a thread is one stream whose appends
    # land in order, so whatever a crash keeps is a prefix — every checkpoint present
    # still has its writes, and the next run resumes after it. The store is flushed
    # before the copy is verified, through a new saver reading the backend.
    writer = StatekeeperSaver.from_url(url, durability="async", **options)
    return _StatekeeperSide(writer, mask_url(url), reading)


async def _check_keys(backend: Any, url: str, keyring: Keyring | None) -> None:
    """Refuse to write into an encrypted store without its keys, or encrypted records
    into a store kept in the clear: either would leave a store its readers cannot read
    (judged from the clear header of the first record; nothing is decrypted)."""
    from ...backends.redact import mask_url
    from ...codec.pipeline import Codec

    for info in await backend.list_agents(None, limit=1):
        for raw in await backend.read(info.agent_id, 0, None, limit=1):
            header = Codec.header(raw.payload)
            key_id = header.key_id if header is not None else None
            if key_id is not None and keyring is None:
                raise IncompatibleTarget(
                    mask_url(url),
                    f"it is encrypted (records under key {key_id!r}): give its keys "
                    "(--key-file, $STATEKEEPER_KEY_FILE or $STATEKEEPER_KEYS)",
                )
            if key_id is None and keyring is not None:
                raise IncompatibleTarget(
                    mask_url(url),
                    "it is not encrypted: copying encrypted threads into it would leave "
                    "records its readers cannot read; drop the keys, or encrypt the store "
                    "first (`statekeeper rekey`)",
                )
            if keyring is not None:  # the keys must open what is there (a wrong key fails)
                from ...store import StateStore

                await StateStore(backend, keyring=keyring).load(info.agent_id)


def _run_sync(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine to completion from sync code, also when this thread already
    runs an event loop (then on a thread of its own)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, coro).result()


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
    for key in ("id", "ts", "channel_versions", "versions_seen"):
        if pa.get(key) != pb.get(key):
            return f"checkpoint {key}"
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


# -- copying ---------------------------------------------------------------------------


def _put_writes(
    target: BaseCheckpointSaver[Any],
    config: Any,
    tup: CheckpointTuple,
    paths: dict[tuple[str, str, str], str],
    ns: str,
    cid: str,
) -> int:
    """Write a checkpoint's pending writes, task by task, keeping their order: a task's
    regular writes in one call (indexes 0, 1, … as LangGraph gives them), each special
    write (error, interrupt, resume, scheduled) in its own (its fixed index)."""
    n = 0
    for task_id, writes in _writes_by_task(tup).items():
        path = paths.get((ns, cid, task_id), "")
        regular = [(ch, v) for ch, v in writes if ch not in WRITES_IDX_MAP]
        if regular:
            target.put_writes(config, regular, task_id, path)
        for ch, v in writes:
            if ch in WRITES_IDX_MAP:
                target.put_writes(config, [(ch, v)], task_id, path)
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
        writes += _put_writes(target.saver, {"configurable": conf}, found, paths, ns, cid)
    tick(sum(1 for key in index if key in present))
    for tup in source.tuples(thread_id, [key for key in index if key not in present]):
        cid, ns = tup.checkpoint["id"], tup.config["configurable"]["checkpoint_ns"]
        conf = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
        if convert is not None:
            tup = convert(tup)
        checkpoint = tup.checkpoint
        writes += _put_writes(target.saver, {"configurable": conf}, tup, paths, ns, cid)
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
            report.threads_verified += 1
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
) -> MigrationReport:
    """Copy LangGraph threads from a ``SqliteSaver`` / ``PostgresSaver`` database into
    the statekeeper store at ``target_url`` (which must exist: ``statekeeper init``).

    ``keyring``: the target's keys (an encrypted store). ``thread_ids``: only these.
    ``progress(total)`` returns a callback advanced once per checkpoint."""
    _same_place(source_url, target_url)
    with _database_errors(source_url, target_url):
        return _import(source_url, target_url, keyring, thread_ids, dry_run, verify, progress)


def _import(
    source_url: str,
    target_url: str,
    keyring: Keyring | None,
    thread_ids: Iterable[str] | None,
    dry_run: bool,
    verify: bool,
    progress: Callable[[int], Progress] | None,
) -> MigrationReport:
    source = _PeerSide(open_peer(source_url, readonly=True))
    try:
        target = _open_statekeeper(target_url, keyring, readonly=dry_run)
        try:
            return _run(
                source,
                target,
                thread_ids=thread_ids,
                dry_run=dry_run,
                verify=verify,
                progress=progress,
            )
        finally:
            target.close()
    finally:
        source.close()


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
    with _database_errors(source_url, target_url):
        return _export(source_url, target_url, keyring, thread_ids, dry_run, verify, progress)


def _export(
    source_url: str,
    target_url: str,
    keyring: Keyring | None,
    thread_ids: Iterable[str] | None,
    dry_run: bool,
    verify: bool,
    progress: Callable[[int], Progress] | None,
) -> MigrationReport:
    source = _open_statekeeper(source_url, keyring, readonly=True)
    try:
        if dry_run:
            try:
                target_db: PeerDatabase | None = open_peer(target_url, readonly=True)
            except NotALangGraphDatabase as exc:
                if not exc.reason.startswith(_NEW):
                    raise IncompatibleTarget(exc.location, exc.reason) from None
                target_db = None  # a new database: everything would be copied
            if target_db is None:
                report, _ = _plan(source, _Empty(target_url), thread_ids)
                report.dry_run = True
                return report
            target: _Side = _PeerSide(target_db)
        else:
            target = _PeerSide(open_peer(target_url, readonly=False))
        try:
            return _run(
                source,
                target,
                thread_ids=thread_ids,
                dry_run=dry_run,
                verify=verify,
                progress=progress,
                convert=_peer_tuple,
            )
        finally:
            target.close()
    finally:
        source.close()


#: why a dry run's target is a database the export would create or set up
_NEW = ("no such file", "it is empty", "the search path has no", "schema ")


class _Empty(_Side):
    """A target that does not exist yet (a dry run of an export)."""

    def __init__(self, location: str) -> None:
        self.location = location

    def index(self, thread_id: str) -> builtins.list[tuple[str, str]]:
        return []

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        return {}
