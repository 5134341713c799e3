"""The witness's marks checked while the store runs: a state read from storage whose
stream no longer holds the record a mark says was acknowledged raises
:class:`~statekeeper.errors.RollbackDetected`, in every process that holds the mark.

The witness (:mod:`.highwater`) was checked only when a store opened (its newest
marks) and by ``verify``. A server that lost acknowledged writes under a running
process — a Redis master that failed before its replica had them, the replica promoted
(``REPLICAOF NO ONE``), or any server restarted from an older copy — and was written
again since (another process saved the same agent: a *different* event at the lost
seq) was then served as it is by a process whose cache no longer held the agent
(evicted, or no cache), although its witness held the mark of the lost record; its
next save wrote on top, and its mark of that save replaced the one of the lost record
in the file, so a process opening the store later found nothing either: two contents
for one ``(agent, seq)``, no error anywhere (tests/backends/test_redis_failover_witness.py).

Now a state read from storage (a cold load, a save's read of the head; never a read
served from the cache) of an agent the witness holds a mark of is checked against it:
no I/O when the state read is at the marked seq and its link is known, or the marked
record came with the read (the events after the latest snapshot: SQLite, PostgreSQL,
Redis read them in one call), one read of the marked record otherwise. A mark that
does not hold is looked up again in the file (another process may have deleted the
agent, or rewritten its head, since: their marks are newer; a file that holds no
entry of it any more, moved away or its entry pushed out by newer marks, leaves only
this process's marks not yet written to check, tests/store/test_witness_held_stale.py),
and raises :class:`RollbackDetected` naming the witness when it still does not — on every such
read, as when the store opens: the store went back in time, and writing on top would
make the witness forget it. Move the witness file away to accept the store as it is
now (``docs/security.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import KeyNotFound, StatekeeperError
from ..records import EventRow, RawEvent
from . import lost as lost_marks
from .ended import unexplained
from .incarnation import same_stream
from .witness_store import reidentified

if TYPE_CHECKING:
    from ..store.state import AgentRecord
    from ..store.store import StateStore
    from .highwater import HighWater

__all__ = ["Held", "held_check", "marked_at", "rekeyed", "unheld", "usable_witness"]


#: the check of a state read from storage, with the event rows read with it
Held = Callable[["AgentRecord", Sequence[EventRow]], Awaitable[None]]


def held_check(witness: HighWater, store: StateStore) -> Held:
    """The check the store's read path runs on a state read from storage (see module)."""

    async def held(record: AgentRecord, events: Sequence[EventRow]) -> None:
        agent_id = record.agent_id
        mark = _mark_of(witness, record)
        if mark is None:
            return
        ident = witness._dirty.get(agent_id) or witness._known.get(agent_id)
        if _in_rows(witness, store, mark, events):
            _held_at(witness, ident, record)
            return
        problem = await witness._check_mark(store, mark)
        if problem is None:
            _held_at(witness, ident, record)
            return
        lost = problem
        # another process may have deleted or rewritten it since: its mark is newer
        fresh = await asyncio.to_thread(witness._read)
        witness._known = fresh
        await reidentified(witness)  # (another process's restore renewed the id: named right)
        filed = fresh.get(agent_id)
        dirty = witness._dirty.get(agent_id)
        if filed is None and dirty is None:
            # the file holds no mark of it any more (moved away to accept the store as
            # it is, or the entry pushed out by newer marks, a deletion's too): as for
            # a process opening the store now, nothing witnessed (this one's old copy
            # of the mark, read before, is no longer the file's)
            lost_marks.forget(witness, agent_id)
            return
        if filed is not None and (dirty is None or float(filed["t"]) > dirty[2]):
            if dirty is not None:  # (older than the file's: the merge would skip it)
                del witness._dirty[agent_id]
            if int(filed["seq"]) < 1:
                lost_marks.forget(witness, agent_id)
                return  # deleted since
            problem = await witness._check_mark(store, filed)
            if problem is None and (
                same_stream(mark, filed) or await unexplained(witness, store, mark, filed)
            ):
                # the newer mark is of the same stream, not reset since: it went back
                # (the marked record lost) and was written again (incarnation.py); or of
                # another, begun without a record that the marked one ended (ended.py):
                # so on every read from now on, the file's mark replacing it (lost.py)
                problem = lost
                lost_marks.keep(witness, agent_id, mark)
            elif problem is None:
                lost_marks.forget(witness, agent_id)
                _held_at(witness, filed, record)
        if problem is not None:
            raise problem

    return held


