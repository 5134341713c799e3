"""The store's writes: create, save and append (their argument checks and the
observer's marks; the write itself is :class:`~.writes.WritePipeline`), snapshots,
settles and deletes.

Methods of :class:`~.store.StateStore`, written here as functions and bound in its class
body (as :func:`.copies.public_copy` is in :class:`~.reads.ReadPath`; a subclass
overrides them as any method). They take ``self: StateStore``: they hand the store to
the tools typed for it. A function here never shares its name with a global it calls
(``tests/store/test_store_parts.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..arguments import check_agent_id, check_mapping, check_name, check_ops, check_seq
from ..errors import SerializationError
from ..records import AppendResult, EventType
from .holds import refuse_if_held
from .observing import FOLD_AT
from .settle import settles, settles_checked
from .writes import (
    Leased,
    append_changes,
    check_event_type,
    check_write_options,
    event_info,
    locate,
    save_changes,
)

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["append", "create", "delete", "find_key", "idle_settled", "save", "snapshot"]

_T = TypeVar("_T")
_perf = time.perf_counter


async def create(
    self: StateStore,
    agent_id: str,
    data: Mapping[str, Any] | None = None,
    *,
    fsm_state: str | None = None,
    schema_version: int = 1,
    idempotency_key: str | None = None,
    actor: str | None = None,
    lease: Leased | None = None,
) -> AppendResult:
    """Start an agent's stream with a ``created`` event. ConflictError if it exists.

    With ``lease`` the write is fenced (see :meth:`save`)."""
    obs = self.observer
    mark = None if obs is None else _perf() if obs.untraced else obs.begin("create", agent_id)
    try:
        self._check_open()
        check_agent_id(agent_id)
        document = dict(check_mapping(data, "data", optional=True) or {})
        fsm_state = self._state(agent_id, fsm_state)
        check_seq(schema_version, "schema_version")
        check_write_options(idempotency_key, actor, lease)
        await self._ready(write=True)
        try:
            result = await self._writes.write(
                agent_id,
                EventType.CREATED,
                {},
                expected_seq=0,
                make=lambda rec: (
                    [{"op": "replace", "path": "", "value": document}],
                    fsm_state,
                ),
                schema_version=schema_version,
                idempotency_key=idempotency_key,
                actor=actor,
                lease=lease,
            )
        except SerializationError as exc:
            raise locate(exc, self.codec.types, data=document) from exc
    except BaseException as exc:
        if obs is not None:
            obs.failed("create", mark, exc)
        raise
    if obs is not None:
        obs.done("create", mark, result)
    return result


async def save(
    self: StateStore,
    agent_id: str,
    data: Mapping[str, Any],
    *,
    fsm_state: str | None = None,
    expected_seq: int | None = None,
    idempotency_key: str | None = None,
    event_type: str = EventType.PATCH,
    actor: str | None = None,
    info: Mapping[str, Any] | None = None,
    schema_version: int | None = None,
    lease: Leased | None = None,
) -> AppendResult:
    """Make ``data`` (and ``fsm_state`` when given) the agent's state.

    Only the difference from the stored state is written (a JSON Patch). The agent
    is created if it has no stream. With ``expected_seq`` the write happens only
    if the head is still that seq (else :class:`ConflictError`); without it the
    diff is taken against the latest state (last writer wins, nothing is lost
    from the stream's history).

    With ``lease`` (a :class:`~statekeeper.concurrency.Lease`, or anything with a
    ``fence``) the write carries the lease's fencing token and the backend refuses
    it with :class:`~statekeeper.errors.LeaseLost` once a newer lease was granted.
    """
    obs = self.observer
    if (  # the common save, decided by the store's options once (WritePipeline.fast)
        obs is None
        and fsm_state is None
        and info is None
        and expected_seq is None
        and idempotency_key is None
        and event_type is EventType.PATCH
        and actor is None
        and schema_version is None
        and lease is None
        and data.__class__ is dict
        and agent_id.__class__ is str
        # (never an internal stream's record, "\x01..."; a string comparison,
        # not a slice: docs/benchmarks.md, "normalsave")
        and agent_id >= "\x02"
        and self._writes.fast
        and not self._closed
    ):
        # no argument check: the flat save and save_fast make only the save of an
        # agent whose record is cached, whose id was checked when it was first read
        # or written
        if not self._gate.ok:  # the store's first write: the gate once, as below
            check_agent_id(agent_id)  # (an invalid id is refused first, as below)
            await self._gate.check(self)
        try:
            if (flat := self._writes.flat) is not None:
                done = flat(agent_id, data)  # (store/flat.py: no coroutine)
                if done.__class__ is AppendResult:
                    return done
                if done is not None and (done := await done) is not None:  # type: ignore[misc]
                    return done  # type: ignore[return-value]
            done = await self._writes.save_fast(agent_id, data, None)
        except SerializationError as exc:
            raise locate(exc, self.codec.types, data=data) from exc
        if done is not None:
            return done
    mark = None if obs is None else _perf() if obs.untraced else obs.begin("save", agent_id)
    try:
        self._check_open()
        check_agent_id(agent_id)
        document = check_mapping(data, "data")
        fsm_state = self._state(agent_id, fsm_state)
        if (  # only what was given is checked (the common save passes none of these)
            expected_seq is not None
            or schema_version is not None
            or event_type is not EventType.PATCH
            or idempotency_key is not None
            or actor is not None
            or lease is not None
        ):
            check_seq(expected_seq, "expected_seq", optional=True)
            check_seq(schema_version, "schema_version", optional=True)
            check_event_type(event_type)
            check_write_options(idempotency_key, actor, lease)
        elif (
            fsm_state is not None
            and obs is None
            and info is None
            and document.__class__ is dict
            and self._writes.fast
        ):  # the common save with a state: one call too
            if not self._gate.ok:  # the store's first write: the gate once, as below
                await self._gate.check(self)
            try:
                done = await self._writes.save_fast(agent_id, document, fsm_state)
            except SerializationError as exc:
                raise locate(exc, self.codec.types, data=document) from exc
            if done is not None:
                return done
        info = event_info(info) if info is not None else {}
        if not self._gate.ok:
            await self._gate.check(self)
        try:
            make, dumped = save_changes(document, fsm_state)
            result = await self._writes.write(
                agent_id,
                event_type,
                info,
                expected_seq=expected_seq,
                make=make,
                idempotency_key=idempotency_key,
                actor=actor,
                create_type=EventType.CREATED,
                schema_version=schema_version,
                lease=lease,
                dumped=dumped,
                started=mark,
            )
        except SerializationError as exc:
            raise locate(exc, self.codec.types, data=document, info=info) from exc
    except BaseException as exc:
        if obs is not None:
            obs.failed("save", mark, exc)
        raise
    if obs is not None:
        if mark.__class__ is float:  # untraced: the observation, without a call
            if obs.timed is mark:  # observed by the write pipeline (a direct write)
                return result
            times = obs.save_times
            times.append(_perf() - mark)
            if len(times) >= FOLD_AT:
                obs.fold()
        else:
            obs.done("save", mark, result)
    return result


async def append(
    self: StateStore,
    agent_id: str,
    event_type: str,
    info: Mapping[str, Any] | None = None,
    *,
    ops: list[dict[str, Any]] | None = None,
    fsm_state: str | None = None,
    expected_seq: int | None = None,
    idempotency_key: str | None = None,
    actor: str | None = None,
    schema_version: int | None = None,
    lease: Leased | None = None,
) -> AppendResult:
    """Append one event: ``info`` is recorded as is; ``ops`` (JSON Patch) and
    ``fsm_state`` change the state. The agent must exist (see :meth:`create`).
    With ``lease`` the write is fenced (see :meth:`save`).

    Without ``expected_seq``, ops are applied to the latest state; if they no
    longer apply after a concurrent write, :class:`ConflictError` is raised.
    """
    obs = self.observer
    op = "transition" if event_type == EventType.TRANSITION else "append"
    mark = None if obs is None else _perf() if obs.untraced else obs.begin(op, agent_id)
    try:
        self._check_open()
        check_agent_id(agent_id)
        check_event_type(event_type)
        op_list = check_ops(ops)
        fsm_state = self._state(agent_id, fsm_state)
        check_seq(expected_seq, "expected_seq", optional=True)
        check_seq(schema_version, "schema_version", optional=True)
        check_write_options(idempotency_key, actor, lease)
        info = event_info(info)
        await self._ready(write=True)

        try:
            result = await self._writes.write(
                agent_id,
                event_type,
                info,
                expected_seq=expected_seq,
                make=append_changes(agent_id, op_list, fsm_state),
                idempotency_key=idempotency_key,
                actor=actor,
                schema_version=schema_version,
                lease=lease,
            )
        except SerializationError as exc:
            raise locate(exc, self.codec.types, info=info, ops=op_list) from exc
    except BaseException as exc:
        if obs is not None:
            obs.failed(op, mark, exc)
        raise
    if obs is not None:
        obs.done(op, mark, result)
    return result


async def find_key(self: StateStore, agent_id: str, key: str) -> AppendResult | None:
    """Where the append of ``agent_id`` that used idempotency ``key`` landed
    (``duplicate=True``), counting buffered writes; None if no append used it.

    Raises :class:`IntegrityError` when the stored idempotency record does not match
    the event it points at (forged or damaged, see :mod:`.idempotency`)."""
    self._check_open()
    check_agent_id(agent_id)
    check_name(key, "key")
    await self._ready()
    return await self._writes.earlier_append(agent_id, key)


async def snapshot(self: StateStore, agent_id: str) -> int:
    """Store a snapshot of the latest state now; returns its seq."""
    return await self._after_flush("snapshot", agent_id, self._writes.snapshot, write=True)


async def _idle_settle(self: StateStore, agent_id: str) -> int | None:
    """An idle settle of ``agent_id`` (a stored id): :meth:`settle`'s, not a
    subclass's (a namespaced store's maps ids; a governed one checks a caller)."""
    if not settles(self._writes) or not settles_checked(self._writes.backend):
        # (a governed store, known once built; an engine that stores no settle's row,
        # S3: was skipped after each save, queued by every one of them)
        self._writes.idle = None
        return None
    if agent_id in self._writes.reads.pinned:
        return None  # (buffered writes: its flush queues it again, never flushed here)
    # (its flush raises no WriteBufferError: was taken here, logged as a failed
    # settle, and the caller's flush() and close() then reported success)
    settle_cached = self._settle_cached
    return await self._after_flush("snapshot", agent_id, settle_cached, write=True, report=False)


async def idle_settled(self: StateStore) -> None:
    """Wait until no idle settle (``settle_after``) is due or running: every agent
    this store saved and that has been idle that long is settled (or skipped, or
    failed: ``stats().idle_settles``). Returns at once without ``settle_after``."""
    self._check_open()
    if self._idle is not None:
        await self._idle.idle()


async def delete(self: StateStore, agent_id: str) -> bool:
    """Delete the agent's stream and snapshots. True if it existed.

    An agent under a legal hold (:mod:`statekeeper.governance.holds`) is not
    deleted: :class:`~statekeeper.errors.AgentOnHold`."""
    await refuse_if_held(self, check_agent_id(agent_id), "delete")
    return await self._after_flush("delete", agent_id, self._writes.delete)


async def _after_flush(
    self: StateStore,
    op: str,
    agent_id: str,
    change: Callable[[str], Awaitable[_T]],
    *,
    write: bool = False,
    report: bool = True,
) -> _T:
    """``change(agent_id)`` once the agent's buffered writes are stored, observed as
    ``op`` (a ``write`` of a record: see :meth:`_ready`; ``report``: the flush's
    failures raised here, see :meth:`WritePipeline.flush`)."""
    obs = self.observer
    mark = None if obs is None else _perf() if obs.untraced else obs.begin(op, agent_id)
    try:
        await self._ready(agent_id, write=write)
        await self._flush_agent(agent_id, report=report)
        result = await change(agent_id)
    except BaseException as exc:
        if obs is not None:
            obs.failed(op, mark, exc)
        raise
    if obs is not None:
        obs.done(op, mark, result)
    return result
