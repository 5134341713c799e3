"""The durable vocabulary: events, snapshots, and the encoded records backends store.

Two layers of types live here:

* :class:`Event` and :class:`Snapshot` are what users see: decoded, verified values.
* :class:`RawEvent`, :class:`RawSnapshot`, :class:`AppendRequest`,
  :class:`AppendResult` and :class:`AgentInfo` are what a backend sees: opaque
  payload bytes plus the few identifiers it must index (agent id, seq, type,
  timestamp). A backend never interprets a payload.

Vocabulary (one word per concept, in code, docs and the CLI; ARCHITECTURE.md has the
same table):

* **type**: what kind of event it is (``"transition"``, ``"patch"``, a custom name):
  :attr:`Event.type`, :attr:`RawEvent.type`, :class:`EventType`, ``event_type=``
  arguments, ``event_types=`` filters. Was also "kind" (``EventKind``,
  ``RawEvent.kind``); the stored column and field are still named ``kind``.
* **info**: the caller's free-form mapping on an event (``append(..., info)``,
  ``record(type, info)``, :attr:`Event.info`, ``"info"`` in ``history --json``).
  Was ``Event.data``, and ``body`` inside the write path.
* **data**: an agent's data document (:attr:`Snapshot.data`, ``agent.data``); only
  that. An event's change to it is its ``ops`` (JSON Patch).
* **state**: an agent's FSM state plus data at a seq. The value :meth:`load` returns
  is a :class:`Snapshot` (the seed's and LangGraph's word for a read of the state),
  whether or not it was read from a stored snapshot; ``fsm_state`` is the machine's
  state alone.
* **snapshot** (stored): a fold written into the stream at a seq so a load need not
  replay from seq 1 (:class:`RawSnapshot`, ``snapshot_every``, ``store.snapshot()``;
  *whole* or a *delta*). A database's consistent read is called a *consistent read*,
  never a snapshot.
* One value on its way to disk: **info** (the caller's mapping) -> **body** (info plus
  the reserved keys the store writes, :mod:`statekeeper.store.body`; serialized, it is
  still the body: the bytes :meth:`Codec.seal` takes and ``Opened.body`` gives back)
  -> **payload** (the sealed bytes a backend stores, :attr:`RawEvent.payload`).
  ``agent.transition(event, metadata)`` writes ``metadata`` inside the info.
* **type** of a record, in the codec: the event's type, or ``"snapshot"``
  (``SNAPSHOT_TYPE``); bound into the record's checksum and link. ``Codec.seal`` and
  ``Codec.open`` call it ``record_type`` (``kind=`` is their deprecated keyword).
* **timestamp**: when a record was written, epoch seconds as a float
  (:attr:`Event.timestamp`, :attr:`RawEvent.timestamp`, the codec's ``timestamp``
  argument). Was also ``ts`` (a deprecated keyword where it was one); the stored column
  and the export file's field keep the name ``ts``.
* **record**: one stored event or snapshot (its bytes and identifiers);
  **stream**: an agent's records in seq order; **head**: the last seq of a stream.

The types live in this package's modules, one job each: ``decoded`` (:class:`Event`,
:class:`Snapshot`, :class:`EventType`), ``raw`` (the records as a backend stores and
reads them, their rows, a stream's export, :class:`AgentInfo`), ``writes`` (what a
write asks of a backend and what it answers: requests, changes, fences, leases, audit
marks), ``feed`` (the change feed's records) and ``deprecation`` (the old names'
warnings). ``statekeeper.records`` is the public import path of every one of them and
their ``__module__``, so reprs, docs and pickles name it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence  # noqa: F401 (annotations resolve here: see below)
from typing import Any

# (``X as X``: names not in ``__all__``, re-exported all the same)
from .decoded import STEP_KEY_PREFIX, Event, EventType, Snapshot
from .decoded import make_snapshot as make_snapshot
from .feed import FeedEvent, FeedRecord
from .raw import AgentInfo, RawEvent, RawSnapshot
from .raw import EventRow as EventRow
from .raw import SnapshotRow as SnapshotRow
from .raw import StreamExport as StreamExport
from .raw import StreamRows as StreamRows
from .raw import event_rows as event_rows
from .raw import make_raw_snapshot as make_raw_snapshot
from .writes import (
    AppendRequest,
    AppendResult,
    AuditMark,
    Fence,
    LeaseChange,
    LeaseInfo,
    RewriteRequest,
    StreamChange,
)
from .writes import _set_agent_id as _set_agent_id
from .writes import _set_duplicate as _set_duplicate
from .writes import _set_first_seq as _set_first_seq
from .writes import _set_last_seq as _set_last_seq

__all__ = [
    "STEP_KEY_PREFIX",
    "AgentInfo",
    "AppendRequest",
    "AppendResult",
    "AuditMark",
    "Event",
    "EventType",
    "FeedEvent",
    "FeedRecord",
    "Fence",
    "LeaseChange",
    "LeaseInfo",
    "RawEvent",
    "RawSnapshot",
    "RewriteRequest",
    "Snapshot",
    "StreamChange",
]

# Every class and public function keeps ``statekeeper.records`` as its module, as before
# the split: the path a user imports from, that reprs and docs show and that pickles name
# (a pickle made before the split still loads, one made after loads in an older version);
# and the namespace ``typing.get_type_hints`` resolves their annotations in (this one
# holds every name they use: ``Any``, ``Sequence``, ``Fence``, ``EventRow``...).
for _value in (
    AuditMark,
    EventType,
    Event,
    Snapshot,
    make_snapshot,
    RawEvent,
    event_rows,
    RawSnapshot,
    make_raw_snapshot,
    AppendRequest,
    StreamChange,
    LeaseChange,
    RewriteRequest,
    StreamExport,
    StreamRows,
    AppendResult,
    AgentInfo,
    LeaseInfo,
    FeedRecord,
    FeedEvent,
):
    _value.__module__ = __name__
del _value


#: old public names of this module -> their new names (they warn on each access)
_RENAMED = {"EventKind": "EventType"}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"statekeeper.records.{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2
    )
    return globals()[new]
