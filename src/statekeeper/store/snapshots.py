"""When a snapshot is stored with an append, and how it is encoded.

A snapshot is the folded state at a seq, stored so that a load replays only the events
after it. One is due with an event once the replay a load would do from the last one
has reached its bound, in events (``snapshot_every``), in stored bytes
(``snapshot_bytes``) or in cost (``snapshot_every="cost"``); it is written in the same
atomic append as that event.

By replay cost (``snapshot_every="cost"``, opt-in; the default, ``"bounded"``, is the
same rule with a larger fixed allowance, below):
a load decodes the latest snapshot
(cost ~ its stored bytes) and then each event after it (cost ~ its stored bytes plus a
fixed :data:`EVENT_COST` for the row, the checksum, the parse and the patch, measured in
the same byte units: ~4-5 us per event against ~1 us per KiB of snapshot on the
benchmark machine). A snapshot is due once the replay costs as much as decoding the
last snapshot (at least :data:`MIN_COST`: a small state is not snapshotted every other
event), and after :data:`COST_MAX_EVENTS` events
whatever the cost. So a load at any head does at most about twice the work of a load
at a snapshot, whatever the state's size, and the snapshots cost each event about
``event bytes + EVENT_COST`` bytes of snapshot written — the size of the change, not
of the state. Keeping the head state
materialised with every event instead would write the whole state with each one.
The default, ``snapshot_every="bounded"``, weighs the replay the same way against the
last snapshot's bytes plus :data:`BOUNDED_LOAD_COST` (256 KiB of replay-equivalent
work, the fixed cost a load may add to its snapshot's decode): a default-configured load
never replays more than that nor more than :data:`COST_MAX_EVENTS` events, and an agent
saved fewer than ~50 times (small events) writes no snapshot, as under ``every=100``. A
number ``snapshot_every=K`` stores one every K events exactly (and by
``snapshot_bytes``), whatever they cost.

A whole snapshot of a state that a save holds as the packed bytes of its top-level
values (:mod:`.change`) is those bytes, in msgpack (:func:`.body.packed_snapshot_body`):
nothing is unpacked and serialised again, so a snapshot costs its checksum and its
storing. ``snapshot_every="auto"`` applies Young's optimal interval instead, from the
snapshot cost, replay cost per event and cold loads per append the store measures itself
(:mod:`.autotune`); until it has measured them it applies the replay-cost rule above.
``benchmarks/bench_snapshot_sweep.py`` compares it with fixed intervals on the CPU of a
save plus a cold load per step. Every
``full_snapshot_every``-th snapshot is stored whole, the others as a JSON Patch against
the latest whole one (a *delta*), whose data the record keeps at hand
(``AgentRecord.full_data``).
"""

from __future__ import annotations

import logging
from time import thread_time
from typing import Any

from .. import patch
from ..backends.base import Backend
from ..codec import Codec
from ..codec.formats import MSGPACK
from ..errors import IntegrityError, SerializationError, StateTooLarge
from ..records import RawSnapshot
from .autotune import MAX_EVENTS, AutoInterval
from .body import SNAPSHOT_TYPE, packed_snapshot_body, snapshot_body
from .reads import ReadPath
from .state import AgentRecord, document, unpack_document
from .tails import MAX_TAILS, TAIL_EVERY, TailBase, resolved, tail_body, tail_marked, whole_base
from .verification import _reason

__all__ = [
    "AUTO_EVENT_COST",
    "AUTO_MAX_EVENTS",
    "AUTO_MIN_COST",
    "BOUNDED_LOAD_COST",
    "COST_MAX_EVENTS",
    "EVENT_COST",
    "MIN_COST",
    "Marks",
    "SnapshotPolicy",
    "mark_snapshot",
]

_log = logging.getLogger("statekeeper.store")

