"""Typed agents and typed store access.

``await store.agent("a-1", model=SupportAgent)`` gives a :class:`TypedAgent`: its
:attr:`~TypedAgent.state` is a ``SupportAgent`` (typed for mypy), validated on every
write (a :class:`~statekeeper.errors.ValidationError` naming the field, nothing
written), loaded through the model's upcasters (a state stored under an older schema
version is read without being rewritten; the next write stores it at the current
version). :class:`TypedStates` does the same for the store's plain calls
(``load``/``save``/``create``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import patch
from ..arguments import check_agent_id
from ..errors import (
    AgentNotFound,
    AgentOnHold,
    ConflictError,
    DowncastDropsFields,
    InvalidArgument,
    SchemaError,
    StatekeeperError,
)
from ..records import AppendResult, Event, Snapshot
from ..store.agent import DurableAgent
from ..store.conditional import delete_only_at
from ..store.observing import refused
from ..store.writes import SAVE_CARRY
from .carry import Known
from .expiry import apply_ttl, expiring, is_expired, judged_again
from .models import MODEL_KEY
from .registry import ModelSchema, SchemaRegistry, schema_of

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from ..store.store import Leased, StateStore

__all__ = ["TypedAgent", "TypedSnapshot", "TypedStates", "open_typed_agent"]

M = TypeVar("M")


class TypedAgent(DurableAgent, Generic[M]):
    """A :class:`~statekeeper.store.DurableAgent` whose data is a typed model.

    Mutate :attr:`state` (or assign a new one); the next :meth:`transition`,
    :meth:`save` or :meth:`record` validates it and writes the difference. The
    machine's state is :attr:`fsm_state`. :attr:`data` holds the last document written
    or loaded (as stored: it names the model under ``"$model"``)."""

    def __init__(
        self,
        store: StateStore,
        agent_id: str,
        machine: AgentStateMachine[Any, Any],
        snapshot: Snapshot,
        *,
        schema: ModelSchema[M],
        lease: Leased | None = None,
        strict: bool = True,
    ) -> None:
        #: the model's schema (name, version, upcasters)
        self.schema: ModelSchema[M] = schema
        self._schema_version = schema.version
        self._expiring = expiring(schema.adapter.model)
        super().__init__(store, agent_id, machine, snapshot, lease=lease, strict=strict)

    def _adopt(self, snapshot: Snapshot) -> None:
        schema = self.schema
        version = snapshot.schema_version
        state, stored = schema.load_keeping(
            snapshot.data, version, agent_id=snapshot.agent_id, seq=snapshot.seq
        )
        fsm = schema.state_name(snapshot.fsm_state, version)
        #: the machine state is stored under a name renamed since: the next write,
        #: which stamps the current version, records it under its current name (else
        #: the stored state would read as the old name at the new version)
        self._fsm_renamed = fsm != snapshot.fsm_state
        if self._fsm_renamed:  # a state renamed since it was recorded
            snapshot = dataclasses.replace(snapshot, fsm_state=fsm)
        super()._adopt(snapshot)
        self._state: M = state
        # the state as loaded, in the current version: what "unsaved changes" compare
        # against (a state upcast on load is not a change of the user's)
        self._baseline = schema.dump(state, snapshot.agent_id)
        self._plain = self._baseline  # (the model's document as last made by a write)
        #: the stored document (at the current version) when it holds keys the model
        #: does not declare, at any depth: every write stores them back unchanged
        #: (statekeeper never deletes a field the code could not see; see .carry).
        #: None when it holds none: the writes then carry nothing (a key another
        #: writer adds makes this agent's next write conflict, and reload)
        self._stored: dict[str, Any] | None = None
        if schema.adapter.carries and {MODEL_KEY: schema.name, **stored} != self._baseline:
            self._stored = stored
        #: the keys a downcast dropped that this model cannot carry (it keeps no key it
        #: was not given): a write would delete them, so it is refused (see _document)
        self._drops: list[str] = []
        if not schema.adapter.carries and version > schema.version:  # (the rare case)
            dropped = schema.convert_keeping(snapshot.data, version, agent_id=snapshot.agent_id)[1]
            self._drops = sorted(dropped)
        #: the state's list items that hold undeclared keys, by identity (see .carry)
        self._known = schema.adapter.known(state, self._baseline, self._stored)
        #: the schema version of the stored state this agent was loaded from
        self.stored_version = version

    @property
    def state(self) -> M:
        """The agent's typed state (mutate it, or assign a new one)."""
        return self._state

    @state.setter
    def state(self, value: M) -> None:
        self.schema.adapter.check(value, self.agent_id)  # fail now, not at the next write
        self._state = value

    @property
    def fsm_state(self) -> Any:
        """The machine's current state (``DurableAgent.state`` of an untyped agent)."""
        return self.machine.current_state

    @property
    def dirty(self) -> bool:
        """True when :attr:`state` has changes not yet written."""
        return bool(patch.diff(self._baseline, self.schema.dump(self._state, self.agent_id)))

    async def _write(
        self,
        event_type: str,
        info: dict[str, Any],
        fsm_state: str | None,
        *args: Any,
        **kwargs: Any,
    ) -> AppendResult:
        if fsm_state is None and self._fsm_renamed:  # (see _adopt)
            fsm_state = self.machine.state_value
        result = await super()._write(event_type, info, fsm_state, *args, **kwargs)
        if not result.duplicate:  # (a duplicate refreshed: _adopt set the baseline)
            self._fsm_renamed = False
            # the baseline is the model's own document; the stored one, with the
            # undeclared keys carried, is what the next write carries them from
            self._baseline = self._plain
            if self._stored is not None:  # (still holding keys to carry?)
                stored = self._committed
                self._stored = stored if stored != self._plain else None
                self._known = self.schema.adapter.known(self._state, self._plain, self._stored)
            if self._expiring:  # the engine's TTL follows the state's expiry
                await apply_ttl(self.store, self.agent_id, self._state)
        return result

    def _document(self) -> dict[str, Any]:
        # validated against the last validated document: only what changed is checked
        schema = self.schema
        if self._drops:  # (read through downcasters that dropped keys: see _adopt)
            raise DowncastDropsFields(
                schema.name, self.stored_version, schema.version, self._drops,
                agent_id=self.agent_id, seq=self.seq,
            )  # fmt: skip
        plain = schema.dump(self._state, self.agent_id, baseline=self._baseline)
        self._plain = plain
        doc = schema.adapter.keep(self._state, plain, self._stored, self.agent_id, self._known)
        self.data = doc
        return doc

    def __repr__(self) -> str:
        return (
            f"TypedAgent({self.agent_id!r}, model={self.schema.name!r}, "
            f"state={self.machine.state_value!r}, seq={self.seq})"
        )


