"""Creating an agent as a stream retention compacted: a base snapshot, then its events.

What ``statekeeper import`` writes for an agent exported after ``retention apply``
with ``keep_last``: the file holds the state at the base (what ``load(at_seq=base)``
returns) and the events after it. The target gets the shape a prune leaves — the
snapshot at the base, no event at or below it — written with the first event after
it in one atomic engine call (``Backend.append_from_base``, capability
``BASE_IMPORT``, as a restore of a backup of a compacted stream writes it); the
later events are plain appends.

The chain link at the base: the source's is not in the file (it is a digest of the
source's own records). A digest of the base's identity and body stands in for it:
the base snapshot and the first event after it both name it, so the stream verifies
from its base as any compacted stream does.
"""

from __future__ import annotations

import copy
import hashlib
from typing import TYPE_CHECKING, Any

from ..arguments import check_new_agent_id, check_ops
from ..backends.base import Capability
from ..records import AppendResult, RawSnapshot, Snapshot
from .body import SNAPSHOT_TYPE, snapshot_body
from .compaction import marked
from .feed_retention import from_base_floored
from .namespaced import stored_id
from .state import AgentRecord
from .writes import check_event_type, check_write_options, event_info

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["create_from_base"]


async def create_from_base(
    store: StateStore,
    agent_id: str,
    base: Snapshot,
    event_type: str,
    info: dict[str, Any],
    ops: list[dict[str, Any]],
    *,
    fsm_state: str | None = None,
    idempotency_key: str | None = None,
    actor: str | None = None,
    schema_version: int | None = None,
    raise_floor: bool = False,
) -> AppendResult:
    """Create ``agent_id`` compacted at ``base.seq``: the base state ``base`` and the
    event (seq ``base.seq + 1``) of ``event_type`` with ``info`` and ``ops``; with
    ``raise_floor`` (an import by a store admin), the change feed's floor raised through
    that event in the same write (:func:`.feed_retention.from_base_floored`).
    :class:`~statekeeper.errors.ConflictError` (nothing written) when it exists;
    :class:`~statekeeper.errors.CapabilityUnsupported` on an engine that cannot."""
    store.backend.require(Capability.BASE_IMPORT, "to create an agent from a base snapshot")
    check_event_type(event_type)
    ops = check_ops(ops)
    check_write_options(idempotency_key, actor, None)
    info = event_info(info)
    await store._ready(agent_id, write=True)  # open, the id, a key where one is needed
    stored = check_new_agent_id(stored_id(store, agent_id))
    codec = store.codec
    record = AgentRecord(
        stored,
        base.seq,
        base.fsm_state,
        base.data,
        base.schema_version,
        base.created_at,
        base.updated_at,
        snapshot_seq=base.seq,
        fsm_entered_at=base.state_entered_at,
        full_seq=base.seq,
        full_data=copy.deepcopy(base.data),
        rich=True,
    )
    plaintext = codec.serialize(marked(snapshot_body(record, None)), "state")
    link = hashlib.sha256(
        b"".join((b"sk-import-base/1\0", stored.encode(), b"\0", str(base.seq).encode(), plaintext))
    ).digest()
    record.link = record.full_link = link
    sealed = codec.seal(stored, base.seq, SNAPSHOT_TYPE, base.updated_at, plaintext, link)
    raw = RawSnapshot(base.seq, base.updated_at, sealed.payload, sealed.checksum)
    writes = store._writes
    async with writes.lock(stored):
        request, _ = writes.build(
            stored,
            event_type,
            info,
            record,
            ops,
            fsm_state,
            idempotency_key,
            actor,
            schema_version,
        )
        result = await from_base_floored(store.backend, request, raw, raise_floor=raise_floor)
    store._reads.forget(stored)  # (nothing cached of it: read it as stored)
    return result