def _held_at(witness: HighWater, ident: object, record: AgentRecord) -> None:
    """The mark ``ident`` (the dirty tuple or the file's entry) was found to hold in the
    stream ``record`` was read from: its head remembered (:func:`marked_at`), when that
    mark is still the agent's. The head's tag is over the chain link of every record up
    to it: the same tag at the same head is the same records, the marked one too —
    was: a process whose mark was behind the head (another process saved the agent
    since) checked it again on every cold load, one more read each."""
    agent_id = record.agent_id
    if (
        ident is not None
        and (witness._dirty.get(agent_id) or witness._known.get(agent_id)) is ident
    ):
        _tagged(agent_id, ident, record)


def unheld(witness: HighWater) -> Callable[[AgentRecord], bool]:
    """Whether a state read from storage needs :func:`held_check`'s check (False: the
    witness marks no record of its agent, or this very one), without I/O: the read
    path's inline answer (a cold load on SQLite) stays inline when it is False."""

    def needs(record: AgentRecord) -> bool:
        return _mark_of(witness, record) is not None

    return needs


def marked_at(witness: HighWater) -> Callable[[str, int, Any], bool]:
    """Whether a state read from storage at head ``(seq, tag)`` needs its record (the
    read path's ``bare`` load makes none) for :func:`held_check`, without I/O: False
    when the witness marks nothing of the agent, or when the same mark was found to
    hold at this very head and head tag before. The read path checks the head tag
    against the chain link it computes from the records read (``check_head``): the
    same tag is the same link, so the marked record is still the one read. Was: every
    cold load of a marked agent (on SQLite, every agent the store wrote) made its
    record, +4.8 % instructions at a snapshot (docs/benchmarks.md, "held")."""

    def needs(agent_id: str, seq: int, tag: Any) -> bool:
        # (the dicts are looked up each time: a flush or a read of the file replaces them)
        mark = witness._dirty.get(agent_id) or witness._known.get(agent_id)
        if mark is None:
            return False
        if lost_marks.lost_mark(witness, agent_id) is not None:
            return True  # (lost.py)
        seen = _TAGGED.get(agent_id)
        return seen is None or seen[0] is not mark or seen[1] != seq or seen[2] != tag

    return needs


def _tagged(agent_id: str, mark: object, record: AgentRecord) -> None:
    """``mark`` (the dirty tuple or the file's entry, by identity) holds at ``record``'s
    head: remembered with its head tag, for :func:`marked_at`."""
    tag = record.tag
    if tag is not None and record.tag_known and record.link is not None:  # (a bound tag)
        _TAGGED[agent_id] = (mark, record.seq, bytes(tag))
        if len(_TAGGED) > _VERIFIED_MAX:
            with contextlib.suppress(RuntimeError, KeyError, StopIteration):  # (threads)
                del _TAGGED[next(iter(_TAGGED))]