async def open_typed_agent(
    store: StateStore,
    agent_id: str,
    machine: AgentStateMachine[Any, Any] | None,
    model: type[M] | ModelSchema[M],
    initial_state: M | None = None,
    *,
    schemas: SchemaRegistry | None = None,
    lease: Leased | None = None,
    strict: bool = True,
) -> TypedAgent[M]:
    """Load the typed agent, creating it with ``initial_state`` (default: the model
    built from its defaults) when it does not exist. See :meth:`StateStore.agent`."""
    from ..machine import AgentStateMachine

    store._check_open()
    check_agent_id(agent_id)
    schema = schema_of(model, schemas)
    if machine is None:
        machine = AgentStateMachine()
    elif not isinstance(machine, AgentStateMachine):
        raise InvalidArgument(
            "machine", f"machine must be an AgentStateMachine, not {type(machine).__name__}"
        )
    if type(strict) is not bool:
        raise InvalidArgument("strict", f"strict must be a bool, not {type(strict).__name__}")
    if initial_state is not None:
        document = schema.dump(initial_state, agent_id)
    snapshot = await store.get(agent_id)
    while snapshot is not None and _expired(schema, snapshot):
        try:
            # gone, as the engine's TTL would have made it: only the state judged
            # expired (a session touched since by another worker is not)
            checksum = await judged_again(store, schema, agent_id, snapshot.seq)
            if checksum is None:  # written since (or made again): judged again
                snapshot = await store.get(agent_id)
                continue
            with delete_only_at(snapshot.seq, checksum):  # (that head record alone)
                await store.delete(agent_id)
            snapshot = None
        except AgentOnHold:
            break  # a legal hold exempts it from every purge: it is opened as it stands
        except ConflictError:
            snapshot = await store.get(agent_id)  # written since: judged again
    if snapshot is None:
        if initial_state is None:
            default = schema.adapter.default()
            if default is None:
                raise InvalidArgument(
                    "initial_state",
                    f"agent {agent_id!r} does not exist and {schema.name} has fields "
                    "without defaults: give initial_state",
                )
            document = schema.dump(default, agent_id)
        with contextlib.suppress(ConflictError):  # another worker created it first
            await store.create(
                agent_id,
                document,
                fsm_state=machine.state_value,
                schema_version=schema.version,
                lease=lease,
            )
        snapshot = await store.load(agent_id)
        if expiring(schema.adapter.model):
            stored = schema.load(
                snapshot.data, snapshot.schema_version, agent_id=agent_id, seq=snapshot.seq
            )
            await apply_ttl(store, agent_id, stored)
    return TypedAgent(store, agent_id, machine, snapshot, schema=schema, lease=lease, strict=strict)