#: the replay-cost rule: the fixed cost of replaying one event, in stored bytes
EVENT_COST = 4096
#: ... the least replay cost that makes a snapshot due: a state smaller than this is
#: snapshotted after about ``MIN_COST / (event bytes + EVENT_COST)`` events (~7), not
#: every other one: its load stays cheap in absolute terms (~32 KiB-equivalent of
#: replay at most) and its saves pay few snapshots (measured: docs/benchmarks.md,
#: "Snapshots by replay cost")
MIN_COST = 32 * 1024
#: ... and the most events a load replays, whatever their cost
COST_MAX_EVENTS = 100
#: ``snapshot_every="auto"`` until it has measured: the same rule with a smaller least
#: cost (a tiny state every other event: what the sweep in docs/benchmarks.md found
#: best when every save is followed by a cold load), and the same event bound
AUTO_MIN_COST = 8 * 1024
AUTO_MAX_EVENTS = COST_MAX_EVENTS
#: (the name the per-event cost had when only ``"auto"`` applied the rule)
AUTO_EVENT_COST = EVENT_COST
#: the default (``snapshot_every="bounded"``): a snapshot is due once the replay a load
#: would do from the last one costs as much as decoding that snapshot plus this much
#: (the same byte units as :data:`EVENT_COST`), and after :data:`COST_MAX_EVENTS` events
#: whatever the cost. Chosen as the default ``snapshot_bytes`` (256 KiB): a chat whose
#: saves append ~450-byte messages then snapshots every ~57 events while small and every
#: ~64 at 33 KB (``every=100``: 100), while an agent saved fewer than ~50 times — every
#: agent of ``bench_hotpath.py``'s workloads — writes no snapshot at all, as before: a
#: smaller constant bounds the load tighter but adds a snapshot to those saves' bytes
#: (docs/benchmarks.md, "cold11")
BOUNDED_LOAD_COST = 256 * 1024

#: what storing a snapshot changes in the record it was taken of: (snapshot_seq,
#: full_seq, full_link, full_data, deltas, stored bytes of the latest whole snapshot,
#: replay bytes after it, tail_base)
Marks = tuple[int, int, bytes | None, Any, int, int, int, "TailBase | None"]


def mark_snapshot(record: AgentRecord, marks: Marks) -> None:
    """Remember, once stored, the snapshot :meth:`SnapshotPolicy.encode` made."""
    (
        record.snapshot_seq,
        record.full_seq,
        record.full_link,
        record.full_data,
        record.deltas,
        record.snapshot_bytes,
        record.replay_bytes,
        record.tail_base,
    ) = marks


