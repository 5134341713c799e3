"""``DurableAgent``: an :class:`AgentStateMachine` and a data document that survive crashes.

Each successful transition is appended to the agent's stream together with the data
changes made since the last write, in one atomic event; a process that dies at any
instruction and reopens the agent finds the last acknowledged transition and data,
exactly, and the machine restored to that state (hooks do not run again on restore).

Ordering of a transition: guards → exit hooks → action → enter hooks → listeners →
callbacks run in memory first (see :mod:`statekeeper.machine`), then the event is
appended. If the append fails (conflict, storage error, unserializable data) the
transition is reverted — state, entry time, in-memory history and statistics — and the
error propagates; side effects the action or callbacks already caused are not undone —
record their results in ``agent.data`` so the next attempt can see them. A durable
agent's transitions run one at a time (from firing until the write returned); one
fired from its own hook is queued until the current one is stored (:mod:`.rtc`).

An event the machine does not allow from the current state (no rule, or every guard
refused) raises :class:`~statekeeper.errors.InvalidTransition`: nothing is written and
pending data changes stay pending, so a caller can never mistake a refused transition
for a saved one. ``strict=False`` restores the bare machine's API (``transition``
returns False). Firing the machine itself (``agent.machine.fire(...)``), which would
write nothing, raises :class:`~statekeeper.errors.MachineError` and is undone; setting
its state without a transition (``agent.machine.restore(...)``, ``revert(...)``) raises
it before the machine moves.
Data-only changes are written with :meth:`DurableAgent.save`; a store closed while an
agent it opened still has unwritten changes warns with
:class:`~statekeeper.errors.UnsavedChangesWarning`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .. import patch
from ..arguments import check_agent_id, check_mapping, check_optional_name
from ..errors import (
    ConflictError,
    InvalidArgument,
    InvalidTransition,
    MachineError,
    SerializationError,
    StatekeeperError,
    UnknownState,
    WriteBufferError,
)
from ..records import AppendResult, Event, EventType, Snapshot
from .agent_lease import check_agent_lease
from .change import diff_by_key, dump_keys
from .observing import refused
from .rtc import EventQueue
from .state import HELD_AS_BYTES, unpack_document
from .tracked import plain_copy
from .tracker import Tracker
from .writes import SEEN, Seen

if TYPE_CHECKING:
    from ..machine import AgentStateMachine, TransitionResult
    from .store import Leased, StateStore
    from .writes import WritePipeline

__all__ = ["DurableAgent", "check_agent_lease"]


#: the machines (by id) a DurableAgent is moving in this context (firing, restoring the
#: stored state): a durable agent's machine fired, restored or reverted outside one
#: would move without anything being written
_FIRING: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "statekeeper_durable_firing", default=()
)


def _value(x: Any) -> Any:
    return getattr(x, "value", x)


async def _seeing(read: Awaitable[Snapshot]) -> tuple[Snapshot, bytes | None]:
    """``read`` (store calls ending in the latest state) run with a :class:`Seen` set:
    the state, and the chain link the store put in it (the incarnation check's link
    where the store's cache does not hold the record: cache off, evicted)."""
    seen = Seen(0, None)
    token = SEEN.set(seen)
    try:
        return await read, seen.adopted
    finally:
        SEEN.reset(token)


class DurableAgent:
    """A state machine plus a JSON data document, persisted event by event.

    Get one with ``await store.agent(agent_id, machine)``. Mutate :attr:`data` freely;
    changes are written by the next :meth:`transition`, :meth:`save` or :meth:`record`.

    When :attr:`lease` is set (``store.agent(..., lease=lease)`` or :meth:`bind`),
    every write carries the lease's fencing token: once another worker takes the
    agent over, this object's writes fail with :class:`~statekeeper.errors.LeaseLost`
    (and the transition that caused them is reverted) instead of overwriting its work.

    With :attr:`strict` (the default) a transition the machine refuses raises
    :class:`~statekeeper.errors.InvalidTransition`; with ``strict=False`` it returns
    False, as the bare machine does.
    """

    def __init__(
        self,
        store: StateStore,
        agent_id: str,
        machine: AgentStateMachine[Any, Any],
        snapshot: Snapshot,
        *,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> None:
        self.store = store
        self.agent_id = agent_id
        self.machine = machine
        #: raise InvalidTransition (True) or return False (False) for a refused event
        self.strict = strict
        #: the lease every write is fenced with (None: optimistic concurrency only)
        self.lease: Leased | None = lease
        self._last: TransitionResult[Any, Any] | None = None
        self._serial = asyncio.Lock()  # one transition at a time, firing through its write
        self._queued = EventQueue()  # fired from its own hooks (run-to-completion, .rtc)
        self._adopt(snapshot)  # (before the machine is hooked: refused, it stays bare)
        machine.add_listener(self._on_transition)
        machine.add_restore_check(self._on_restore)
        store._machines.adopt(self)
        #: the write pipeline a common save may take in one call (a plain StateStore's)
        from .store import StateStore as _Plain  # (store.py imports this module)

        self._fast: WritePipeline | None = store._writes if type(store) is _Plain else None

    @classmethod
    async def open(
        cls,
        store: StateStore,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        initial_data: Mapping[str, Any] | None = None,
        *,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> DurableAgent:
        """Load the agent, creating its stream (in the machine's initial state) if new.

        With ``lease``, the creation (if any) and every later write are fenced."""
        from ..machine import AgentStateMachine

        store._check_open()
        check_agent_id(agent_id)
        if machine is None:
            machine = AgentStateMachine()
        elif not isinstance(machine, AgentStateMachine):
            raise InvalidArgument(
                "machine", f"machine must be an AgentStateMachine, not {type(machine).__name__}"
            )
        check_mapping(initial_data, "initial_data", optional=True)
        if lease is not None:
            check_agent_lease(store, agent_id, lease)
        if type(strict) is not bool:
            raise InvalidArgument("strict", f"strict must be a bool, not {type(strict).__name__}")

        async def latest() -> Snapshot:
            snapshot = await store.get(agent_id)
            if snapshot is None:
                # another worker may create it first: then use theirs
                with contextlib.suppress(ConflictError):
                    await store.create(
                        agent_id, initial_data or {}, fsm_state=machine.state_value, lease=lease
                    )
                snapshot = await store.load(agent_id)
            return snapshot

        snapshot, link = await _seeing(latest())
        agent = cls(store, agent_id, machine, snapshot, lease=lease, strict=strict)
        agent._adopt_link(link)
        return agent

    def bind(self, lease: Leased | None) -> None:
        """Fence every later write of this agent with ``lease`` (None: unfenced)."""
        from .writes import check_write_options

        check_write_options(None, None, lease)
        if lease is not None:
            check_agent_lease(self.store, self.agent_id, lease)
        self.lease = lease

    def _adopt(self, snapshot: Snapshot) -> None:
        if snapshot.fsm_state is not None:  # (before anything is adopted: refused, unchanged)
            try:
                self.machine.state_for(snapshot.fsm_state)
            except UnknownState as exc:  # (open it with a machine that has the state)
                how = "is stored in a state its machine lacks"
                raise exc.for_agent(self.agent_id, how) from None
        self.seq = snapshot.seq
        #: the chain link at ``seq`` as read (None: not known): a write refuses a stream
        #: deleted and re-created since, whose link at ``seq`` differs (see writes.SEEN)
        self._link: bytes | None = self.store._link_at(self.agent_id, snapshot.seq)
        #: why a buffered write of this agent was not stored (``async`` durability):
        #: seq and data are then not what is stored, and it may not write until reloaded
        self._lost: BaseException | None = None
        data = snapshot.data
        #: records what changed in agent.data (None: the full compare; see .tracked)
        self._tracker: Tracker | None = None
        #: agent.data may hold tracked containers (they are made plain to be compared)
        self._ever_tracked = False
        dumped = None
        if type(self)._document is DurableAgent._document and type(data) is dict:
            dumped = dump_keys(data)
        if dumped is not None:  # plain JSON: track it, against a private copy
            self._tracker = Tracker(data, unpack_document(dumped))
            self._ever_tracked = True
            self.data: dict[str, Any] = self._tracker.root
            self._committed_bytes: dict[str, bytes] | None = None
            self._committed_copy: Any = None
        else:
            self.data = data
            self._commit(data, None)
        if snapshot.fsm_state is not None:
            with self._moving():
                self.machine.restore(
                    snapshot.fsm_state, entered_at=snapshot.state_entered_at or None
                )

    @contextlib.contextmanager
    def _moving(self) -> Iterator[None]:
        """Within: this agent moves its machine (a transition it records, a restore of
        the stored state, the undoing of a write that failed)."""
        token = _FIRING.set((*_FIRING.get(), id(self.machine)))
        try:
            yield
        finally:
            _FIRING.reset(token)

    def _adopt_link(self, link: bytes | None) -> None:
        """The chain link at ``seq`` as the store's call that returned the state read
        it (``Seen.adopted``), where the store's cache did not hold it (cache off,
        evicted): the incarnation check needs it, and it costs no read."""
        if self._link is None:
            self._link = link

    def _on_transition(self, result: TransitionResult[Any, Any]) -> None:
        if id(self.machine) not in _FIRING.get():
            # fired on the machine itself: nothing would be written, yet the agent
            # would look moved (and a later save() would store its data, not its state)
            with self._moving():
                self.machine.revert(result)
            raise MachineError(
                f"agent {self.agent_id!r}: its machine was fired directly "
                f"({_value(result.event)!r}), which writes nothing: the transition was "
                "undone (hooks that ran are not); fire it with agent.transition(...)"
            )
        self._last = result

    def _on_restore(self, state: Any) -> None:
        if id(self.machine) not in _FIRING.get():
            # restored (or reverted) on the machine itself: as a direct fire, the agent
            # would look moved with nothing written
            raise MachineError(
                f"agent {self.agent_id!r}: its machine was restored directly (to "
                f"{_value(state)!r}), which writes nothing: refused, the agent is still in "
                f"{self.machine.state_value!r}; move it with agent.transition(...) (or "
                "reload the stored state with agent.refresh())"
            )

    @property
    def state(self) -> Any:
        """The machine's current state."""
        return self.machine.current_state

    #: the schema version stamped on every write (None: none; typed agents set it)
    _schema_version: int | None = None

    def _document(self) -> dict[str, Any]:
        """The data document a write diffs against the committed one (a typed agent,
        :class:`statekeeper.schema.TypedAgent`, validates and serialises its state here)."""
        if self._ever_tracked:  # (it may hold tracked containers: compare plain ones)
            return plain_copy(self.data)  # type: ignore[no-any-return]
        return self.data

    def _tracking(self) -> Tracker | None:
        """The tracker, while it can say what changed (else: back to the full compare,
        for good until the next load)."""
        tracker = self._tracker
        if tracker is not None and (tracker.full or self.data is not tracker.root):
            self._tracker = None
            self._commit(tracker.committed, None)
            return None
        return tracker

    def _pending(self) -> tuple[Any, list[dict[str, Any]], dict[str, bytes] | None, int | None]:
        """What a write writes: the document, its ops, its bytes (full compare) and
        the tracker's generation (tracked)."""
        try:
            tracker = self._tracking()
            if tracker is not None:
                gen = tracker.gen
                ops = tracker.changes()
                if ops is not None:
                    return self.data, ops, None, gen
                self._tracking()  # (it just gave up)
            document = self._document()
            ops, dumped = self._changes(document)
        except RecursionError:  # deeper than Python can walk: no codec could store it
            raise SerializationError(
                "cannot serialize: the document is nested too deeply", "data"
            ) from None
        return document, ops, dumped, None

    # -- what was written last, and what changed since -------------------------------
    #
    # The committed document is kept as the packed bytes of its top-level values (see
    # :mod:`.change`) when it is plain JSON: the changes are then found by one C pass
    # over agent.data and a comparison of bytes (a grown list costs its new items), and
    # a write keeps the bytes it diffed instead of copying the document in Python. A
    # document with typed values keeps a private copy made through the codec and is
    # diffed by :func:`statekeeper.patch.diff`.

    def _commit(self, document: Mapping[str, Any], dumped: dict[str, bytes] | None) -> None:
        """Remember ``document`` as written (``dumped``: its bytes, when already made)."""
        if dumped is None and type(document) is dict:
            dumped = dump_keys(document)
        self._committed_bytes = dumped
        self._committed_copy = None
        if dumped is None:
            codec = self.store.codec
            self._committed_copy = codec.copy_loads(codec.copy_dumps(document))

    @property
    def _committed(self) -> Any:
        """A private copy of the document as written last."""
        if self._tracker is not None:
            return plain_copy(self._tracker.committed)
        if self._committed_bytes is not None:
            return unpack_document(self._committed_bytes)
        return self._committed_copy

    def _changes(self, document: Any) -> tuple[list[dict[str, Any]], dict[str, bytes] | None]:
        """The ops that turn the written document into ``document``, and its bytes."""
        if self._committed_bytes is not None:
            return diff_by_key(HELD_AS_BYTES, document, self._committed_bytes)
        ops = patch.diff(self._committed_copy, document)
        return ops, None

    @property
    def dirty(self) -> bool:
        """True when :attr:`data` has changes not yet written."""
        return bool(self._pending()[1])

    async def transition(
        self,
        event: Any,
        metadata: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str | None = None,
    ) -> bool:
        """Fire ``event``; when the machine moves, durably record it with pending data
        changes, and return True.

        When the machine refuses the event (no rule from the current state, or every
        guard said no) nothing is written and the pending data changes stay pending:
        raises :class:`~statekeeper.errors.InvalidTransition` (with ``strict=False``:
        returns False).

        With ``idempotency_key``, a retry of a transition whose write is stored under
        that key (the caller crashed or lost the reply) returns True without firing
        the machine again — its guards, hooks and actions do not run — and the agent
        is reloaded to the stored state (pending changes dropped, as for any
        duplicate); its state had moved on, so firing again would have been refused
        or, on a cycle, made a second move. Fired from this agent's own hook: queued, True
        returned, run once the current transition is stored (:mod:`.rtc`)."""
        check_mapping(metadata, "metadata", optional=True)
        check_optional_name(idempotency_key, "idempotency_key")
        check_optional_name(actor, "actor")
        if self._queue_from_hook(event, metadata, idempotency_key, actor):
            return True  # fired from its own hook: runs once that is stored (see .rtc)
        async with self._serial:
            return await self._queued.run(self, (event, metadata, idempotency_key, actor))

    def _queue_from_hook(
        self, event: Any, metadata: Mapping[str, Any] | None, key: str | None, actor: str | None
    ) -> bool:
        """Queue the event when fired from a hook of this agent's running transition."""
        firing = id(self.machine) in _FIRING.get()
        return firing and self._queued.put((event, metadata, key, actor))

    async def _transition(
        self, event: Any, metadata: Mapping[str, Any] | None, key: str | None, actor: str | None
    ) -> bool:
        if key is not None and await self._landed(key):
            return True
        before = self.machine.state_value
        self._last = None
        with self._moving():
            moved = await self.machine.transition(event, dict(metadata) if metadata else None)
        if not moved:
            if self.strict:
                raise self._refused(event)
            return False
        result = self._last
        info: dict[str, Any] = {
            "event": _value(event),
            "from": _value(result.source) if result is not None else before,
            "to": self.machine.state_value,
        }
        if metadata:
            info["metadata"] = dict(metadata)
        try:
            await self._write(EventType.TRANSITION, info, self.machine.state_value, key, actor)
        except BaseException:
            with self._moving():
                if result is not None:
                    self.machine.revert(result)  # as if it never fired: state, history, stats
                else:
                    self.machine.restore(before)
            raise
        return True

    async def _landed(self, idempotency_key: str) -> bool:
        """Whether a write under ``idempotency_key`` is stored (then the agent is
        reloaded from storage, as after a duplicate write)."""
        if self._lost is not None:
            raise self._stale()
        if await self.store.find_key(self.agent_id, idempotency_key) is None:
            return False
        await self.refresh()
        return True

    def _refused(self, event: Any) -> InvalidTransition:
        """The error for ``event`` refused by the machine in its current state."""
        machine = self.machine
        state = machine.current_state
        try:
            ruled = event in machine.available_events()
        except TypeError:  # an unhashable event: no rule can name it
            ruled = False
        reason = "every guard refused it" if ruled else "no rule from this state"
        error = InvalidTransition(state, event, reason)
        hint = machine.event_hint(event)
        if hint is not None:
            error.add_note(hint)
        dirty = True
        with contextlib.suppress(StatekeeperError):  # undiffable data counts as pending
            dirty = self.dirty
        if dirty:
            error.add_note(
                f"agent {self.agent_id!r}: nothing was written; the pending changes to "
                "agent.data are still pending (write them with agent.save())"
            )
        return error

    async def save(
        self,
        info: Mapping[str, Any] | None = None,
        *,
        event_type: str = EventType.PATCH,
        idempotency_key: str | None = None,
        actor: str | None = None,
    ) -> AppendResult | None:
        """Write pending data changes as one event; None when there is nothing to write."""
        check_mapping(info, "info", optional=True)
        try:
            pending = self._pending()
        except StatekeeperError as exc:  # (invalid typed state, unserializable data)
            refused(self.store, "append", self.agent_id, exc)
            raise
        if not pending[1] and info is None:
            return None
        return await self._write(
            event_type, dict(info or {}), None, idempotency_key, actor, pending
        )

    async def record(
        self,
        event_type: str,
        info: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str | None = None,
    ) -> AppendResult:
        """Append a custom event (with any pending data changes)."""
        check_mapping(info, "info", optional=True)
        return await self._write(event_type, dict(info or {}), None, idempotency_key, actor)

    async def _write(
        self,
        event_type: str,
        info: dict[str, Any],
        fsm_state: str | None,
        idempotency_key: str | None,
        actor: str | None,
        pending: tuple[Any, list[dict[str, Any]], dict[str, bytes] | None, int | None]
        | None = None,
    ) -> AppendResult:
        if self._lost is not None:
            raise self._stale()
        try:
            tracker = self._tracker
            if pending is None:
                try:
                    pending = self._pending()
                except StatekeeperError as exc:  # (invalid typed state, unserializable data)
                    operation = "append" if fsm_state is None else "transition"
                    refused(self.store, operation, self.agent_id, exc)
                    raise
            document, ops, dumped, gen = pending
            result = None
            fast = self._fast
            if (  # the common save in one call (WritePipeline.fast decides the store's side)
                fast is not None
                and fast.fast
                and ops
                and not info
                and fsm_state is None
                and event_type is EventType.PATCH
                and idempotency_key is None
                and actor is None
                and self._schema_version is None
                and self.lease is None
                and self.store._gate.ok
                and not self.store._closed
            ):
                result = await fast.append_made(self.agent_id, ops, self.seq, self._link)
            seen = None
            if result is None:
                seen = Seen(self.seq, self._link)
                token = SEEN.set(seen)
                try:
                    result = await self.store.append(
                        self.agent_id,
                        event_type,
                        info,
                        ops=ops,
                        fsm_state=fsm_state,
                        expected_seq=self.seq,
                        idempotency_key=idempotency_key,
                        actor=actor,
                        schema_version=self._schema_version,
                        lease=self.lease,
                    )
                finally:
                    SEEN.reset(token)
        except SerializationError as exc:
            from .writes import locate  # name the path in agent.data, not in the event

            try:
                data = plain_copy(self.data) if self._ever_tracked else self.data
            except RecursionError:  # (nested too deeply: exc already says so)
                raise exc from None
            raise locate(exc, self.store.codec.types, data=data, info=info) from exc
        if result.duplicate:  # this write had landed before: take the stored truth
            await self.refresh()
            return result
        self.seq = seq = result.last_seq
        self._link = self.store._link_at(self.agent_id, seq)
        if seen is not None:  # (the store's cache may not hold the record it made)
            self._adopt_link(seen.adopted)
        # what was written: the document as diffed (a change made to agent.data while
        # the write was in flight is not in it, and stays pending)
        if gen is not None and tracker is not None:
            tracker.commit(ops, gen)
            if self._tracker is not tracker:  # it gave up while the write was in flight
                self._commit(tracker.committed, None)
        else:
            self._commit(document, dumped)
        return result

    def _lose(self, error: BaseException) -> None:
        """A buffered write of this agent could not be stored (``error``): its later
        writes raise :class:`WriteBufferError` until :meth:`refresh`."""
        self._lost = error

    def _stale(self) -> WriteBufferError:
        error = WriteBufferError({self.agent_id: self._lost or Exception()})
        error.add_note(
            f"agent {self.agent_id!r}: a buffered write of this agent was not stored "
            f"({self._lost}), so its seq and data are not what is stored; nothing was "
            "written: call agent.refresh() to reload the stored state"
        )
        return error

    async def refresh(self) -> None:
        """Drop unsaved changes and reload the latest stored state."""
        snapshot, link = await _seeing(self.store.load(self.agent_id))
        self._adopt(snapshot)
        self._adopt_link(link)

    def history(self, *, after_seq: int = 0) -> AsyncIterator[Event]:
        """The agent's stored events, oldest first."""
        return self.store.history(self.agent_id, after_seq=after_seq)

    def __repr__(self) -> str:
        return (
            f"DurableAgent({self.agent_id!r}, state={self.machine.state_value!r}, seq={self.seq})"
        )
