"""The store's automatic witness: high-water marks kept *outside* the store, by default.

A chain and an authenticated head cannot see a store that went back in time as a
whole: an old copy of the database file restored over the current one, a file
truncated to nothing, or a damaged SQLite WAL frame (SQLite then treats the log as
ending there, and every commit after it vanishes consistently). Each of those loses
the *newest* acknowledged writes. :class:`HighWater` remembers them: after every
acknowledged append it notes ``(agent, seq, chain link)`` in memory (a dict update,
nothing else on the write path), and a background flush writes the marks of the most
recently written agents (``keep``) to a witness file at most ``interval`` seconds
later. When a store opens, the newest marks are checked (:meth:`HighWater.check`);
``StateStore.verify`` checks them all. A stream that is shorter than a mark, or whose
record at the marked seq is not the one acknowledged, is a
:class:`~statekeeper.errors.RollbackDetected` naming the agent and the last seq known
to have been acknowledged.

The file is a witness file in the format of :mod:`statekeeper.security.witness` (so
``statekeeper witness check FILE`` reads it too). Its digests are keyed in a store with
a key (a mark made under a key the keyring no longer holds is checked by seq only;
``rekey`` makes the marks of the agents it re-encrypts again under the active key);
its seal is a SHA-256 even then, so that opening the store never needs a key it would
not need anyway: the seal catches a damaged file, not a forger (who can delete the
file anyway; keep an exported, keyed witness elsewhere against one). Two additions per
stream: ``t``
(when the mark was made, wall clock: the newest mark of an agent wins when several
processes write the file) and deletions as entries with ``seq`` 0. Processes sharing a
store merge their marks into one file under an advisory lock (``<file>.lock``).

Where it lives: next to a SQLite database, as ``<database>.sk-witness`` (so it is kept
when the file is truncated, damaged or replaced, and ``rm app.db*`` removes it with the
store). Other engines have no file of their own: give ``witness=PATH`` to
:class:`~statekeeper.store.StateStore` to keep one for them. What it cannot see is
listed in ``docs/security.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import IntegrityError, RollbackDetected, StatekeeperError
from .expiry import expired_since
from .incarnation import Dirty, begun_kept, begun_written, reset_kept
from .lost import rechecked, with_lost
from .witness_file import VERSION, canonical, entries_of, unreadable, write_atomically
from .witness_store import Identity, another_store, describe, differs, parse_store
from .witness_store import reidentified as reidentified

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..backends.base import Backend
    from ..codec import Codec
    from ..store.store import StateStore

__all__ = ["DEFAULT_INTERVAL", "WAITING", "HighWater", "default_location"]

logger = logging.getLogger("statekeeper.witness")

#: the longest an acknowledged write waits before its mark is written (seconds)
DEFAULT_INTERVAL = 1.0

#: the witnesses' guard tasks still waiting (see :meth:`HighWater.guard`)
_GUARDS: set[asyncio.Task[None]] = set()
#: how many of the most recently written agents the file keeps a mark for
DEFAULT_KEEP = 1024
#: how many of the newest marks are checked when a store opens
OPEN_CHECKS = 16
SUFFIX = ".sk-witness"
#: the name of the task that writes the marks when its loop shuts down (it only waits:
#: a loop driven from outside, the LangGraph saver's, need not be run for it)
WAITING = "statekeeper-witness"

try:  # advisory locking between processes (POSIX); elsewhere one process per file
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]


def _seal(data: bytes) -> str:
    """The file's seal: SHA-256, as a keyless exported witness's (see module docs)."""
    return hashlib.sha256(b"sk-witness-file/1" + data).hexdigest()


def default_location(backend: Backend) -> str | None:
    """Where a backend's witness lives by default: next to a SQLite file; None for
    engines without a file of their own (memory, PostgreSQL, Redis, S3, tiered)."""
    from ..backends.sqlite import SQLiteBackend

    if isinstance(backend, SQLiteBackend):
        return backend.path + SUFFIX
    return None


class HighWater:
    """The high-water marks of one store, kept in the witness file at ``path``.

    The store calls :meth:`acked` after each acknowledged append, :meth:`deleting`
    and :meth:`deleted` around a delete, :meth:`check` when it opens and from
    ``verify``, and :meth:`close` when it closes (a final flush).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        codec: Codec,
        *,
        interval: float = DEFAULT_INTERVAL,
        keep: int = DEFAULT_KEEP,
    ) -> None:
        self.path = os.fspath(path)
        self.interval = interval
        self.keep = keep
        self._codec = codec
        self._dirty: dict[str, Dirty] = {}
        self._begun: dict[str, Dirty] = {}  # (seq 1 acked: a reset, .incarnation)
        self._known: dict[str, dict[str, Any]] = {}
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None  # (the next flush: see close())
        self._guard: asyncio.Task[None] | None = None
        self._released: asyncio.Future[None] | None = None  # (ends the guard: close())
        self._thread_lock = threading.Lock()
        self._failed = False
        #: the store written from here, and the one the file records (see
        #: :mod:`.witness_store`); ``identify`` learns the first at the first flush
        self.store: Identity | None = None
        self.filed_store: Identity | None = None
        self.identify: Callable[[], Awaitable[Identity | None]] | None = None
        self._adopt = False  # (the file records ``store`` at the next write: renewed)

    # -- the write path --------------------------------------------------------------

    def acked(self, agent_id: str, seq: int, link: bytes, created: float | None = None) -> None:
        """An append of ``agent_id`` up to ``seq`` (chain link ``link``, of the stream
        begun at ``created``: :mod:`.incarnation`) was acknowledged: remembered."""
        self._dirty[agent_id] = mark = (seq, link, time.time(), created)
        if seq == 1:  # a stream begun: a reset (.incarnation.begun_kept)
            self._begun[agent_id] = mark
        if not self._scheduled or (self._loop is not None and self._loop.is_closed()):
            self._schedule()

    async def rekeyed(self, store: StateStore, agent_id: str) -> None:
        """After ``agent_id`` was re-encrypted (``rekey``): its mark made again under the
        active key when it holds (:func:`.held.rekeyed`)."""
        from .held import rekeyed

        await rekeyed(self, store, agent_id)

    def _schedule(self) -> None:
        # (a store used from one event loop after another: the timer follows it)
        self._scheduled = True
        self._loop = loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.interval, self._start)
        guard = self._guard
        if guard is None or guard.get_loop() is not loop:  # (a loop of its own: see guard())
            self.guard()

    def guard(self) -> None:
        """Have a task on the running loop write the marks noted when the loop shuts
        down: ``asyncio.run`` cancels the tasks left when its coroutine returns, then
        closes the loop — with the timer of the next flush, and the marks of a store
        never closed (its last writes', all of a short run's), which nothing would
        write. The store starts it on its first use (before its first write: a task
        started later is a ready callback a lone ``group`` save would wait behind), and
        a new one on each loop it writes from; not another on a loop whose guard ended
        (cancelled: the loop is shutting down, a write-behind buffer's last appends
        noted then are written by the store itself)."""
        loop = asyncio.get_running_loop()
        if self._guard is not None and self._guard.get_loop() is loop:
            return  # (one per loop: a second would drop the first, collected pending)
        _drop_closed()
        self._released = released = loop.create_future()
        self._guard = guard = loop.create_task(
            _guard_run(weakref.ref(self), released), name=WAITING
        )
        # held here while it waits, never only by a witness a collection may take with
        # it (see __del__): a task collected pending is reported destroyed
        _GUARDS.add(guard)
        guard.add_done_callback(_GUARDS.discard)

    def __del__(self) -> None:
        # a store dropped without close() (the bench's, which share their backend):
        # nothing is left to write — marks still to write keep this object alive by
        # the flush timer — so its guard ends, on its loop, instead of being collected
        # pending ("Task was destroyed but it is pending!" at a later collection)
        guard = self._guard
        if guard is not None and not guard.done():
            try:
                guard.cancel()
            except RuntimeError:  # (its loop closed: nothing will run it)
                _abandon(guard)

    async def _write_at_shutdown(self) -> None:
        with contextlib.suppress(Exception):  # (close() logs what is still left)
            await self.flush(identify=False)  # (no server call as the loop ends)

    def _start(self) -> None:
        self._timer = None
        self._task = asyncio.get_running_loop().create_task(self._background())

    async def _background(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # reported once per failure streak, retried next time
            if not self._failed:
                logger.error("cannot write the witness file %s: %s", self.path, exc)
            self._failed = True
        else:
            self._failed = False
        finally:
            self._scheduled = False
            self._task = None
            if self._dirty:
                self._schedule()

    async def flush(self, *, identify: bool = True) -> None:
        """Write every mark noted so far (merged with the file's) now."""
        if not self._dirty:
            return
        if identify and self.store is None and self.identify is not None:  # (once)
            with contextlib.suppress(Exception):  # (unknown: the next flush asks again)
                self.store = await self.identify()
        dirty, self._dirty = self._dirty, {}
        try:
            try:
                written = asyncio.get_running_loop().run_in_executor(None, self._merge, dirty)
            except RuntimeError:  # (the interpreter is ending: its thread pools take no work)
                # a store closed as Python exits (a thread still saving when the main
                # thread ended): written here, on the loop — was: the last marks lost
                # ("cannot schedule new futures after shutdown"), the data stored
                self._merge(dirty)
            else:
                await written
        except BaseException:
            for agent_id, mark in dirty.items():  # keep them for the next attempt
                if agent_id not in self._dirty or self._dirty[agent_id][2] < mark[2]:
                    self._dirty[agent_id] = mark
            raise

    async def flush_at_loop_end(self) -> None:
        """The flush of a write-behind buffer's appends at its loop's shutdown (see
        :meth:`.WriteBehind._write_out`): writes the marks, then ends this loop's guard
        when those appends started it. A store used from one ``asyncio.run`` after
        another starts its guard on a new loop with the first mark noted there — in a
        ``durability="async"`` store, that of the shutdown's flush, after
        ``asyncio.run`` cancelled the tasks it found: nothing cancelled the guard. Was:
        every such ``asyncio.run`` waited 10 s for it (the flush waits for the tasks
        its writes started), then closed its loop with the guard pending, kept in
        ``_GUARDS`` (one more per run) and reported destroyed at the interpreter's
        exit."""
        await self.flush()
        guard, released = self._guard, self._released
        if (
            guard is not None
            and released is not None
            and not released.done()  # (cancelled with its task by asyncio.run: it ends)
            and guard.get_loop() is asyncio.get_running_loop()
        ):
            released.set_result(None)  # (the marks are written: nothing left for it)

    async def deleting(self, agent_id: str) -> None:
        """Before ``agent_id`` is deleted: write a deletion of it to the file now, so no
        process opening the store meanwhile takes the delete for a rollback, and a mark
        another process made before the delete and writes after it (its flush waits up
        to ``interval``) is older than the deletion, so it is not taken over it
        (tests/store/test_witness_delete_elsewhere.py)."""
        self._dirty[agent_id] = (0, None, time.time(), None)
        await self.flush()  # (merges with the file's marks under its lock, reads them)

    async def rewriting(self, agent_ids: list[str]) -> None:
        """Before the records at the heads of ``agent_ids`` are rewritten with new chain
        links (a schema migration, its rollback or finalize): replace the file's marks of
        those agents by deletions now, in one read and one flush, so that no process
        opening the store while the rewrite runs (or after it was killed) takes it for
        a rollback, and a mark another process made before the rewrite and writes after
        it (its flush waits up to ``interval``) is older than the deletion, so it is not
        taken over it. The rewrite then notes each new link with :meth:`acked`
        (tests/store/test_witness_rewrite_elsewhere.py)."""
        now = time.time()
        for agent_id in set(agent_ids):
            self._dirty[agent_id] = (0, None, now, None)
        await self.flush()  # (merges with the file's marks under its lock, reads them)

    def deleted(self, agent_id: str) -> None:
        """After a delete: a deletion newer than any mark made before it."""
        self._dirty[agent_id] = (0, None, time.time(), None)
        if not self._scheduled or (self._loop is not None and self._loop.is_closed()):
            self._schedule()

    async def close(self) -> None:
        """Final flush (waits for a background flush in progress). A witness file that
        cannot be written is logged, not raised: closing the store must not fail."""
        # the next flush's timer goes: this one writes the marks. Left on a loop that
        # runs on (a LangGraph saver's), it started a flush task after the close that
        # nothing ran ("Task was destroyed but it is pending!" at the interpreter's exit)
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            self._scheduled = False
        guard, self._guard = self._guard, None
        released, self._released = self._released, None
        if guard is not None and released is not None and not guard.done():
            if guard.get_loop() is asyncio.get_running_loop():
                if not released.done():  # (it ends: the flush below writes the marks)
                    released.set_result(None)
                await asyncio.wait([guard])  # (cancelled meanwhile: it wrote them)
            else:  # a loop the store no longer runs on (closed, or stopped): left to it
                try:
                    guard.cancel()
                except RuntimeError:  # (closed: nothing will run it)
                    _abandon(guard)
        task = self._task
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
        try:
            await self.flush()
        except Exception as exc:
            logger.error(
                "cannot write the witness file %s on close (%d mark(s) not written): %s",
                self.path,
                len(self._dirty),
                exc,
            )

    # -- the file ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            if fcntl is None:  # pragma: no cover - not POSIX
                yield
                return
            with open(self.path + ".lock", "a") as fh:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def load(self) -> None:
        """Read the file (an absent one holds no marks). Raises ``IntegrityError`` when
        it is unreadable or its seal does not match its content."""
        self._known = self._read()

    def absent(self) -> None:
        """The file was found absent: it holds no marks (what :meth:`load` reads then,
        without opening it)."""
        self._known, self.filed_store = {}, None

    def marked(self, agent_id: str) -> bool:
        """Whether a mark (or a deletion) of ``agent_id`` is known (checked: :mod:`.held`)."""
        return agent_id in self._dirty or agent_id in self._known

    def empty(self) -> bool:
        """True when no mark is known: none read from the file, none noted since."""
        return not self._known and not self._dirty

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            text = Path(self.path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise self._unusable(f"cannot read it: {exc.strerror or exc}") from exc
        try:
            doc = json.loads(text)
            filed = parse_store(doc.get("store"))
            entries = entries_of(doc)
            streams, seal = doc["streams"], dict(doc.get("seal") or {})  # (an object)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self._unusable(unreadable(exc)) from exc
        if seal.get("key_id") is not None or not hmac.compare_digest(
            _seal(canonical(streams)), str(seal.get("mac", ""))
        ):
            raise self._unusable("it was altered (its seal does not match its content)")
        self.filed_store = filed
        return entries

    def _unusable(self, why: str) -> IntegrityError:
        return IntegrityError(
            "*",
            None,
            f"the store's witness file {self.path} is unusable: {why}; move it away to "
            "accept the store as it is now",
        )

    def _merge(self, dirty: dict[str, Dirty]) -> None:
        with self._locked():
            self.filed_store = None
            current = self._read()
            filed = self.filed_store
            store = self.store if self._adopt or filed is None else filed  # (never another)
            for agent_id, (seq, link, t, created) in dirty.items():
                old = current.get(agent_id)
                if old is not None and float(old["t"]) > t:  # another process marked it later
                    begun_kept(old, self._begun.get(agent_id))  # (a begin here kept: r)
                    continue
                if seq == 0 or link is None:
                    current[agent_id] = {"agent_id": agent_id, "seq": 0, "t": t}
                    continue
                mark = reset_kept(self._mark(agent_id, seq, link, t, created), old)
                current[agent_id] = begun_kept(mark, self._begun.get(agent_id))
            newest = sorted(current.values(), key=lambda e: float(e["t"]), reverse=True)
            streams = sorted(newest[: self.keep], key=lambda e: str(e["agent_id"]))
            data = canonical(streams)
            key_id, mac = None, _seal(data)
            doc = {
                "statekeeper_witness": VERSION,
                "automatic": True,
                "exported_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "agents": sum(1 for e in streams if int(e["seq"]) > 0),
                "streams": streams,
                "seal": {"key_id": key_id, "mac": mac},
            }
            if store is not None:
                doc["store"] = store
            write_atomically(Path(self.path), json.dumps(doc, separators=(",", ":")) + "\n")
            self._known = {str(e["agent_id"]): e for e in streams}
            self.filed_store, self._adopt = store, False
            begun_written(self._begun, dirty)

    def _mark(
        self, agent_id: str, seq: int, link: bytes, t: float, created: float | None = None
    ) -> dict[str, Any]:
        """The witness entry of a stream whose head ``seq`` has chain ``link``."""
        key_id, digest = self._codec.witness_digest(agent_id, seq, link)
        mark = {"agent_id": agent_id, "seq": seq, "key_id": key_id, "digest": digest, "t": t}
        return mark if created is None else {**mark, "c": created}  # (.incarnation)

    # -- checking ----------------------------------------------------------------------

    def marks(self, agents: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The marks known (file and not yet written), newest first, deletions left out;
        only those of ``agents`` when given (looked up, the others not sorted: a verify
        of a page of agents costs its page, not every mark)."""
        if agents is None:
            entries = dict(self._known)
            dirty = self._dirty
        else:
            wanted = set(agents)
            entries = {a: self._known[a] for a in wanted if a in self._known}
            dirty = {a: self._dirty[a] for a in wanted if a in self._dirty}
        for agent_id, (seq, link, t, created) in dirty.items():
            if link is not None and seq > 0:
                entries[agent_id] = self._mark(agent_id, seq, link, t, created)
            else:
                entries.pop(agent_id, None)
        marks = [e for e in entries.values() if int(e["seq"]) > 0]
        return sorted(marks, key=lambda e: float(e["t"]), reverse=True)

    async def check(
        self,
        store: StateStore,
        limit: int | None = None,
        *,
        agents: list[str] | None = None,
        exact: bool = False,
    ) -> list[RollbackDetected]:
        """Check the ``limit`` newest marks (all when None; only those of ``agents``
        when given) against ``store``; every stream that went back in time is returned
        as a :class:`RollbackDetected` (a mark found lost too: :mod:`.lost`).
        A suspect is checked again against a fresh read of the file (another process
        may have deleted the agent meanwhile). ``exact`` (``verify``) reads each
        stream's head too, not only the marked record: a head moved below it, or gone,
        over records left in place (a hand edit) is a stream gone back in time."""
        found: list[RollbackDetected] = []
        marks = with_lost(self, self.marks(agents))  # (lost ones kept: .lost)
        suspects = [
            mark for mark in marks[:limit] if await self._check_mark(store, mark, exact) is not None
        ]
        if not suspects:
            return found
        fresh = await asyncio.to_thread(self._read)
        self._known = fresh
        await reidentified(self)  # (a restore elsewhere renewed it: named right)
        for mark in suspects:
            agent_id = str(mark["agent_id"])
            now = fresh.get(agent_id, mark) if agent_id not in self._dirty else mark
            if int(now["seq"]) < 1:
                continue  # deleted meanwhile
            problem = await rechecked(self, store, mark, now, exact)  # (.lost)
            if problem is not None:
                found.append(problem)
        return found

    async def check_filed(self, store: StateStore, agent_id: str) -> RollbackDetected | None:
        """The file's mark of ``agent_id`` (read afresh) checked against ``store``: None
        when the file holds none, a deletion, or a mark the store still holds. This
        process's marks not yet written are left out: a delete another process made
        before they were cannot have marked its deletion over them."""
        self._known = await asyncio.to_thread(self._read)
        mark = self._known.get(agent_id)
        if mark is None or int(mark["seq"]) < 1:
            return None
        found = await self._check_mark(store, mark)
        if found is not None and await reidentified(self):  # (named after a restore)
            found = await self._check_mark(store, mark)
        return found

    async def _check_mark(
        self, store: StateStore, mark: dict[str, Any], exact: bool = False
    ) -> RollbackDetected | None:
        agent_id, seq = str(mark["agent_id"]), int(mark["seq"])
        when = datetime.fromtimestamp(float(mark["t"]), UTC).isoformat(timespec="seconds")
        try:
            # one query when the record is there (the common case): its presence says
            # the head is at or past it, unless the head was edited apart from the
            # records (``exact``, verify, reads it too); the head is read when it is not
            events = await store.backend.read(agent_id, seq - 1, seq)
            present = bool(events) and events[0].seq == seq
            head = seq if present and not exact else await store.backend.head(agent_id)
        except StatekeeperError:
            # a damaged file (or an id the engine refuses, in an edited witness), not a
            # rollback: reading and verify report it
            return None
        t = float(mark["t"])
        if head < seq and not await expired_since(store, agent_id, t, head, self, mark.get("c")):
            gone = "the agent is gone" if head == 0 else f"the store's head is seq {head}"
            return RollbackDetected(
                agent_id,
                seq,
                head,
                self.path,
                f"seq {seq} was acknowledged (by {when}) but {gone}{self._whose()}",
            )
        if not events or events[0].seq != seq:
            return None  # a gap, not a rollback: reading and verify report it
        try:
            link = store._open_event(agent_id, events[0])[1].link
            same = self._codec.check_witness_digest(
                agent_id, seq, link, mark.get("key_id"), str(mark.get("digest"))
            )
        except StatekeeperError:
            return None  # a damaged record, not a rollback: reading and verify report it
        if same or await expired_since(store, agent_id, t, head, created=mark.get("c")):
            return None
        with contextlib.suppress(StatekeeperError):  # the head found, for the report
            head = await store.backend.head(agent_id)
        return RollbackDetected(
            agent_id,
            seq,
            head,
            self.path,
            f"the record at seq {seq} is not the one acknowledged (by {when}): the store "
            f"was rolled back and written again, or the stream was replaced{self._whose()}",
        )

    def _whose(self) -> str:
        """The store the file witnesses, for a check's report (see :mod:`.witness_store`);
        with this store's when it is another one."""
        filed, ours = self.filed_store, self.store
        if filed is not None and ours is not None and differs(filed, ours):
            return f"; {another_store(filed, ours)}"
        known = filed or ours
        return f", in {describe(known)}" if known is not None else ""


def _drop_closed() -> None:
    """Forget the guards whose loop was closed before they ended (a loop closed without
    ``asyncio.run``'s cancellation of its tasks: ``run_until_complete`` then ``close``):
    nothing will ever run them, the marks they held were left to the store's next use
    or close. Was: ``_GUARDS`` kept every one, a worker starting a loop per job grew by
    one task (and its loop) per job, each reported destroyed at the interpreter's exit."""
    for guard in [g for g in _GUARDS if g.get_loop().is_closed()]:
        _abandon(guard)


def _abandon(guard: asyncio.Task[None]) -> None:
    """Forget a guard whose loop is closed, without the "Task was destroyed but it is
    pending!" its collection would log (it can never run: nothing to report)."""
    guard._log_destroy_pending = False  # type: ignore[attr-defined]
    _GUARDS.discard(guard)


async def _guard_run(witness: weakref.ref[HighWater], released: asyncio.Future[None]) -> None:
    """The guard task of :meth:`HighWater.guard`: waits for ``released``; cancelled
    before (the loop shutting down), it writes the marks noted. It holds the witness
    weakly: a witness dropped unclosed is collected, and its ``__del__`` ends this."""
    try:
        await released
    except asyncio.CancelledError:  # the loop is shutting down: write them now
        found = witness()
        if found is not None:
            await found._write_at_shutdown()
        raise