class SnapshotPolicy:
    """The snapshot options of a store, and the encoding of its snapshots."""

    def __init__(
        self,
        backend: Backend,
        codec: Codec,
        reads: ReadPath,
        *,
        every: int | str,
        max_replay_bytes: int | None,
        full_every: int,
        max_bytes: int | None,
    ) -> None:
        self.backend = backend
        self.codec = codec
        self.reads = reads
        #: snapshot_every="auto": Young/Daly from measurements (:mod:`.autotune`); before
        #: they exist, weigh the replay against the last snapshot's size
        self.auto = every == "auto"
        self.tuner: AutoInterval | None = AutoInterval() if self.auto else None
        reads.tuner = self.tuner
        #: snapshot_every="cost" / "bounded" (and "auto" until it has measured): by
        #: replay cost — ``replay bytes + event_cost * events >= max(snapshot bytes +
        #: cost_base, min_cost)`` (a plain rule of the record's fields, which the flat
        #: save applies inline: :mod:`.flat`)
        self.by_cost = every in ("cost", "bounded") or self.auto
        self.event_cost = EVENT_COST if self.by_cost else 0
        self.cost_base = BOUNDED_LOAD_COST if every == "bounded" else EVENT_COST
        self.min_cost = AUTO_MIN_COST if self.auto else 0 if every == "bounded" else MIN_COST
        self.every: int = (
            MAX_EVENTS
            if every == "auto"
            else COST_MAX_EVENTS
            if every in ("cost", "bounded")
            else int(every)
        )
        self.max_replay_bytes = max_replay_bytes
        self.full_every = full_every
        self.max_bytes = max_bytes
        #: tail snapshots (:mod:`.tails`): ``"bounded"`` and a number of events above
        #: ``2 * TAIL_EVERY``, whole snapshots only, on an engine that reads a chain of
        #: them inline (elsewhere a load would resolve one by a read per tail: more round
        #: trips than the one read of the events). Whole snapshots keep their rule and
        #: ``snapshot_seq``; a tail is due ``TAIL_EVERY`` events past ``tail_base``
        self.tails = (
            full_every == 1
            and not self.auto
            and getattr(type(backend), "snapshots_now", None) is not None
            and (every == "bounded" or (type(every) is int and every > 2 * TAIL_EVERY))
        )
        #: the snapshot :meth:`due` found due is a tail (read by :meth:`encode`, which
        #: the save calls right after, with no await between)
        self.next_tail = False
        #: a cold load keeps the base of the next tails too (store/tails.py)
        reads.tails = self.tails

    def due(self, record: AgentRecord, seq: int) -> bool:
        """A snapshot is due with the event at ``seq`` on ``record``: the replay a load
        would do from the last snapshot has reached its bound, in events or in bytes."""
        self.next_tail = False
        events = seq - record.snapshot_seq
        if events >= self.every or (
            self.max_replay_bytes is not None and record.replay_bytes >= self.max_replay_bytes
        ):
            return True
        if not self.by_cost:
            return self._tail_due(record, seq)
        tuner = self.tuner
        if tuner is not None:
            tuner.appends += 1  # E: appends between cold loads
            if tuner.events is not None:  # measured: Young's (or Daly's) interval
                return events >= tuner.events
            if events >= AUTO_MAX_EVENTS:
                return True
        if record.replay_bytes + EVENT_COST * events >= max(
            record.snapshot_bytes + self.cost_base, self.min_cost
        ):
            return True
        return self._tail_due(record, seq)

    def _tail_due(self, record: AgentRecord, seq: int) -> bool:
        """A tail snapshot is due (when no whole one is): :data:`TAIL_EVERY` events went
        by since the latest snapshot of either kind, whose bytes are at hand
        (``tail_base``, set only when :attr:`tails`: the flat save hands a save on by
        the same test), and the chain is short enough (:data:`MAX_TAILS`)."""
        base = record.tail_base
        if (
            base is None
            or seq - base[0] < TAIL_EVERY
            or record.deltas >= MAX_TAILS
            or record.dumped is None  # (a save that holds no packed bytes: no tail)
            or record.rich
            or resolved(record) is None  # (a base read cold that does not split: none)
        ):
            return False
        self.next_tail = True
        return True

    def encode_timed(self, record: AgentRecord) -> tuple[RawSnapshot, Marks]:
        """:meth:`encode`, timed for ``snapshot_every="auto"`` (the snapshot cost C:
        two clock reads, only when a snapshot is due)."""
        tuner = self.tuner
        if tuner is None:
            return self.encode(record)
        began = thread_time()
        encoded = self.encode(record)
        tuner.snapshotted(thread_time() - began)
        return encoded

    def needs_prepare(self, record: AgentRecord) -> bool:
        """:meth:`prepare` has something to fetch before an append after ``record``."""
        return record.link is None or (self.full_every > 1 and record.full_data is None)

    def encode(self, record: AgentRecord) -> tuple[RawSnapshot, Marks]:
        """Encode a snapshot of ``record`` — whole, or as a delta against the latest
        whole one — and say what to remember once it is stored (see mark_snapshot)."""
        if self.next_tail:
            self.next_tail = False
            tail = self._encode_tail(record)
            if tail is not None:
                return tail
        delta = (
            self.full_every > 1
            and record.full_data is not None
            and record.full_link is not None
            and 0 < record.full_seq < record.seq
            and record.deltas + 1 < self.full_every
        )
        tune = self.tuner.carried() if self.tuner is not None else None
        # a whole snapshot of a state a save holds as packed bytes: those bytes (msgpack)
        plaintext = None if delta else packed_snapshot_body(record, tune)
        fmt: int | None = MSGPACK
        if plaintext is None:
            fmt = None  # the codec's format
            body = snapshot_body(
                record, patch.diff(record.full_data, document(record)) if delta else None, tune
            )
            plaintext = self.codec.serialize(body, "state")
        if self.max_bytes is not None and len(plaintext) > self.max_bytes:
            raise StateTooLarge(record.agent_id, "snapshot", len(plaintext), self.max_bytes)
        if record.link is None:  # pragma: no cover - prepare() found it
            raise IntegrityError(record.agent_id, record.seq, "the chain link is unknown")
        raw = self._seal(record, plaintext, record.link, fmt)
        if delta:
            return raw, (
                record.seq,
                record.full_seq,
                record.full_link,
                record.full_data,
                record.deltas + 1,
                len(raw.payload),
                0,
                None,
            )
        full_data = None
        if self.full_every > 1:  # a private copy, the base of the next deltas
            if fmt == MSGPACK:
                assert record.dumped is not None
                full_data = unpack_document(record.dumped)
            else:
                full_data = self.codec.deserialize(plaintext, record.agent_id, record.seq)["data"]
        return raw, (
            record.seq,
            record.seq,
            record.link,
            full_data,
            0,
            len(raw.payload),
            0,
            whole_base(record.seq, record.link, record.dumped)
            if fmt == MSGPACK and self.tails and record.dumped is not None
            else None,
        )

    def _seal(
        self, record: AgentRecord, plaintext: bytes, link: bytes, fmt: int | None
    ) -> RawSnapshot:
        """``plaintext``, the snapshot body of ``record``, sealed at its seq and link."""
        sealed = self.codec.seal(
            record.agent_id, record.seq, SNAPSHOT_TYPE, record.updated_at, plaintext, link, fmt=fmt
        )
        return RawSnapshot(record.seq, record.updated_at, sealed.payload, sealed.checksum)

    def _encode_tail(self, record: AgentRecord) -> tuple[RawSnapshot, Marks] | None:
        """A tail snapshot of ``record`` (:mod:`.tails`), or None (its bytes are not at
        hand: the caller stores a whole one)."""
        plaintext = tail_body(record)
        if plaintext is None or record.link is None:
            return None
        if self.max_bytes is not None and len(plaintext) > self.max_bytes:
            return None  # (a whole one says StateTooLarge if it is)
        raw = self._seal(record, plaintext, record.link, MSGPACK)
        return raw, (  # (the whole one's seq, bytes and replay kept: its rule goes on)
            record.snapshot_seq,
            record.full_seq,
            record.full_link,
            record.full_data,
            record.deltas + 1,
            record.snapshot_bytes,
            record.replay_bytes,
            tail_marked(record),
        )

    async def prepare(self, record: AgentRecord) -> None:
        """Before appending after ``record``: make sure its chain link is known (a
        record folded from a version-0 snapshot at the head has none) and, when a
        delta snapshot is due, that the data of its base snapshot is at hand."""
        agent_id = record.agent_id
        if record.link is None:
            events = await self.backend.read(agent_id, record.seq - 1, record.seq)
            if not events or events[0].seq != record.seq:
                raise IntegrityError(agent_id, record.seq, "the event at the head is missing")
            record.link = self.reads.open_event(agent_id, events[0])[1].link
        if (
            self.full_every > 1
            and record.full_data is None
            and 0 < record.full_seq <= record.seq
            and self.due(record, record.seq + 1)
        ):
            await self._load_base(record)

    async def _load_base(self, record: AgentRecord) -> None:
        """Load the data of ``record``'s latest full snapshot (for delta snapshots); if
        it cannot be had, forget it so that the next snapshot is stored whole."""
        agent_id = record.agent_id
        raw = await self.backend.latest_snapshot(agent_id, record.full_seq)
        if raw is not None and raw.seq == record.full_seq:
            try:
                body, opened = self.reads.open_snapshot(agent_id, raw)
                if opened.prev is not None and opened.prev == record.full_link:
                    record.full_data = await self.reads.snapshot_data(agent_id, raw.seq, body)
                    return
            except (IntegrityError, SerializationError) as exc:  # damaged: store whole
                _log.warning(
                    "agent %r: base snapshot at seq %d is unusable (%s); the next snapshot"
                    " is stored whole",
                    agent_id,
                    raw.seq,
                    _reason(exc),
                )
        record.full_seq, record.full_link, record.full_data, record.deltas = 0, None, None, 0
