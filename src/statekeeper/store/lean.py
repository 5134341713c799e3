"""The lean keyed append: one event a caller built on a cached agent, committed in one call.

:meth:`.writes.WritePipeline.append_applied` (the LangGraph saver's checkpoints and
writes: ops the caller applied itself, the document after them handed over, an
idempotency key) builds its event with :meth:`~.writes.WritePipeline.build` — the
general builder: a request object, a raw event, the codec's key lookups, the head tag
by name — and appends it through four coroutines (``_land``, ``_append_trusted``, the
engine's ``append``, its ``_open_commit``) to the one statement that commits it.
:func:`bind_lean` binds, once per store (again whenever its write options change:
``WritePipeline.decide_fast``), what such an append needs — the cache, the lock table,
the codec's sealing, the snapshot policy, the engine's ``commit_keyed``, the witness —
and makes it one plain function:

- the body ``{"ops": ops, "key": key}`` encoded once (``orjson``: the caller said its
  values are plain JSON), sealed by the codec (compression, checksum, chain link), the
  head tag made as ``Codec.head_tag`` makes it;
- the key's claim, the head's compare-and-set and the event row committed at once by
  ``Backend.commit_keyed`` (SQLite: ONE statement, the key checked in it);
- the new record — the document the caller handed over, nothing decoded nor applied
  again — cached once the engine acknowledged it, the witness told.

It returns the :class:`~statekeeper.records.AppendResult`, or None with nothing done
when the append is not its case: no trusted cached record at ``expected_seq``, a link or
delta base to fetch, the agent's lock held by another write, a record holding typed
values, a snapshot due, the engine declining to commit now (another task ready, the
writer busy, a pass of the loop due), a conflict on the cached head (the record then
dropped, as ``append_applied`` drops it). The caller then makes the append through
``append_applied`` or ``StateStore.append``, which handle each of them; a duplicate key
(an earlier attempt landed) returns the coroutine of ``confirm_key`` to await. What is
stored is the same bytes either way (``tests/store/test_lean_append.py``).

Why a copy of the builder's steps: the instructions per append, docs/benchmarks.md,
"lgsmall2" (2026-12-05 evening).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ..backends.base import StoreRequest
from ..codec.depth import bounded, too_deep
from ..codec.pipeline import BLAKE3_FROM
from ..errors import ConflictError
from ..records import AppendResult, RawEvent, RawSnapshot
from .body import next_record
from .snapshots import mark_snapshot
from .state import AgentRecord

if TYPE_CHECKING:
    from .writes import WritePipeline

__all__ = ["LeanAppend", "bind_lean", "body_around"]


class LeanAppend(Protocol):
    """``lean(agent_id, event_type, ops, expected_seq, key, after, ops_json=None)``: the
    result, a coroutine to await for it (the engine's append of the built event, a
    duplicate key's confirmation; None from it: a conflict, make the append another
    way), or None (nothing done: make the append another way). ``ops_json``:
    ``orjson.dumps(ops)``, when the caller has it (the LangGraph saver encodes the ops
    for its snapshot estimate anyway): the body is made around it, not encoded again."""

    def __call__(
        self,
        agent_id: str,
        event_type: str,
        ops: list[dict[str, Any]],
        expected_seq: int,
        key: str | None,
        after: Any,
        ops_json: bytes | None = None,
        /,
    ) -> AppendResult | Awaitable[AppendResult | None] | None: ...


def body_around(ops_json: bytes, key: str | None) -> bytes:
    """The body ``orjson.dumps({"ops": ops, "key": key})`` (``{"ops": ops}`` when
    ``key`` is None) made around ``ops_json``, ``orjson.dumps(ops)``: the same bytes
    (orjson writes no whitespace, and the keys in that order) without encoding the ops
    twice (``tests/store/test_lean_body.py``)."""
    if key is None:
        return b"".join((b'{"ops":', ops_json, b"}"))
    return b"".join((b'{"ops":', ops_json, b',"key":', orjson.dumps(key), b"}"))


def bind_lean(pipeline: WritePipeline) -> LeanAppend | None:
    """The lean append of ``pipeline``'s store, or None when its options rule it out:
    not ``pipeline.fast``, group commit (its appends wait for a shared commit), a
    keyring (keys stored as keyed hashes, rotations), ``snapshot_every="auto"`` (its
    tuner counts every append), an engine without ``commit_keyed`` of its own or
    without head tags to compare."""
    backend = pipeline.backend
    codec = pipeline.codec
    snapshots = pipeline.snapshots
    if (
        not pipeline.fast
        or pipeline.group is not None
        or codec.keyring is not None
        or snapshots.tuner is not None
        or not pipeline.tags_compared
        or type(backend).commit_keyed is _default_commit_keyed()
    ):
        return None
    commit = backend.commit_keyed
    reads = pipeline.reads
    cache = reads.cache
    pinned = reads.pinned
    cached = cache._data
    held = pipeline._locks._held
    clock = pipeline.clock
    seal = codec.seal
    sealer = pipeline.sealer  # (plain codecs: seal's short bodies, bound once)
    # (compressing codecs without a key, SHA-256 links: the same, bound once)
    packer = codec.compressed_sealer() if sealer is None else None
    tagger = codec.head_tagger()
    due = snapshots.due
    encode_timed = snapshots.encode_timed
    needs_prepare = snapshots.needs_prepare
    witness = pipeline.witness
    acked = None if witness is None else witness.acked
    dumps = orjson.dumps
    blake3_from = BLAKE3_FROM

    def lean(
        agent_id: str,
        event_type: str,
        ops: list[dict[str, Any]],
        expected_seq: int,
        key: str | None,
        after: Any,
        ops_json: bytes | None = None,
    ) -> AppendResult | Awaitable[AppendResult | None] | None:
        if agent_id in held or after is None:
            return None
        record = pinned.get(agent_id) or cached.get(agent_id)
        if (
            record is None
            or not record.tag_known
            or record.seq != expected_seq
            or record.rich
            or (prev := record.link) is None
            or needs_prepare(record)
        ):
            return None
        if ops_json is not None:
            body_bytes = body_around(ops_json, key)
        else:
            try:
                body_bytes = dumps({"ops": ops, "key": key} if key is not None else {"ops": ops})
            except TypeError:  # not plain JSON after all (or nested past orjson's limit):
                return None  # the builder says what is wrong
        if 0x24 in body_bytes and b'"$t"' in body_bytes:
            return None  # a tag-like key in the values: the builder reads it back
        if not bounded(body_bytes) and too_deep(ops) is not None:
            return None  # a document nested too deep: the builder refuses it
        seq = expected_seq + 1
        now = clock()
        if now < record.updated_at:  # a stream's times never go back (writes.build)
            now = record.updated_at
        if sealer is not None and len(body_bytes) < blake3_from:
            payload, link = sealer(agent_id, seq, event_type, now, body_bytes, prev)
            checksum = link
        elif packer is not None and len(body_bytes) < blake3_from:
            payload, checksum, link = packer(agent_id, seq, event_type, now, body_bytes, prev)
        else:
            payload, checksum, link = seal(agent_id, seq, event_type, now, body_bytes, prev)
        new = next_record(record)
        new.link = link
        new.checksum = checksum
        new.replay_bytes = record.replay_bytes + len(payload)
        new.data, new.dumped, new.blob, new.shared = after, None, None, True
        new.seq = seq
        new.updated_at = now
        tag = tagger(agent_id, seq, link)
        new.tag, new.tag_known = tag, True
        if due(new, seq):  # the snapshot with it: the engine's append (as build makes it)
            snapshot, marks = encode_timed(new)
            mark_snapshot(new, marks)
            return land(agent_id, new, record, event_type, now, payload, checksum, key, snapshot)
        try:
            row = (agent_id, seq, event_type, now, payload, checksum, tag, record.tag, key)
            result = commit(row)
        except ConflictError:  # the cached head was stale: the general path makes it
            cache.discard(agent_id)
            pipeline.retries += 1
            return None
        except BaseException:
            cache.discard(agent_id)
            raise
        if result is None:  # the engine declined: nothing written, its append makes it
            return land(agent_id, new, record, event_type, now, payload, checksum, key, None)
        pipeline.appends += 1
        if (idle := pipeline.idle) is not None:
            idle.saved(agent_id)
        if result.duplicate:  # (as write() does: never trust the record alone)
            cache.discard(agent_id)
            assert key is not None
            return pipeline.confirm_key(agent_id, key, result)
        cache.put(agent_id, new)
        if acked is not None:
            acked(agent_id, seq, link, new.created_at)
        return result

    async def land(
        agent_id: str,
        new: AgentRecord,
        record: AgentRecord,
        event_type: str,
        now: float,
        payload: bytes,
        checksum: bytes,
        key: str | None,
        snapshot: RawSnapshot | None,
    ) -> AppendResult | None:
        """The event ``lean`` built, appended by the engine's ``append`` when it could not
        commit it at once (or a snapshot goes with it), as ``append_applied`` appends
        what ``build`` made — nothing built twice. None on a conflict."""
        seq = new.seq
        request = StoreRequest(
            agent_id,
            seq - 1,
            (RawEvent(seq, event_type, now, payload, checksum),),
            snapshot,
            key,
            None,
            head_tag=new.tag,
            expected_tag=record.tag,
            check_tag=True,
        )
        held[agent_id] = None  # (no await since lean checked it is free)
        try:
            return await pipeline._land(agent_id, request, new)
        finally:
            pipeline._let_go(agent_id)

    return lean


def _default_commit_keyed() -> Any:
    from ..backends.base import Backend

    return Backend.commit_keyed