def _expired(schema: ModelSchema[Any], snapshot: Snapshot) -> bool:
    """True when the stored latest state is of an expiring model and has expired."""
    if not expiring(schema.adapter.model):
        return False
    try:
        state = schema.load(
            snapshot.data, snapshot.schema_version, agent_id=snapshot.agent_id, seq=snapshot.seq
        )
    except SchemaError:
        return False  # (loading it reports the problem)
    return is_expired(state)


@dataclasses.dataclass(frozen=True, slots=True)
class TypedSnapshot(Generic[M]):
    """A stored state loaded as its model: ``state`` at the current schema version,
    ``stored_version`` the version it was stored under."""

    agent_id: str
    seq: int
    state: M
    fsm_state: str | None
    stored_version: int
    updated_at: float


class TypedStates(Generic[M]):
    """The store's ``load``/``get``/``save``/``create`` for one model.

    >>> import asyncio, dataclasses
    >>> from statekeeper import StateStore
    >>> from statekeeper.schema import TypedStates
    >>> @dataclasses.dataclass
    ... class Counter:
    ...     count: int = 0
    >>> async def main():
    ...     async with StateStore("memory://") as store:
    ...         counters = TypedStates(store, Counter)
    ...         await counters.save("c-1", Counter(count=2))
    ...         return await counters.load("c-1")
    >>> asyncio.run(main())
    Counter(count=2)
    """

    def __init__(
        self,
        store: StateStore,
        model: type[M] | ModelSchema[M],
        *,
        schemas: SchemaRegistry | None = None,
    ) -> None:
        self.store = store
        self.schema: ModelSchema[M] = schema_of(model, schemas)
        #: per state this loaded: its list items holding undeclared keys, by identity,
        #: so that a save of it matches each wherever it moved (see .carry)
        #: (by id: a model need not be hashable; dropped when the state is collected)
        self._known: dict[int, tuple[weakref.ref[Any], Known]] = {}

    def _typed(self, snap: Snapshot) -> TypedSnapshot[M]:
        schema = self.schema
        version = snap.schema_version
        state, cast = schema.load_keeping(snap.data, version, agent_id=snap.agent_id, seq=snap.seq)
        adapter = schema.adapter
        if adapter.carries:
            known = adapter.known(state, adapter.dump_validated(state), cast)
            if known:
                key, table = id(state), self._known
                with contextlib.suppress(TypeError):  # (a TypedDict: a dict, no weakref)
                    table[key] = (weakref.ref(state, lambda _r: table.pop(key, None)), known)
        return TypedSnapshot(
            snap.agent_id,
            snap.seq,
            state,
            schema.state_name(snap.fsm_state, version),
            version,
            snap.updated_at,
        )

    async def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> M:
        """The agent's state as the model (latest, or at ``at_seq``/``at_time``)."""
        return (await self.load_snapshot(agent_id, at_seq=at_seq, at_time=at_time)).state

    async def load_snapshot(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> TypedSnapshot[M]:
        """The agent's state with its seq, FSM state and stored schema version. The
        latest state of an expired agent (see :mod:`.expiry`) is not found."""
        typed = self._typed(await self.store.load(agent_id, at_seq=at_seq, at_time=at_time))
        if at_seq is None and at_time is None and is_expired(typed.state):
            raise AgentNotFound(agent_id)
        return typed

    async def get(self, agent_id: str) -> M | None:
        """The agent's latest state as the model, or None when it does not exist (or
        has expired, see :mod:`.expiry`)."""
        snap = await self.store.get(agent_id)
        if snap is None:
            return None
        state = self._typed(snap).state
        return None if is_expired(state) else state

    def _dump(
        self,
        state: M,
        agent_id: str,
        operation: str,
    ) -> dict[str, Any]:
        """``state`` validated and dumped; a state that fails validation is observed
        as a refused ``operation`` (metrics, spans) before its error is raised."""
        try:
            document: dict[str, Any] = self.schema.dump(state, agent_id)
        except StatekeeperError as exc:
            refused(self.store, operation, agent_id, exc)
            raise
        return document

    async def save(
        self,
        agent_id: str,
        state: M,
        *,
        fsm_state: str | None = None,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
        actor: str | None = None,
        lease: Leased | None = None,
    ) -> AppendResult:
        """Validate ``state`` and make it the agent's state at the current schema
        version (only the difference is written). The stored keys the model does not
        declare are kept as they are. See :meth:`StateStore.save`."""
        document = self._dump(state, agent_id, "save")
        if fsm_state is None and self.schema.state_renames:
            fsm_state = await self._renamed_state(agent_id)
        # carried onto the record the save is made on (and checked against its version)
        token = SAVE_CARRY.set(self._carry(agent_id, state, document))
        try:
            result = await self.store.save(
                agent_id,
                document,
                fsm_state=fsm_state,
                expected_seq=expected_seq,
                idempotency_key=idempotency_key,
                actor=actor,
                schema_version=self.schema.version,
                lease=lease,
            )
        except SchemaError:  # (refused by the carry: stored by newer code, see _carry)
            earlier = None
            if idempotency_key is not None:  # a retry of a save that landed before?
                earlier = await self.store.find_key(agent_id, idempotency_key)
            if earlier is None:
                raise
            return earlier  # (duplicate=True, as the store's own retry check answers)
        finally:
            SAVE_CARRY.reset(token)
        await apply_ttl(self.store, agent_id, state)
        return result

    async def _renamed_state(self, agent_id: str) -> str | None:
        """The stored machine state's current name when a rename changed it: a save
        stamps the current version, read through no rename (one read, only for a
        model whose machine states were renamed)."""
        snap = await self.store.get(agent_id)
        if snap is None or snap.schema_version >= self.schema.version:
            return None
        name = self.schema.state_name(snap.fsm_state, snap.schema_version)
        return name if name != snap.fsm_state else None

    def _carry(
        self, agent_id: str, state: M, document: dict[str, Any]
    ) -> Callable[[Callable[[], Any], int | None], Mapping[str, Any]]:
        """What the save writes on a stored state (:data:`~statekeeper.store.writes.
        SAVE_CARRY`): ``document`` with the keys of it the model does not declare put
        back, at any depth — on the state the write is made on, read by the save itself
        (a cache hit, or the read the write makes anyway: no read of its own).

        A state stored by newer code (a higher schema version) that this code cannot
        read — no downcaster (:class:`~statekeeper.errors.SchemaVersionTooNew`), or
        stored under a model name the newer code renamed it to
        (:class:`~statekeeper.errors.SchemaMismatch`) — is refused, nothing written:
        replacing it would drop, unseen, every field only the newer version knows and
        take the agent back to this older version — during a rolling deploy, the new
        code's writes lost without an error."""
        schema = self.schema
        entry = self._known.get(id(state))
        known = entry[1] if entry is not None and entry[0]() is state else None
        carries = schema.adapter.carries

        def carry(stored: Callable[[], Any], version: int | None) -> Mapping[str, Any]:
            newer = version is not None and version > schema.version
            if not carries and not newer:
                return document  # (nothing to carry, nothing to check)
            try:
                cast, dropped = schema.convert_keeping(
                    stored(), version or schema.version, agent_id=agent_id
                )
            except SchemaError as exc:
                if not newer:
                    return document  # (not loadable: replaced, as an untyped save would)
                # stored by newer code this code cannot read (no downcaster, or under
                # a model name the newer code renamed): never replaced unseen
                exc.add_note(f"TypedStates.save of agent {agent_id!r}: nothing was written")
                raise
            if not carries:
                if dropped:  # (it keeps no key it was not given: they would be deleted)
                    raise DowncastDropsFields(
                        schema.name, version or 0, schema.version, sorted(dropped),
                        agent_id=agent_id,
                    )  # fmt: skip
                return document  # (read through a downcaster: this code's own version)
            if dropped:  # (what the downcasters dropped: this code never saw it)
                cast = {**cast, **dropped}
            return schema.adapter.keep(state, document, cast, agent_id, known)

        return carry

    async def create(
        self,
        agent_id: str,
        state: M,
        *,
        fsm_state: str | None = None,
        idempotency_key: str | None = None,
        actor: str | None = None,
        lease: Leased | None = None,
    ) -> AppendResult:
        """Start the agent's stream with ``state`` (ConflictError if it exists)."""
        document = self._dump(state, agent_id, "create")
        result = await self.store.create(
            agent_id,
            document,
            fsm_state=fsm_state,
            schema_version=self.schema.version,
            idempotency_key=idempotency_key,
            actor=actor,
            lease=lease,
        )
        await apply_ttl(self.store, agent_id, state)
        return result

    def history(self, agent_id: str, *, after_seq: int = 0) -> AsyncIterator[Event]:
        """The agent's events with types, machine states and custom event data brought
        to the current schema version (see :func:`statekeeper.schema.events.upcast_event`)."""
        from .events import history

        return history(self.store, agent_id, self.schema, after_seq=after_seq)