def _mark_of(witness: HighWater, record: AgentRecord) -> dict[str, Any] | None:
    """The mark of ``record``'s agent to check against storage: None when there is
    none, or when ``record`` is the marked record itself (seen without any I/O)."""
    agent_id = record.agent_id
    lost = lost_marks.lost_mark(witness, agent_id)
    if lost is not None:
        return lost  # (found lost before: checked again, lost.py)
    dirty = witness._dirty.get(agent_id)
    if dirty is not None:
        seq, link, t, created = dirty
        if seq < 1 or link is None:
            return None  # a deletion (or a rewrite's) noted
        if record.seq == seq and record.link == link:
            _tagged(agent_id, dirty, record)
            return None
        return witness._mark(agent_id, seq, link, t, created)
    mark = witness._known.get(agent_id)
    if mark is None or int(mark["seq"]) < 1:
        return None
    link = record.link
    if record.seq != int(mark["seq"]) or link is None:
        return mark
    seen = _VERIFIED.get(agent_id)
    if seen is not None and seen[0] is mark and seen[1] == link:
        _tagged(agent_id, mark, record)
        return None  # (this mark's digest checked against this link before: no HMAC)
    try:
        same = witness._codec.check_witness_digest(
            agent_id, record.seq, link, mark.get("key_id"), str(mark.get("digest"))
        )
    except KeyNotFound:
        # made under a key retired since (a rotation whose rekey did not make it again):
        # checked by seq only, as at the opening (:meth:`HighWater._check_mark`) — was:
        # every load of the agent raised KeyNotFound, its records all under the new key
        _tagged(agent_id, mark, record)  # (held as far as it can be checked: not again)
        return None
    if same:
        _VERIFIED[agent_id] = (mark, link)
        _tagged(agent_id, mark, record)
        if len(_VERIFIED) > _VERIFIED_MAX:
            with contextlib.suppress(RuntimeError, KeyError, StopIteration):  # (threads)
                del _VERIFIED[next(iter(_VERIFIED))]
        return None
    return mark


#: marks (the file's entries, by identity: a new read of the file makes new ones) whose
#: digest was found to match a link, so a cold load of the same record compares bytes
_VERIFIED: dict[str, tuple[dict[str, Any], bytes]] = {}
#: marks found to hold at a head (its seq and head tag): :func:`marked_at`
_TAGGED: dict[str, tuple[object, int, bytes]] = {}
_VERIFIED_MAX = 4096


def _in_rows(
    witness: HighWater, store: StateStore, mark: dict[str, Any], events: Sequence[EventRow]
) -> bool:
    """True when the marked record is among ``events`` (read with the state) and is the
    one acknowledged: no read needed. False: not there, or not the same (the check then
    reads it, and says why)."""
    agent_id, seq = str(mark["agent_id"]), int(mark["seq"])
    row = next((e for e in events if e[0] == seq), None)
    if row is None:
        return False
    try:
        link = store._open_event(agent_id, RawEvent(*row))[1].link
        return witness._codec.check_witness_digest(
            agent_id, seq, link, mark.get("key_id"), str(mark.get("digest"))
        )
    except StatekeeperError:
        return False  # (a damaged record: the check's read says no rollback)


async def rekeyed(witness: HighWater, store: StateStore, agent_id: str) -> None:
    """After ``agent_id`` was re-encrypted (``rekey``): its mark in the file, when
    made under another key than the active one, is checked with that key (still in
    the keyring during a rotation) and, when it holds, made again under the active
    key with its time kept, so that it is still checked in full once the old key is
    retired (a mark under a key the keyring lacks is checked by seq only). A mark
    that does not hold is left as it is: ``verify`` reports it."""
    mark = witness._known.get(agent_id)
    if agent_id in witness._dirty or mark is None or int(mark.get("seq", 0)) < 1:
        return
    keyring = witness._codec.keyring
    if keyring is None or mark.get("key_id") in (None, keyring.active_id):
        return
    seq = int(mark["seq"])
    try:
        events = await store.backend.read(agent_id, seq - 1, seq)
        if not events or events[0].seq != seq:
            return
        link = store._open_event(agent_id, events[0])[1].link
        held = witness._codec.check_witness_digest(
            agent_id, seq, link, mark.get("key_id"), str(mark.get("digest"))
        )
    except StatekeeperError:
        return  # a key already gone, a damaged record: left for verify
    if held:
        created = mark.get("c")
        witness._dirty[agent_id] = (seq, link, float(mark["t"]), created)
        loop = witness._loop
        if not witness._scheduled or (loop is not None and loop.is_closed()):
            witness._schedule()


async def usable_witness(store: StateStore) -> HighWater | None:
    """The store's witness, its file read, for ``rekey`` to make its marks under older
    keys again under the active one (:func:`rekeyed`, :func:`.rekey_checks.remake_marks`); None
    without one, or with an unusable file (every use of the store says so)."""
    witness = store.witness
    if witness is not None:
        try:
            await asyncio.to_thread(witness.load)
        except StatekeeperError:
            return None
    return witness
