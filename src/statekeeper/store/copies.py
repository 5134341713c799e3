"""The caller's copy of a folded state: what :meth:`ReadPath.public` hands out, made
without copying what nobody else holds (a record folded for this read alone gives its
objects away; a cached one is copied from its packed bytes)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import orjson

from ..records import Snapshot, make_snapshot
from .change import dump_keys
from .state import HELD_AS_BYTES, AgentRecord, document, unpack_document

if TYPE_CHECKING:
    from .reads import ReadPath

__all__ = ["public_copy"]

_dumps = orjson.dumps
_loads = orjson.loads


def public_copy(self: ReadPath, record: AgentRecord, *, shared: bool = False) -> Snapshot:
    """The caller's copy of a folded state (it shares nothing with ``record``);
    :func:`_copied` when the copy by JSON bytes cannot be made."""
    try:
        return _public_copy(self, record, shared=shared)
    except TypeError:  # (orjson: "Recursion limit reached")
        return _copied(record)


def _copied(record: AgentRecord) -> Snapshot:
    """The copy of a state nested deeper than JSON's bytes can hold (orjson stops at
    254 levels), made object by object. A save is refused past ``codec.depth.MAX_DEPTH``
    now, but a msgpack store written before that cap may hold such a state (every save
    of it acknowledged); without this copy every load of it failed with
    ``TypeError: Recursion limit reached``."""
    data = copy.deepcopy(document(record))
    return make_snapshot(
        record.agent_id,
        record.seq,
        record.fsm_state,
        data,
        record.schema_version,
        record.created_at,
        record.updated_at,
        record.fsm_entered_at,
    )


def _public_copy(self: ReadPath, record: AgentRecord, *, shared: bool = False) -> Snapshot:
    """:func:`public_copy` by the copy's bytes (see there).

    ``shared``: the caller never changes the data (it makes its changes
    copy-on-write, as the LangGraph saver does): it gets the record's own document,
    and nothing is copied or serialised (a cold read of a 200-turn chat spent
    ~0.85 M instructions writing out the JSON of a document the caller then held);
    the record is marked shared, so events folded into it later copy it first."""
    typed = record.rich
    if shared:
        data = document(record)
        record.fresh = False
        record.shared = True
    elif record.fresh and not (  # (kept(), inline: every load)
        self.cache.peek(record.agent_id) is record or self.pinned.get(record.agent_id) is record
    ):
        # folded for this read and kept by nobody (no cache, or a state in the
        # past): its objects are the copy, nothing is serialised to keep one
        record.fresh = False
        data = document(record)
    elif record.fresh and not typed:
        # folded for this read and shared with nobody: its objects are the copy, the
        # record keeps their bytes (packed by key for the next save: change.kept_bytes)
        record.fresh = False
        data = record.data
        if record.blob is None and record.dumped is None:
            record.dumped = dump_keys(data) if type(data) is dict else None
            if record.dumped is None:
                record.blob = _dumps(data)
        record.data = HELD_AS_BYTES
    elif record.data is HELD_AS_BYTES and record.dumped is not None:
        data = unpack_document(record.dumped)  # fresh objects: the copy itself
    else:
        if record.blob is None:
            # plain JSON documents (the common case) skip the codec's type checks
            record.blob = self.codec.copy_dumps(record.data) if typed else _dumps(record.data)
        data = self.codec.copy_loads(record.blob) if typed else _loads(record.blob)
    return make_snapshot(  # (Snapshot(...) without its generated __init__: every load)
        record.agent_id,
        record.seq,
        record.fsm_state,
        data,
        record.schema_version,
        record.created_at,
        record.updated_at,
        record.fsm_entered_at,
    )
