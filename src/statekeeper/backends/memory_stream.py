"""The in-memory backend's record of one agent's stream."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..records import (
    RawEvent,
    RawSnapshot,
)


@dataclass(slots=True)
class _Stream:
    events: list[RawEvent] = field(default_factory=list)
    snapshots: dict[int, RawSnapshot] = field(default_factory=dict)
    snapshot_seqs: list[int] = field(default_factory=list)
    #: idempotency key -> (first seq, last seq, created_at: epoch seconds)
    keys: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    created_at: float = 0.0
    head_tag: bytes | None = None
    #: events up to this seq were pruned (each slot holds the shared ``_PRUNED``)
    base: int = 0


#: what a pruned event's slot holds (one shared object: a pointer per pruned event)
_PRUNED = RawEvent(0, "pruned", 0.0, b"", b"")
