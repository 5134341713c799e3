"""The flat save: ``StateStore.save(agent_id, dict)`` of a cached agent as one plain call.

:meth:`.writes.WritePipeline.save_fast` makes the common save in one coroutine, but
through general helpers — :func:`.change.diff_by_key` and its parts, ``Codec.seal``,
``Codec.head_tag``, ``SnapshotPolicy.due`` — each re-reading the store's options on
every save. :func:`bind_flat` binds, once per store (again whenever the store's write
options change: ``WritePipeline.decide_fast``), everything such a save needs: the
cache's dict, the lock table, the codec's plain sealing parts, the snapshot bounds, the
engine's ``commit_next`` and the witness. The save is then one function, no coroutine:

- change detection specialised for the common cases, each proven on bytes as
  :func:`.change.diff_by_key` proves them: every top-level value packed once (msgpack,
  strict types) and compared with the bytes kept from the last save; a list whose old
  items' bytes start the new one's grew (one ``add …/-`` op per new item); any other
  changed value that is neither a list nor a dict is replaced (one ``replace`` op, what
  :func:`statekeeper.patch.diff` makes of it). Anything else — a key added or removed,
  a changed dict, a list changed otherwise, values that do not pack, the keys in
  another order than the stored one — hands the save back (None);
- the event serialised as ``save_fast`` serialises it, sealed and tagged as
  ``Codec.seal`` / ``Codec.head_tag`` make a record without key nor compression;
- the head's compare-and-set and the event row committed by ``Backend.commit_next``
  at once; when the engine declines (another task ready, the writer busy, a pass of the
  loop due), a coroutine that appends the same row is returned for the caller to await
  (under the agent's lock, which it then holds);
- the cached record updated in place once the append is acknowledged, the witness told.

It returns the :class:`~statekeeper.records.AppendResult`, such a coroutine, or None
with nothing done when the save is not its case (no trusted cached record, the agent's
lock held, a snapshot due, a conflict on the cached head — the record then dropped, as
``save_fast`` drops it): the caller then makes the save through ``save_fast`` or the
general path, which handle each of them. What is stored is the same bytes either way
(``tests/store/test_save_flat.py``). Why a third copy of the save's steps: the
instructions per save, docs/benchmarks.md, "flatsave".
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..backends.base import NextRow
from ..codec.depth import too_deep
from ..errors import ConflictError
from ..patch import escape
from ..records import (
    AppendResult,
    EventType,
    _set_agent_id,
    _set_duplicate,
    _set_first_seq,
    _set_last_seq,
)
from . import proofs as _proofs
from .change import _grew, _packer, _packers, fast_packer, kept_bytes, plain
from .state import HELD_AS_BYTES, AgentRecord
from .tails import TAIL_EVERY, tail_now, tail_stored

if TYPE_CHECKING:
    from .writes import WritePipeline

__all__ = ["FlatSave", "bind_flat"]

#: ``flat(agent_id, document)``: the result, a coroutine to await for it (None from it:
#: hand the save on), or None (hand the save on, nothing done)
FlatSave = Callable[[str, dict[str, Any]], "AppendResult | Awaitable[AppendResult | None] | None"]

_PATCH = EventType.PATCH
_NEVER = 1 << 62  # (no byte bound on the replay: one comparison that never holds)
_KEPT = 4096  # the most keys' paths, and agents' link prefixes, a flat save keeps


def _paths(key: str, paths: dict[str, tuple[str, str]]) -> tuple[str, str]:
    """``("/" + key, "/" + key + "/-")``, the key escaped as a JSON Pointer token (as
    :func:`statekeeper.patch.diff` writes it), kept in ``paths`` while it has room."""
    path = "/" + escape(key) if "~" in key or "/" in key else "/" + key
    both = (path, path + "/-")
    if len(paths) < _KEPT:
        paths[key] = both
    return both


def bind_flat(pipeline: WritePipeline) -> FlatSave | None:
    """The flat save of ``pipeline``'s store, or None when its options rule it out (not
    ``pipeline.fast``, ``snapshot_every="auto"`` — its tuner counts every save —, a
    codec that encrypts or compresses). With group commit every flat save returns the
    coroutine that joins the group's next commit (its ``land``)."""
    snapshots = pipeline.snapshots
    sealing = pipeline.codec.plain_sealing()
    if not pipeline.fast or snapshots.tuner is not None or sealing is None:
        return None
    group = pipeline.group
    header, names, seq_ts = sealing
    every = snapshots.every
    max_replay = _NEVER if snapshots.max_replay_bytes is None else snapshots.max_replay_bytes
    # the replay-cost rule ("bounded", the default, and "cost"; SnapshotPolicy.due)
    by_cost = snapshots.by_cost
    event_cost, cost_base, min_cost = snapshots.event_cost, snapshots.cost_base, snapshots.min_cost
    deltas = snapshots.full_every > 1
    tail_every = TAIL_EVERY
    codec = pipeline.codec
    cache = pipeline.reads.cache
    cached = cache._data
    held = pipeline._locks._held
    commit = pipeline.backend.commit_next
    clock = pipeline.clock
    serialize = pipeline.codec.serialize
    witness = pipeline.witness
    acked = None if witness is None else witness.acked
    local = _packers
    fast: tuple[Any, int] = fast_packer() or (None, 0)  # (change.dump_keys's packer)
    packb, strict = fast
    sha256 = hashlib.sha256
    dumps = orjson.dumps
    held_as_bytes = HELD_AS_BYTES
    # per top-level key, its two patch paths ("/key", "/key/-"); per agent, the chain
    # link's prefix (b"sk-link/1" + the agent's and the record type's names): made once
    # and kept (up to _KEPT of each), instead of the string concatenations, the
    # ``escape`` checks and the ``lru_cache`` call of every save (docs/benchmarks.md,
    # "normalsave": each a C function of its own that a save otherwise runs once,
    # cold)
    paths: dict[str, tuple[str, str]] = {}
    prefixes: dict[str, bytes] = {}
    proof_from = _proofs.PROOF_FROM  # (store/proofs.py: 0 with its version tags)
    holds, extend = _proofs.holds, _proofs.extend
    make_proof, grow_proof, seal = _proofs.make, _proofs.grown, _proofs.seal
    blank = object.__new__  # (an instance, its slots unset)
    set_agent_id, set_first_seq = _set_agent_id, _set_first_seq
    set_last_seq, set_duplicate = _set_last_seq, _set_duplicate

    def flat(
        agent_id: str, new: dict[str, Any]
    ) -> AppendResult | Awaitable[AppendResult | None] | None:
        record = cached.get(agent_id)
        if (
            record is None
            or agent_id in held  # another write of this agent: wait for it (save_fast)
            or not record.tag_known
            or record.rich
            or (prev := record.link) is None
            or (deltas and record.full_data is None)
            # (a state folded from storage: its bytes made now, see change.kept_bytes)
            or (
                (before_all := record.dumped) is None and (before_all := kept_bytes(record)) is None
            )
        ):
            return None
        data = record.data
        if data is not held_as_bytes and data.__class__ is not dict:
            return None
        pack = None if packb is not None else (getattr(local, "packer", None) or _packer()).pack
        dumped: dict[str, bytes] = {}
        ops: list[dict[str, Any]] = []
        carried: list[bytes] = []  # the packed bytes of every value the ops carry
        # the lists of flat messages proven unchanged without packing them (store/proofs.py:
        # all sizes with its version tags): the proofs kept from the last save, the next ones
        kept = record.proofs  # (only made with ormsgpack: pack is None then)
        made: dict[str, tuple[Any, ...]] | None = None
        try:
            for key, value in new.items():
                before = before_all.get(key)
                if (
                    kept is not None
                    and (proof := kept.get(key)) is not None
                    and proof[0] is before  # (its packed bytes: proofs.py)
                    and value.__class__ is list
                    and holds(proof, value)
                ):
                    if made is None:
                        made = {}
                    if (length := proof[1]) == len(value):  # (its count)
                        dumped[key] = before  # unchanged: its bytes, its proof
                        made[key] = proof
                        continue
                    added = value[length:]  # only the new items packed
                    # (their proof made before their pack, then sealed with the bytes:
                    # an edit between the two, by another thread, breaks it; proofs.py)
                    longer = grow_proof(proof, before, added)
                    after, tail = extend(
                        before, packb(added, None, strict), length + len(added)
                    )  # (the count packed, not len(value): another thread may append)
                    dumped[key] = after
                    if (both := paths.get(key)) is None:
                        both = _paths(key, paths)
                    path = both[1]
                    for item in added:
                        ops.append({"op": "add", "path": path, "value": item})
                    carried.append(tail)
                    if longer is not None and (longer := seal(longer, after)) is not None:
                        made[key] = longer
                    continue
                # a list's proof made before its pack (None: not proven), sealed after;
                # both, and the ops, of one private copy: another thread that swaps an
                # item out between them (and back later) leaves no proof of bytes it
                # does not describe (tests/store/test_proof_races.py)
                if value.__class__ is list:
                    value = value[:]
                made_before = (
                    make_proof(before, value)
                    if value.__class__ is list
                    and pack is None
                    and before is not None
                    and len(before) >= proof_from * len(value)
                    else None
                )
                after = dumped[key] = packb(value, None, strict) if pack is None else pack(value)
                if before == after:  # unchanged (the common case)
                    if made_before is not None and (proof := seal(made_before, after)):
                        # its proof kept: from the next save on it is not packed (was:
                        # made, dropped, and made again before every pack)
                        if made is None:
                            made = {}
                        made[key] = proof
                    continue
                if before is None:
                    return None  # a key added: the general diff
                if (both := paths.get(key)) is None:
                    both = _paths(key, paths)
                if value.__class__ is list:
                    if (old := before[0]) == 0xDC == after[0]:  # (change._grew's 16-bit case)
                        # (the big-endian counts read with the int operations every
                        # save runs anyway, not << and |)
                        length = before[1] * 256 + before[2]
                        if after[1] * 256 + after[2] < length or not after.startswith(
                            memoryview(before)[3:], 3
                        ):
                            return None
                        offset = len(before)
                    elif 0x90 <= old <= 0x9F and (
                        0x90 <= (new_head := after[0]) <= 0x9F or new_head == 0xDC
                    ):  # (its fixarray case: a history of fewer than 16 items, the
                        # first saves of every chat; _grew's calls were ~90 bytecodes)
                        length = old - 0x90
                        if new_head == 0xDC:  # (grown past 15 items: a 3-byte header)
                            if not after.startswith(memoryview(before)[1:], 3):
                                return None
                            offset = len(before) + 2
                        elif new_head - 0x90 < length or not after.startswith(
                            memoryview(before)[1:], 1
                        ):
                            return None
                        else:
                            offset = len(before)
                    else:
                        grown = _grew(before, after)
                        if grown is None:
                            return None  # not a growth: the general diff
                        length, offset = grown
                    path = both[1]
                    # the items packed, not len(value): another thread may append after
                    # the pack (the GIL passed on its return); the next save adds those
                    count = (
                        after[1] * 256 + after[2]
                        if (head := after[0]) == 0xDC
                        else head - 0x90
                        if head <= 0x9F
                        else int.from_bytes(after[1:5], "big")
                    )
                    for item in value[length:count]:
                        ops.append({"op": "add", "path": path, "value": item})
                    carried.append(after[offset:])
                    if (
                        made_before is not None and (proof := seal(made_before, after)) is not None
                    ):  # large flat messages: proven without packing them from the next save
                        if made is None:
                            made = {}
                        made[key] = proof
                elif value.__class__ is dict:
                    return None  # a changed dict: the general diff
                else:  # a scalar changed (its bytes differ: so does its JSON)
                    ops.append({"op": "replace", "path": both[0], "value": value})
                    carried.append(after)
        except (TypeError, ValueError, OverflowError):  # not plain JSON: the general diff
            if pack is not None:  # (a failed pack leaves its partial bytes in the buffer)
                local.packer.reset()
            return None
        if len(dumped) != len(before_all):
            return None  # a key removed: the general diff
        if list(before_all) != list(dumped):
            return None  # the keys in another order: the general diff (it keeps theirs)
        if len(carried) > 1 and data is not held_as_bytes:
            return None  # several changes: diff_by_key orders their ops by the stored keys
        if ops and too_deep(ops) is not None:
            return None  # a document nested too deep: build() refuses it
        # the event's bytes, as save_fast makes them (change.plain, written out for the
        # one-change save; called for the rarer several-change one)
        body_bytes = None
        if not ops:
            body_bytes = b"{}"
        elif len(carried) == 1 and not (
            0xCB in (tail := carried[0])
            or 0xC4 in tail
            or 0xC5 in tail
            or 0xC6 in tail
            or (0x24 in tail and b"\xa2$t" in tail)
        ):
            try:
                body_bytes = dumps({"ops": ops})
            except TypeError:
                body_bytes = None
        if body_bytes is None:
            body = {"ops": ops}
            if len(carried) > 1 and plain(carried):
                try:
                    body_bytes = dumps(body)
                except TypeError:
                    body_bytes = None
            if body_bytes is None:
                body_bytes = serialize(body, "event")
                if 0x24 in body_bytes and b'"$t"' in body_bytes:
                    return None  # typed values in the ops: build() applies them
        seq = record.seq + 1
        # Codec.seal of a record without key nor compression, written out
        payload = header + prev + body_bytes
        replay = record.replay_bytes + len(payload)
        events = seq - record.snapshot_seq
        if (
            events >= every
            or replay >= max_replay
            or (
                by_cost
                and replay + event_cost * events
                >= (bound if (bound := record.snapshot_bytes + cost_base) > min_cost else min_cost)
            )
        ):
            return None  # a snapshot is due (SnapshotPolicy.due): save_fast writes it
        if (prefix := prefixes.get(agent_id)) is None:
            prefix = b"sk-link/1" + names(agent_id, _PATCH)
            if len(prefixes) < _KEPT:
                prefixes[agent_id] = prefix
        now = clock()
        if now < record.updated_at:  # a stream's times never go back (writes.build)
            now = record.updated_at
        link: bytes = sha256(prefix + seq_ts(seq, now) + payload).digest()
        tag = b"\x01\x00" + link  # (Codec.head_tag without a key)
        tailed = None  # a tail snapshot with the event (store/tails.py; only when on)
        if (based := record.tail_base) is not None and seq - based[0] >= tail_every:
            tailed = tail_now(codec, record, seq, now, link, dumped, replay)
            if tailed is None:
                return None  # (save_fast asks the policy)
        row = (agent_id, seq, now, payload, link, tag, record.tag, tailed)
        try:
            if group is not None or not commit(row):  # appended on a pass of the loop
                held[agent_id] = None
                return land(record, row, ops, dumped, replay, agent_id, seq, now, link, tag, made)
        except ConflictError:  # the cached head was stale: the general path makes it
            cache.discard(agent_id)
            pipeline.retries += 1
            return None
        except BaseException:
            cache.discard(agent_id)
            raise
        pipeline.appends += 1
        if (idle := pipeline.idle) is not None:
            idle.saved(agent_id)
        if tailed is not None:
            tail_stored(record, seq, link, dumped)
            pipeline.snapshots_written += 1
        record.fresh = False  # its data may be shared (as next_record says)
        if ops:
            record.data, record.dumped, record.blob = held_as_bytes, dumped, None
        else:
            record.dumped = dumped
        record.proofs = made
        record.seq, record.updated_at, record.replay_bytes = seq, now, replay
        record.link, record.checksum, record.tag = link, link, tag
        if cached.get(agent_id) is record:
            cached.move_to_end(agent_id)
            cache.hits += 1
        else:  # (a commit listener evicted or replaced it)
            cache.put(agent_id, record)
        if acked is not None:
            acked(agent_id, seq, link, record.created_at)
        # AppendResult(agent_id, seq, seq): its __init__'s four slot setters, called
        # here (a class call with a Python __init__ runs a dozen C functions of its own)
        result = blank(AppendResult)
        set_agent_id(result, agent_id)
        set_first_seq(result, seq)
        set_last_seq(result, seq)
        set_duplicate(result, False)
        return result

    locks = pipeline._locks
    append_next = pipeline.backend.append_next

    async def land(
        record: AgentRecord,
        row: NextRow,
        ops: list[dict[str, Any]],
        dumped: dict[str, bytes],
        replay: int,
        agent_id: str,
        seq: int,
        now: float,
        link: bytes,
        tag: bytes,
        made: dict[str, tuple[Any, ...]] | None,
    ) -> AppendResult | None:
        """The flat save's append when the engine declined to commit it at once: the
        same row through the group's next commit (``GroupCommitter.join_next``) or
        ``Backend.append_next``, under the agent's lock (taken by the caller), then the
        record kept as the flat save keeps it. None on a conflict (the record dropped,
        for the caller's general path to make the save again). A closure of
        :func:`bind_flat`'s bound parts, as ``flat`` is: with group commit every save
        at 16 agents comes here (its attribute reads, the row sliced again and the
        ``AppendResult`` class call were ~50 of a batched save's ~1,000 bytecodes,
        ``bench_save_instructions.py --bytecodes sk-group-16``)."""
        try:
            try:
                if group is not None:  # (WritePipeline._append_next, written out)
                    refused = await group.join_next(row)
                    if refused is not None:
                        raise refused
                else:
                    await append_next(*row)
            except ConflictError:
                cache.discard(agent_id)
                pipeline.retries += 1
                return None
            except BaseException:
                cache.discard(agent_id)
                raise
            pipeline.appends += 1
            if (idle := pipeline.idle) is not None:
                idle.saved(agent_id)
            if row[7] is not None:  # (a tail snapshot: store/tails.py)
                tail_stored(record, seq, link, dumped)
                pipeline.snapshots_written += 1
            record.fresh = False
            if ops:
                record.data, record.dumped, record.blob = held_as_bytes, dumped, None
            else:
                record.dumped = dumped
            record.proofs = made
            record.seq, record.updated_at, record.replay_bytes = seq, now, replay
            record.link, record.checksum, record.tag = link, link, tag
            if cached.get(agent_id) is record:
                cached.move_to_end(agent_id)
                cache.hits += 1
            else:  # evicted or replaced meanwhile
                cache.put(agent_id, record)
            if acked is not None:
                acked(agent_id, seq, link, record.created_at)
            result = blank(AppendResult)  # (as flat makes it)
            set_agent_id(result, agent_id)
            set_first_seq(result, seq)
            set_last_seq(result, seq)
            set_duplicate(result, False)
            return result
        finally:
            if held[agent_id]:  # (WritePipeline._let_go, written out)
                locks.release(agent_id)
            else:
                del held[agent_id]

    return flat
