"""What a backend stores and reads: :class:`RawEvent` and :class:`RawSnapshot` (opaque
payload bytes plus the few identifiers a backend indexes), their plain-tuple rows, a
stream's export (:class:`StreamExport`, :class:`StreamRows`) and the listing's
:class:`AgentInfo`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

from .deprecation import _renamed, deprecated

__all__ = [
    "AgentInfo",
    "EventRow",
    "RawEvent",
    "RawSnapshot",
    "SnapshotRow",
    "StreamExport",
    "StreamRows",
    "event_rows",
    "make_raw_snapshot",
]


@dataclass(frozen=True, slots=True)
class RawEvent:
    """An encoded event as a backend stores it. ``checksum`` covers agent, seq, type,
    payload. ``kind`` (attribute and keyword) is the deprecated name of ``type`` (the
    engines' stored column keeps the name ``kind``)."""

    seq: int
    type: str
    timestamp: float
    payload: bytes
    checksum: bytes

    # written out (as the generated one would be) to take the old keyword too
    @overload
    def __init__(
        self, seq: int, type: str, timestamp: float, payload: bytes, checksum: bytes
    ) -> None: ...
    @overload
    @deprecated("RawEvent(kind=...) is deprecated: use RawEvent(type=...)")
    def __init__(
        self, seq: int, *, kind: str, timestamp: float, payload: bytes, checksum: bytes
    ) -> None: ...
    def __init__(
        self,
        seq: int,
        type: str | None = None,
        timestamp: float | None = None,
        payload: bytes | None = None,
        checksum: bytes | None = None,
        *,
        kind: str | None = None,
    ) -> None:
        if type is None or timestamp is None or payload is None or checksum is None:
            if kind is not None and type is None:
                _renamed("RawEvent(kind=...)", "RawEvent(type=...)")
                type = kind
            missing = [
                name
                for name, value in (
                    ("type", type),
                    ("timestamp", timestamp),
                    ("payload", payload),
                    ("checksum", checksum),
                )
                if value is None
            ]
            if missing:
                raise TypeError(f"RawEvent() missing required arguments: {missing}")
        put = object.__setattr__
        put(self, "seq", seq)
        put(self, "type", type)
        put(self, "timestamp", timestamp)
        put(self, "payload", payload)
        put(self, "checksum", checksum)

    @property
    @deprecated("RawEvent.kind is deprecated: use RawEvent.type")
    def kind(self) -> str:
        """Deprecated name of :attr:`type`."""
        return self.type


def event_rows(events: Sequence[RawEvent]) -> list[EventRow]:
    """``events`` as :data:`EventRow` tuples: what the read path folds (an engine whose
    cursor returns such rows hands them over with no :class:`RawEvent` built per event:
    a Python ``__init__``, ~1 us each)."""
    return [(e.seq, e.type, e.timestamp, e.payload, e.checksum) for e in events]


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    """An encoded snapshot as a backend stores it."""

    seq: int
    timestamp: float
    payload: bytes
    checksum: bytes


# (a hot name of the read path, bound here by assignment as in decoded.py, not imported:
# make_raw_snapshot runs on every cold load at a snapshot)
_new = object.__new__


def make_raw_snapshot(seq: int, timestamp: float, payload: bytes, checksum: bytes) -> RawSnapshot:
    """A :class:`RawSnapshot`, as ``RawSnapshot(...)`` builds it, through the slots'
    setters (see :func:`make_snapshot`): what an engine's read of a snapshot row makes
    (every cold load at a snapshot)."""
    raw = _new(RawSnapshot)
    _raw_seq(raw, seq)
    _raw_timestamp(raw, timestamp)
    _raw_payload(raw, payload)
    _raw_checksum(raw, checksum)
    return raw


_raw_seq = vars(RawSnapshot)["seq"].__set__
_raw_timestamp = vars(RawSnapshot)["timestamp"].__set__
_raw_payload = vars(RawSnapshot)["payload"].__set__
_raw_checksum = vars(RawSnapshot)["checksum"].__set__


@dataclass(frozen=True, slots=True)
class StreamExport:
    """A slice of one agent's stream as stored, for backups
    (:meth:`~statekeeper.backends.base.Backend.export_streams`): the events with
    ``after_seq <= seq <= to_seq`` (the event *at* ``after_seq`` included, so a reader
    can check the stream still continues the one it copied before), the latest snapshot
    at or below ``to_seq``, the stored head and head tag, and the idempotency keys as
    ``(key, first_seq, last_seq)``."""

    agent_id: str
    head: int
    head_tag: bytes | None
    events: list[RawEvent]
    snapshot: RawSnapshot | None
    keys: list[tuple[str, int, int]]


#: an event as stored, as a plain tuple: ``(seq, type, timestamp, payload, checksum)``
EventRow = tuple[int, str, float, bytes, bytes]
#: a snapshot as stored, as a plain tuple: ``(seq, timestamp, payload, checksum)``
SnapshotRow = tuple[int, float, bytes, bytes]


class StreamRows(NamedTuple):
    """:class:`StreamExport` with its records as plain tuples, what a backup packs
    (:meth:`~statekeeper.backends.base.Backend.export_rows`): no object per record, so
    an engine can hand over its rows as it reads them."""

    agent_id: str
    head: int
    head_tag: bytes | None
    events: list[EventRow]
    snapshot: SnapshotRow | None
    keys: list[tuple[str, int, int]]
    #: a stream compacted by retention: its base snapshot (the events start after it);
    #: filled by readers that need it (a restore of a file backup), else None
    base: SnapshotRow | None = None


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """A row of :meth:`Backend.list_agents`: an agent and its stream head."""

    agent_id: str
    head_seq: int
    created_at: float
    updated_at: float
