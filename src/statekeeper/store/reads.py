"""The read path: stored records in, folded and verified state out.

Every record read is decoded through the codec (authenticated, and checked against
the chain), a state is the nearest usable snapshot plus the events after it, and the
latest state of each agent is kept folded in an LRU cache that later reads bring up
to date (one indexed read when nothing changed; one storage lost: :mod:`.seen`).
:class:`ReadPath` owns it and the records pinned by write-behind appends not yet stored;
the write pipeline (:mod:`.writes`) puts the state after each acknowledged append in it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from time import thread_time
from typing import Any

from ..backends.base import Backend, LatestRead
from ..codec import ZERO_LINK, Codec, Opened
from ..codec.formats import JSON
from ..errors import (
    AgentNotFound,
    ConfigurationError,
    HistoryCompacted,
    IntegrityError,
    PatchError,
    SerializationError,
    StatekeeperError,
)
from ..records import EventRow, RawEvent, RawSnapshot, Snapshot, event_rows
from ..security.held import Held
from .autotune import AutoInterval
from .body import SNAPSHOT_TYPE, plain_data, snapshot_record
from .compaction import base_error, before_stored
from .copies import public_copy
from .incarnation import check_in_stream
from .seen import Ask, RecordCache, check_seen, vanished
from .state import (
    AgentRecord,
    apply_payloads,
    extend_list,
)
from .tails import BaseMissing, apply_tail_ops
from .thin import at_snapshot, bare_copy, bare_fold
from .verification import _reason

__all__ = ["PAGE", "ReadPath"]

_log = logging.getLogger("statekeeper.store")

#: events per backend read
PAGE = 1000


def _inline_state(backend: Backend) -> Any:
    """``backend.state_rows_now`` when the engine has it and ``read_state_rows`` is the
    engine's own (a subclass that overrides ``read_state_rows`` alone is called as it
    says), else None."""
    cls = type(backend)
    if getattr(cls, "state_rows_now", None) is None:
        return None
    owner = next(k for k in cls.__mro__ if "read_state_rows" in vars(k))
    return getattr(backend, "state_rows_now") if "state_rows_now" in vars(owner) else None  # noqa: B009


def _inline_base(backend: Backend, state_now: Any, name: str = "snapshots_now") -> Any:
    """``backend.snapshots_now`` (or ``name``) when the engine reads inline
    (``state_now``), else None."""
    return getattr(backend, name, None) if state_now is not None else None


def _unusable(agent_id: str, passed: Sequence[tuple[int, StatekeeperError]], found: int) -> None:
    """Warn of each snapshot a fold passed over (``passed``: seq, why) — but a tail whose
    base is missing when the snapshot the fold found (at ``found``) is above that base."""
    for seq, exc in passed:
        if type(exc) is BaseMissing and exc.base < found:
            continue
        _log.warning(
            "agent %r: snapshot at seq %d is unusable (%s); loading from an older"
            " snapshot or a full replay (`statekeeper repair` rebuilds it)",
            agent_id,
            seq,
            _reason(exc),
        )


class ReadPath:
    """Decode, fold and cache agent states read from ``backend``. ``cache_size``:
    folded states kept (0: none); ``validate_cache``: bring a cached state up to date
    with storage (one indexed read) before serving it, else serve it as it is."""

    def __init__(
        self, backend: Backend, codec: Codec, *, cache_size: int, validate_cache: bool
    ) -> None:
        self.backend = backend
        self.codec = codec
        self.validate = validate_cache
        self.cache = RecordCache(cache_size)
        #: agents with appends still in the write-behind buffer: never evicted
        self.pinned: dict[str, AgentRecord] = {}
        #: states folded from the backend (not served from the cache)
        self.loads = 0
        #: snapshot_every="auto": told what each cold load's replay cost
        self.tuner: AutoInterval | None = None
        # the latest state in one call where the engine answers that natively (the
        # default, two unbounded reads, gains nothing over the bounded latest_snapshot
        # + read of the fold, and a tiered engine may answer the unbounded read from a
        # hot copy that is behind)
        self.native_latest = type(backend).read_latest is not Backend.read_latest
        # ... and the head with it, in one statement (SQLite, PostgreSQL): a cold load
        # of the latest state is then one read
        self.native_state = type(backend).read_state is not Backend.read_state
        #: the engine's ``read_state_rows`` as a plain call (SQLite: its reads run inline),
        #: or None: no coroutine, wrapper or second id check per cold load
        self.state_now = _inline_state(backend)
        #: ... and its read of a range of snapshots (a tail snapshot's chain: .tails)
        self.chain_now = _inline_base(backend, self.state_now)
        #: ... and of the snapshots at two seqs (a tail's whole snapshot and its base)
        self.at_now = _inline_base(backend, self.state_now, "snapshots_at_now")
        #: tail snapshots are written (SnapshotPolicy): a cold load keeps their base
        self.tails = False
        #: the engine ``state_now`` was taken from (``instrument()`` swaps ``backend``)
        self._state_of = backend
        self.ask: Ask | None = None  # the witness, of an agent found gone: .seen.vanished
        #: the witness's marks of a state read (:mod:`..security.held`): held for the
        #: agent? the check raising when it is not the one acknowledged (None: no witness)
        self.marked: Callable[[str, int, Any], bool] | None = None  # (agent, head, tag)
        self.unheld: Callable[[AgentRecord], bool] | None = None  # (a check to run: .held)
        self.held: Held | None = None

    #: the latest state from one read's snapshot and events (:func:`.thin.at_snapshot`)
    at_snapshot = at_snapshot
    #: ... and the caller's copy of a whole snapshot kept by nobody (:func:`.thin.bare_copy`)
    bare_copy = bare_copy
    #: ... and of a run of appends after it (:func:`.thin.bare_fold`)
    bare_fold = bare_fold

    # -- decoding ----------------------------------------------------------------

    def open_event(self, agent_id: str, raw: RawEvent) -> tuple[dict[str, Any], Opened]:
        """The verified body of a stored event, and the record opened."""
        body, opened = self.codec.decode(
            agent_id, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum
        )
        if type(body) is not dict:
            raise IntegrityError(agent_id, raw.seq, "event payload is not an object")
        return body, opened

    def decode_event(self, agent_id: str, raw: RawEvent) -> dict[str, Any]:
        """The verified body of a stored event."""
        return self.open_event(agent_id, raw)[0]

    def open_snapshot(self, agent_id: str, raw: RawSnapshot) -> tuple[dict[str, Any], Opened]:
        """The verified body of a stored snapshot, and the record opened."""
        body, opened, _ = self.open_snapshot_typed(agent_id, raw)
        return body, opened

    def open_snapshot_typed(
        self, agent_id: str, raw: RawSnapshot
    ) -> tuple[dict[str, Any], Opened, bool]:
        """:meth:`open_snapshot`, and whether the body may hold typed values."""
        body, opened, typed = self.codec.decode_typed(
            agent_id, raw.seq, SNAPSHOT_TYPE, raw.timestamp, raw.payload, raw.checksum
        )
        if type(body) is not dict:
            raise IntegrityError(agent_id, raw.seq, "snapshot payload is not an object")
        return body, opened, typed

    async def decode_snapshot(self, agent_id: str, raw: RawSnapshot) -> AgentRecord:
        """The folded state a stored snapshot holds (a delta resolved against its base)."""
        body, opened, typed = self.open_snapshot_typed(agent_id, raw)
        if self.tuner is not None and "tune" in body:  # "auto": what was learned before
            self.tuner.resume(body["tune"])
        # a whole snapshot (every cold load's case) without a coroutine for its data
        bases: list[tuple[int, bool]] = []  # (a delta's bases: bytes, typed; whole last)
        data = (
            body["data"]
            if "data" in body and "base" not in body
            else await self.snapshot_data(agent_id, raw.seq, body, bases=bases)
        )
        record = snapshot_record(agent_id, raw, body, opened.prev, data)
        record.snapshot_bytes, record.rich = len(raw.payload), typed or "base" in body
        if type(rb := body.get("rb")) is int and type(whole := body.get("w")) is int:
            # a tail snapshot (.tails): its whole one's seq, bytes and replay; rich as its chain
            record.replay_bytes, record.full_link, record.snapshot_bytes = rb, None, bases[-1][0]
            record.snapshot_seq = record.full_seq = whole
            record.rich = typed or any(based for _, based in bases)
        if not record.rich and self.cache.max_size and opened.format == JSON:
            # (kept for a cache: a store without one hands the parsed data over)
            record.blob = plain_data(opened.body, body)
        return record

    async def snapshot_data(
        self, agent_id: str, seq: int, body: dict[str, Any], depth: int = 0, bases: Any = None
    ) -> Any:
        """The data of a snapshot body, a delta resolved (``bases``: a list they join)."""
        if "base" not in body:
            if "data" not in body:
                raise IntegrityError(agent_id, seq, "snapshot is missing 'data'")
            return body["data"]
        base, link, ops = body.get("base"), body.get("bl"), body.get("ops")
        if type(base) is not int or not 0 < base < seq or type(ops) is not list or depth > 64:
            raise IntegrityError(agent_id, seq, "delta snapshot has an invalid base")
        raw = await self.backend.latest_snapshot(agent_id, base)
        if raw is None or raw.seq != base:
            raise BaseMissing(agent_id, seq, base)
        base_body, opened, typed = self.open_snapshot_typed(agent_id, raw)
        if opened.prev is None or opened.prev.hex() != link:
            raise IntegrityError(
                agent_id, seq, f"delta snapshot does not match its base snapshot (seq {base})"
            )
        (bases if bases is not None else []).append((len(raw.payload), typed))
        data = await self.snapshot_data(agent_id, base, base_body, depth + 1, bases)
        try:
            return apply_tail_ops(data, ops)  # (patch.apply; a run of appends extends)
        except PatchError as exc:
            raise IntegrityError(agent_id, seq, f"delta snapshot does not apply: {exc}") from exc

    # -- folding -----------------------------------------------------------------

    async def fold(
        self,
        agent_id: str,
        head: int,
        target: int,
        tag: bytes | None = None,
        *,
        at_head: bool = False,
        latest: tuple[RawSnapshot | None, list[EventRow]] | None = None,
    ) -> AgentRecord:
        """Build the state at ``target`` from the nearest snapshot and the events after,
        verifying every record and the chain; with ``at_head`` (``target`` is the head)
        also the stream's head ``tag``. ``latest``: the latest snapshot and the events
        after it, when they were read already (with the head)."""
        self.loads += 1
        below: int | None = target
        # the latest state: the latest snapshot and the events after it, read together
        if latest is None and at_head and self.native_latest:
            snap, raws = await self.backend.read_latest(agent_id)
            latest = snap, event_rows(raws)
        if latest is not None and latest[0] is not None and latest[0].seq > target:
            latest = None  # written since: look below
        # tails whose base is missing, passed over: said once the fold's snapshot is known
        # (none said when it lies above their base: replaced by a settle, tails.BaseMissing)
        orphans: list[tuple[int, BaseMissing]] = []
        while True:
            events: list[EventRow] | None = None
            if latest is not None:
                (snap, events), latest = latest, None
            else:
                snap = await self.backend.latest_snapshot(agent_id, below) if below else None
            if snap is None:  # no (usable) snapshot: a full replay
                _unusable(agent_id, orphans, 0)
                return await self.fold_from(None, agent_id, head, target, tag, at_head, events)
            try:
                record = await self.decode_snapshot(agent_id, snap)
                if record.seq == target and (tag is None or not at_head):  # (nothing after)
                    await check_in_stream(self.backend, self.codec, agent_id, record.link, target)
            except (IntegrityError, SerializationError) as exc:
                # a damaged snapshot is only a cache of the fold: try an older one
                if type(exc) is BaseMissing:
                    orphans.append((snap.seq, exc))
                else:
                    _unusable(agent_id, [(snap.seq, exc)], 0)
                below = snap.seq - 1
                continue
            _unusable(agent_id, orphans, record.seq)
            try:
                return await self.fold_from(record, agent_id, head, target, tag, at_head, events)
            except (IntegrityError, SerializationError) as exc:
                # the snapshot decoded but disagrees with the events after it (or with
                # the head): the events decide — replay them all; if they are at fault,
                # the replay raises the same error
                _log.warning(
                    "agent %r: the events after the snapshot at seq %d do not fold (%s);"
                    " retrying with a full replay",
                    agent_id,
                    snap.seq,
                    _reason(exc),
                )
                return await self.fold_from(None, agent_id, head, target, tag, at_head)

    async def fold_from(
        self,
        record: AgentRecord | None,
        agent_id: str,
        head: int,
        target: int,
        tag: bytes | None,
        at_head: bool,
        events: list[EventRow] | None = None,
    ) -> AgentRecord:
        """Fold events up to ``target`` onto ``record`` (None: from the start), starting
        with ``events`` when they were read already (those past ``target`` ignored)."""
        if record is None:
            record = AgentRecord(agent_id, 0, None, {}, 1, 0.0, 0.0, link=ZERO_LINK)
        tuner, start = self.tuner, record.seq
        began = thread_time() if tuner is not None else 0.0
        try:  # (a stream that starts after seq 1: compacted, or its history deleted)
            if events:
                if events[-1][0] > target:
                    events = [e for e in events if e[0] <= target]
                self.apply_events(record, events)
            if record.seq < target:  # (a load at a snapshot, or its events read: nothing)
                await self.catch_up(record, target)
        except HistoryCompacted as exc:
            error = await base_error(self, agent_id, exc.base_seq)
            if type(error) is HistoryCompacted and start < exc.base_seq <= target:
                snap = await self.backend.latest_snapshot(agent_id, target)  # (compacted since)
                if snap is not None and snap.seq > start:
                    record = await self.decode_snapshot(agent_id, snap)
                    return await self.fold_from(record, agent_id, head, target, tag, at_head)
            raise error from None
        if tuner is not None:  # snapshot_every="auto": the replay cost per event (r)
            tuner.replayed(thread_time() - began, record.seq - start)
        if record.seq == 0:
            raise AgentNotFound(agent_id)
        if at_head:
            self.codec.check_head(agent_id, head, record.link, tag)
            record.tag, record.tag_known = tag, record.link is not None
        record.fresh = True
        return record

    async def catch_up(self, record: AgentRecord, target: int) -> None:
        """Apply stored events ``record.seq+1 .. target`` to ``record`` in place."""
        agent_id = record.agent_id
        while record.seq < target:
            events = event_rows(
                await self.backend.read(agent_id, record.seq, target, limit=PAGE * 10)
            )
            if not events or events[0][0] > record.seq + 1:
                first = await self.backend.read(agent_id, 0, None, limit=1)
                if first and first[0].seq - 1 > record.seq:
                    # retention removed the history up to it — after a snapshot too (a
                    # settle's below the base; one read before it: fold_from goes on)
                    raise await base_error(self, agent_id, first[0].seq - 1)
                if not first and record.seq == 0 and await self.backend.head(agent_id) == 0:
                    raise AgentNotFound(agent_id)  # deleted since its head was read
            if not events:
                raise IntegrityError(
                    agent_id, record.seq + 1, f"stream ends at seq {record.seq}, head is {target}"
                )
            self.apply_events(record, events)

    def apply_events(self, record: AgentRecord, events: list[EventRow]) -> None:
        """Fold stored events (:data:`EventRow` tuples, as an engine's cursor returns
        them) into ``record`` in place (verifying each one and the chain).

        The events are verified in one codec call (:meth:`Codec.decode_chain`), and a
        run of events that each append one value to the same list (a chat's messages)
        appends to that list, found once, instead of patching the document event by
        event: replay was ~6 us per event, ~2/3 of it Python calls around the SHA-256
        and the parse (cProfile, docs/benchmarks.md "load11"). A run whose every event
        appends to one list (:meth:`Codec.decode_appends`) is verified and applied with
        no Python step per event: the list is extended once (:func:`extend_list`;
        docs/benchmarks.md, "coldk"). Errors are raised in stream order, as a loop over
        the events would raise them.
        """
        agent_id = record.agent_id
        current = record.seq
        count = len(events)
        start = 0
        while start < count and events[start][0] <= current:
            # a concurrent catch-up of the same cached record (readers do not take the
            # agent lock) applied it while this read was in flight
            start += 1
        stop = start
        while stop < count and events[stop][0] == current + 1 + stop - start:
            stop += 1
        gap: StatekeeperError | None = None
        if stop < count:
            seq, last = events[stop][0], current + stop - start
            gap = (
                HistoryCompacted(agent_id, seq - 1)  # retention removed the history before it
                if last == 0
                else IntegrityError(agent_id, last + 1, f"gap: next stored seq is {seq}")
            )
        run = events[start:stop] if start or gap is not None else events
        appended = self.codec.decode_appends(agent_id, run, record.link)
        if appended is not None and extend_list(record, run, appended[0], appended[1]):
            record.link, record.checksum, record.tag_known = appended[2], run[-1][4], False
        elif run:
            docs, link, typed, error = self.codec.decode_chain(
                agent_id, run, record.link, appends=True
            )
            record.tag_known = False
            try:
                apply_payloads(record, run, docs)
            except BaseException:
                record.link = None  # (partly folded: the record is dropped by its reader)
                raise
            if docs:
                record.link = link
                record.checksum = run[len(docs) - 1][4]
                if typed:
                    record.rich = True
            if error is not None:
                raise error
        if gap is not None:
            raise gap

    # -- the latest state ----------------------------------------------------------

    async def refresh(self, record: AgentRecord) -> bool:
        """Bring a cached record up to date with storage, in one indexed read when
        nothing changed. False when the stream it was folded from is gone: deleted, or
        deleted and re-created (a head seq alone cannot tell that a stream was re-created
        up to the same seq, so the event at the cached seq must still be the same one)."""
        agent_id = record.agent_id
        events = event_rows(await self.backend.read(agent_id, record.seq - 1, None, limit=PAGE))
        same = next((e for e in events if e[0] == record.seq), None)
        if same is None or same[2] != record.updated_at:
            return False
        if record.checksum is not None and same[4] != record.checksum:
            return False  # rewritten (re-encrypted) or replaced: fold it again, verified
        while True:
            self.apply_events(record, events)
            if len(events) < PAGE:
                return True
            events = event_rows(await self.backend.read(agent_id, record.seq, None, limit=PAGE))

    def trusted(self, agent_id: str) -> AgentRecord | None:
        """The cached record of ``agent_id`` a write may be made on without reading the
        head first (its stored head tag is known), else None."""
        record = self.pinned.get(agent_id) or self.cache.get(agent_id)
        return record if record is not None and record.tag_known else None

    async def current(self, agent_id: str, *, cached: bool = False) -> AgentRecord | None:
        """The latest folded state (private), or None; ``cached``: served unvalidated."""
        found = self.current_now(agent_id, cached)
        if found is None or type(found) is AgentRecord:
            return found
        assert not isinstance(found, (AgentRecord, Snapshot))  # (a Snapshot: bare= only)
        return await found

    def current_now(
        self, agent_id: str, cached: bool = False, bare: bool = False
    ) -> AgentRecord | Snapshot | Coroutine[Any, Any, AgentRecord | None] | None:
        """:meth:`current` as a plain call: the record (or None) when it is answered
        without waiting — pinned, cached and trusted, or read inline (SQLite) and folded
        on the thin path: every cold load — else the coroutine that finishes it (a
        validation read, a read that is not inline, the general fold, a rollback's
        checks), which the caller awaits. A cold load then makes no coroutine
        (docs/benchmarks.md, "cold5"). ``bare``: the caller's :class:`Snapshot` may be
        the answer (``at_snapshot``'s ``bare``: a load at a whole snapshot, no cache)."""
        pinned = self.pinned.get(agent_id)
        if pinned is not None:
            return pinned
        cache = self.cache
        record = cache.get(agent_id)
        if record is not None:
            return record if cached or not self.validate else self._refreshed(record)
        if not self.native_state:
            return self._current_read(agent_id)
        now = self.state_now
        if self._state_of is not self.backend:  # (swapped: an observer's wrapper, or back)
            self._state_of = self.backend
            now = self.state_now = _inline_state(self.backend)
            self.chain_now = _inline_base(self.backend, now)
            self.at_now = _inline_base(self.backend, now, "snapshots_at_now")
        if now is None:
            return self._current_read(agent_id)
        head, tag, snap, events = now(agent_id)  # one read: head, latest snapshot, events
        if head == 0:
            return vanished(cache, agent_id, self.ask) if cache.gone else None
        # an agent the witness marked: a record (its link), compared with the mark here
        marked = self.marked is not None and self.marked(agent_id, head, tag)
        thin = (
            self.at_snapshot(agent_id, head, tag, snap, events, bare and not marked)
            if events or (snap is not None and snap.seq == head)
            else None
        )
        if type(thin) is AgentRecord and not cache.gone:
            if marked and self.unheld is not None and self.unheld(thin):  # (not the mark's)
                return self._folded(agent_id, head, tag, snap, events, thin)
            cache.put(agent_id, thin)
            return thin
        if thin is not None and type(thin) is not AgentRecord:
            return thin  # (a Snapshot: bare, made straight from the snapshot)
        return self._folded(agent_id, head, tag, snap, events, thin)

    async def _refreshed(self, record: AgentRecord) -> AgentRecord | None:
        """:meth:`current` of a cached record that is validated first."""
        agent_id = record.agent_id
        try:
            if await self.refresh(record):
                return record
        except StatekeeperError:
            self.cache.discard(agent_id)
            raise
        self.cache.discard(agent_id)
        return await self._current_read(agent_id)

    async def _current_read(self, agent_id: str) -> AgentRecord | None:
        """:meth:`current` read from the backend (no pinned or cached record)."""
        if self.native_state:  # one read: the head, the latest snapshot, the events after
            now = self.state_now
            if self._state_of is not self.backend:  # (swapped: an observer's wrapper, or back)
                self._state_of = self.backend
                now = self.state_now = _inline_state(self.backend)
                self.chain_now = _inline_base(self.backend, now)
                self.at_now = _inline_base(self.backend, now, "snapshots_at_now")
            head, tag, snap, events = (
                now(agent_id) if now is not None else await self.backend.read_state_rows(agent_id)
            )
            if head == 0:
                return await vanished(self.cache, agent_id, self.ask) if self.cache.gone else None
            thin = (
                self.at_snapshot(agent_id, head, tag, snap, events)
                if events or (snap is not None and snap.seq == head)
                else None
            )
            return await self._folded(agent_id, head, tag, snap, events, thin)
        (head, tag), events = await self.backend.head_tag(agent_id), []  # (none read)
        if head == 0:
            return await vanished(self.cache, agent_id, self.ask) if self.cache.gone else None
        record = await self.fold(agent_id, head, head, tag, at_head=True)
        return await self._folded(agent_id, head, tag, None, events, record)

    async def _folded(
        self,
        agent_id: str,
        head: int,
        tag: bytes | None,
        snap: RawSnapshot | None,
        events: list[EventRow],
        record: AgentRecord | None,
    ) -> AgentRecord:
        """:meth:`current`'s end: ``record`` (None: folded the general way from the read
        ``snap`` and ``events``) checked against a rollback and cached."""
        if record is None:
            record = await self.fold(agent_id, head, head, tag, at_head=True, latest=(snap, events))
        if self.cache.gone:  # a state dropped as no longer stored: a rollback?
            await check_seen(self.cache, self.backend, record, events)
        if self.held is not None:  # the witness's mark of it: still what is stored?
            await self.held(record, events)
        self.cache.put(agent_id, record)
        return record

    async def current_many(self, agent_ids: Sequence[str]) -> list[AgentRecord | None]:
        """:meth:`current` of many agents, in order. The agents neither pinned nor cached
        are read together (:meth:`Backend.read_latest_many`: one consistent read on
        engines that answer it natively) and folded; the others as :meth:`current`."""
        if not self.backend.reads_latest_many:
            return [await self.current(agent_id) for agent_id in agent_ids]
        out: dict[str, AgentRecord | None] = {}
        cold = [a for a in agent_ids if a not in self.pinned and a not in self.cache]
        for agent_id, read in zip(cold, await self.backend.read_latest_many(cold), strict=True):
            if read is None:
                out[agent_id] = await vanished(self.cache, agent_id, self.ask)  # (a rollback?)
                continue
            record = await self.fold_latest(agent_id, read)
            await check_seen(self.cache, self.backend, record, event_rows(read.events))
            if self.held is not None:
                await self.held(record, event_rows(read.events))
            self.cache.put(agent_id, record)
            out[agent_id] = record
        return [
            out[agent_id] if agent_id in out else await self.current(agent_id)
            for agent_id in agent_ids
        ]

    async def fold_latest(self, agent_id: str, read: LatestRead) -> AgentRecord:
        """The agent's state at its head from what :meth:`Backend.read_latest_many`
        read of it (reading more only when the stream is longer than it returned); on
        the thin path (:meth:`at_snapshot`) when it can be."""
        snap, events = read.snapshot, event_rows(read.events)
        if events or (snap is not None and snap.seq == read.head):
            thin = self.at_snapshot(agent_id, read.head, read.tag, snap, events)
            if thin is not None:
                return thin
        return await self.fold(
            agent_id, read.head, read.head, read.tag, at_head=True, latest=(snap, events)
        )

    async def at(self, agent_id: str, at_seq: int | None, at_time: float | None) -> AgentRecord:
        """The state of ``agent_id`` at ``at_seq``, or at time ``at_time``."""
        head, tag = await self.backend.head_tag(agent_id)
        if head == 0:
            raise AgentNotFound(agent_id)
        if at_time is not None:
            at_seq = await self.backend.seq_at(agent_id, at_time)
            if at_seq == 0:
                return await before_stored(self, agent_id, head, at_time, tag)
        assert at_seq is not None
        if not 1 <= at_seq <= head:
            raise ConfigurationError(f"seq {at_seq} is outside 1..{head} for agent {agent_id!r}")
        return await self.fold(agent_id, head, at_seq, tag, at_head=at_seq == head)

    def forget(self, agent_id: str) -> None:
        """Drop what is cached or pinned of ``agent_id``."""
        self.cache.forget(agent_id)
        self.pinned.pop(agent_id, None)

    def kept(self, record: AgentRecord) -> bool:
        """``record`` is the one cached or pinned for its agent (later reads share it)."""
        agent_id = record.agent_id
        return self.cache.peek(agent_id) is record or self.pinned.get(agent_id) is record

    #: the caller's copy of a folded state (:func:`.copies.public_copy`, a method)
    public = public_copy
