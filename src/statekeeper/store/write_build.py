"""Step 2 of a write (see :mod:`.writes`): :meth:`WriteBuild.build` encodes the event
(and a snapshot when one is due) into an :class:`~statekeeper.records.AppendRequest`
and computes the state after it.
"""

from __future__ import annotations

from typing import Any

import orjson

from .. import patch
from ..arguments import check_new_agent_id
from ..backends.base import StoreRequest
from ..codec import ZERO_LINK
from ..codec.depth import check_ops_depth
from ..codec.formats import JSON
from ..codec.pipeline import BLAKE3_FROM
from ..errors import IntegrityError, StateTooLarge
from ..records import AppendRequest, Fence, RawEvent
from . import idempotency
from .body import event_body, next_record
from .snapshots import mark_snapshot
from .state import HELD_AS_BYTES, AgentRecord, document
from .write_base import WriteBase

__all__ = ["WriteBuild"]

_loads = orjson.loads
_dumps = orjson.dumps


class WriteBuild(WriteBase):
    """Builds an append (see the module docstring)."""

    def build(
        self,
        agent_id: str,
        event_type: str,
        info: dict[str, Any],
        record: AgentRecord | None,
        ops: list[dict[str, Any]],
        fsm: str | None,
        idempotency_key: str | None,
        actor: str | None,
        schema_version: int | None,
        fence: Fence | None = None,
        packed: dict[str, bytes] | None = None,
        plain_ops: bool = False,
        after: Any = None,
    ) -> tuple[AppendRequest, AgentRecord]:
        """Encode one event (and a snapshot when due); compute the state after it.

        ``packed``: the packed bytes of each top-level value of the data after the
        event, when the caller made them (a save's change detection): the new state is
        then held as those bytes, nothing decoded or applied. Otherwise the event's ops
        are applied to a copy-on-write of the data, their values decoded from the
        event's bytes (so that the state shares nothing with the caller's objects).

        ``plain_ops``: the values the ops carry are known to be plain JSON without
        floats or tags (:func:`.change.plain`): with no caller ``info``, the
        event is then serialised without walking it for typed values first.

        ``after``: the data after the ops, made by the caller and handed over (see
        :meth:`append_applied`): kept as the new state when the event is plain JSON,
        instead of applying the ops to a copy of the data again."""
        if record is None:  # an agent created: its id must be a normal one
            check_new_agent_id(agent_id)
        if ops:
            moves = any(op.get("op") in ("move", "copy") for op in ops) and record is not None
            check_ops_depth(agent_id, ops, document(record) if moves and record else None)
        base = record.seq if record is not None else 0
        seq = base + 1
        now = self.clock()
        if record is not None and now < record.updated_at:
            # A stream's times never go back: a wall clock stepped back (NTP, a resumed
            # VM, another writer's clock behind) stamps the event with its head's time,
            # so time travel never shows a state after an event stamped later, nor a
            # TTL purge take an agent written just now for one idle since then.
            now = record.updated_at
        codec = self.codec
        body = event_body(
            info, ops, fsm=fsm, schema_version=schema_version, actor=actor, key=idempotency_key
        )
        body_bytes = None
        if plain_ops and not info and codec.format.id == JSON:
            try:
                body_bytes = _dumps(body)  # what Format.dumps makes of a plain document
            except TypeError:  # (a key that is not a str...): the codec says what is wrong
                body_bytes = None
        if body_bytes is None:
            body_bytes = codec.serialize(body, "event")
        if self.max_event_bytes is not None and len(body_bytes) > self.max_event_bytes:
            raise StateTooLarge(agent_id, "event", len(body_bytes), self.max_event_bytes)
        prev = record.link if record is not None else ZERO_LINK
        if prev is None:  # pragma: no cover - prepare() found it
            raise IntegrityError(agent_id, base, "the chain link of the head is unknown")
        if (sealer := self.sealer) is not None and len(body_bytes) < BLAKE3_FROM:
            # (the plain codec's seal bound once, as save_fast seals: the same bytes
            # without seal's checks of its arguments, ~60 bytecodes of a new agent's
            # first save)
            payload, link = sealer(agent_id, seq, event_type, now, body_bytes, prev)
            checksum = link
        else:  # (Sealed is a NamedTuple: unpacked in one step)
            payload, checksum, link = codec.seal(agent_id, seq, event_type, now, body_bytes, prev)
        raw = RawEvent(seq, event_type, now, payload, checksum)
        # Copy-on-write: ``record`` stays untouched until the append is acknowledged.
        if record is None:
            new = AgentRecord(agent_id, 0, None, {}, 1, now, now)
        else:
            new = next_record(record)
        new.link = link
        new.checksum = checksum
        new.replay_bytes = (record.replay_bytes if record is not None else 0) + len(payload)
        plain = codec.format.id == JSON and not (0x24 in body_bytes and b'"$t"' in body_bytes)
        if ops and packed is not None and plain and not new.rich:
            new.data, new.dumped, new.blob = HELD_AS_BYTES, packed, None
        elif ops and after is not None and plain and not new.rich:
            new.data, new.dumped, new.blob, new.shared = after, None, None, True
        elif ops:
            # the document before the patch, read while ``rich`` still says how its
            # bytes were written (a plain document held as JSON bytes only)
            before = document(new)
            if plain:
                decoded = _loads(body_bytes)  # plain JSON: no typed values to rebuild
            else:
                decoded = codec.deserialize(body_bytes, agent_id, seq)
                new.rich = True
            new.data = patch.apply(before, decoded["ops"])
            new.dumped, new.blob = None, None
        elif packed is not None and not new.rich:  # data unchanged: its bytes, for next time
            new.dumped = packed
        if fsm is not None:
            new.fsm_state = fsm
            new.fsm_entered_at = now
        if schema_version is not None:
            new.schema_version = schema_version
        new.seq = seq
        new.updated_at = now
        if self.max_state_bytes is not None:
            if new.blob is None:
                new.blob = codec.copy_dumps(document(new))
            if len(new.blob) > self.max_state_bytes:
                raise StateTooLarge(agent_id, "state", len(new.blob), self.max_state_bytes)
        snapshot = None
        if self.snapshots.due(new, seq):
            snapshot, marks = self.snapshots.encode_timed(new)
            mark_snapshot(new, marks)
        request = StoreRequest(
            agent_id,
            base,
            (raw,),
            snapshot,
            None
            if idempotency_key is None
            else idempotency.stored_key(codec, agent_id, idempotency_key),
            fence,
            head_tag=codec.head_tag(agent_id, seq, link),
            expected_tag=record.tag if record is not None else None,
            check_tag=self.tags_compared and record is not None and record.tag_known,
        )
        new.tag, new.tag_known = request.head_tag, True
        return request, new
