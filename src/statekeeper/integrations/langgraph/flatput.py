"""The flat checkpoint commit: a ``put`` of a cached thread with nothing queued on it,
built and committed in one frame, the step's parked writes with it.

The general path (:meth:`._SaverCommits._mutate`) queues the ``put``'s plan, takes
the thread's lock, drains the queue a batch at a time, opens the thread's stream,
builds the batch, and appends it through the store's ``append_applied`` and the
engine's ``append`` (a coroutine each, one awaiting the next): ~10 frames and their
bookkeeping (a queue, a future per plan, a batch split) around the work that a
step's commit needs. In the saver's common case — a run's ``put`` on a thread whose
document is cached, no other write queued on it, its lock free, the store's cached
record trusted at the document's seq, an engine that commits a lone append inline —
:func:`put_flat` makes the same commit directly: the parked writes and the ``put``'s
plan built as ``_commit`` builds them (``_build`` / ``_build_one``), the event built
by ``WritePipeline.build`` and committed by ``Backend.commit_request``
(``WritePipeline.commit_applied``), the document and snapshot accounting kept as
``_append`` keeps them, every plan settled. What is stored is the same event: the
same ops, key, type, chain, checksum and head tag; fork protection, claims and
idempotency are the plans' own, checked where they are built either way.

Anything else — the case not met before building, a conflict, a serialisation
error — leaves the write to the general path, which handles every case (after a
build, with the thread's document dropped as the general path drops it on a
conflict: its plans run again on a fresh read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import SerializationError
from ...records import AppendResult
from . import mapping as m
from .commits import _build, _build_one, _plain_claims, _settle
from .stream import Plan, _Pending, _Stream, _update_heads

if TYPE_CHECKING:
    from ...store.writes import WritePipeline
    from .commits import _SaverCommits

__all__ = ["put_flat"]


async def put_flat(saver: _SaverCommits, thread_id: str, build: Plan, plain: bool) -> bool:
    """Commit a checkpoint ``put``'s plan ``build`` the flat way (see the module): True
    once it is settled (its error raised, as ``_mutate`` raises it); False, with
    nothing done, when it is not the flat case (the caller then calls ``_mutate``)."""
    if saver._queued.get(thread_id):
        return False
    st = saver._streams.get(thread_id)
    fast = saver._fast
    store = saver.store
    if (
        st is None
        or fast is None
        or not fast.fast
        or not store._gate.ok
        or store._closed
        or "append" in store.__dict__  # (an append wrapped by its owner: taken)
        or st.doc.get("moved") is not None
        or not fast.can_commit_applied(st.agent_id, st.seq)
        or not saver._locks.try_acquire(thread_id)
    ):
        return False
    try:
        mine = await _commit_flat(saver, fast, st, thread_id, build, plain)
    finally:
        saver._locks.release(thread_id)
    if mine is None:  # the general path makes it (see the module)
        await saver._mutate(thread_id, build, m.EV_CHECKPOINT, plain=plain)
    else:
        mine.future.result()
    return True


async def _commit_flat(
    saver: _SaverCommits,
    fast: WritePipeline,
    st: _Stream,
    thread_id: str,
    build: Plan,
    plain: bool,
) -> _Pending | None:
    """(Holding the thread's lock.) Build and commit the parked writes and the plan
    ``build``: its settled pending, or None when the general path is to make it (the
    parked writes put back, the thread's document dropped)."""
    if thread_id in saver._waiting:
        saver._wake(thread_id)  # (as _mutate does for a checkpoint)
    saver._streams.move_to_end(thread_id)
    with saver._parking:
        parked = saver._parked.pop(thread_id, None)
    mine = _Pending(build, saver._portal.new_future(), m.EV_CHECKPOINT, True, plain)
    live = [*parked, mine] if parked else [mine]
    speculative = len(live) > 1
    live, plan = _build(st, live) if speculative else _build_one(st, live)
    if plan is not None:
        event_type, ops, key = plan
        made, st.made = st.made, None
        if made is not None and (speculative or made[0] is not ops):
            made = None
        after = (
            st.doc if speculative else made[1] if made is not None else m.apply_once(st.doc, ops)
        )
        plain_all = all(p.plain for p in live) and _plain_claims(ops)
        try:
            result: Any = fast.commit_applied(
                st.agent_id, event_type, ops, st.seq, key, after, plain_all
            )
            if result is not None and not isinstance(result, AppendResult):
                result = await result  # (the engine's own append, or a key confirmed)
        except SerializationError:
            result = None  # the general path fails only the plan that cannot be stored
        except BaseException as exc:  # (as _commit: every plan in the event fails)
            saver._forget(thread_id)
            for pending in live:
                _settle(pending, exc)
            return mine
        if result is None:
            saver._forget(thread_id)
            saver._requeue(thread_id, live, mine)
            return mine if mine.future.done() else None
        if result.duplicate:  # an earlier attempt landed: our document is stale
            saver._forget(thread_id)
        else:
            if not speculative:
                st.doc = after
                if made is not None:
                    if made[2] is not None:
                        st.heads[made[2]] = made[3]
                else:
                    _update_heads(st, ops)
            st.seq = result.last_seq
            if saver._snapshot_due(st, event_type, ops):
                try:
                    await saver._snapshot(st)
                except BaseException as exc:  # (as _commit: the plans fail with it)
                    saver._forget(thread_id)
                    for pending in live:
                        _settle(pending, exc)
                    return mine
    for pending in live:
        _settle(pending)
    if not saver._queued.get(thread_id):
        saver._queued.pop(thread_id, None)
    return mine
