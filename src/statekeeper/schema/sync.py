"""Typed states, blocking: :class:`SyncTypedStates` is :class:`~.agent.TypedStates` over
a :class:`~statekeeper.SyncStateStore` — each call runs the async class's coroutine on
the sync store's loop (the validation, the schema versions and their upcasters, the
keys a model does not declare kept on save: all one implementation).

>>> import dataclasses
>>> from statekeeper import SyncStateStore
>>> @dataclasses.dataclass
... class Counter:
...     count: int = 0
>>> with SyncStateStore("memory://") as store:
...     counters = SyncTypedStates(store, Counter)
...     _ = counters.save("c-1", Counter(count=2))
...     counters.load("c-1")
Counter(count=2)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, TypeVar

from ..errors import InvalidArgument
from ..store.sync import SyncStateStore
from .agent import TypedSnapshot, TypedStates

if TYPE_CHECKING:
    from ..records import AppendResult, Event
    from ..store.store import Leased
    from .registry import ModelSchema, SchemaRegistry

__all__ = ["SyncTypedStates"]

M = TypeVar("M")


class SyncTypedStates(Generic[M]):
    """:class:`~.agent.TypedStates`, blocking: the store's ``load``/``get``/``save``/
    ``create`` for one model, from sync code."""

    def __init__(
        self,
        store: SyncStateStore,
        model: type[M] | ModelSchema[M],
        *,
        schemas: SchemaRegistry | None = None,
    ) -> None:
        if not isinstance(store, SyncStateStore):
            raise InvalidArgument(
                "store", f"store must be a SyncStateStore, not {type(store).__name__}"
            )
        #: the async typed states this drives
        self.states: TypedStates[M] = TypedStates(store.store, model, schemas=schemas)
        self._portal = store._portal

    @property
    def schema(self) -> ModelSchema[M]:
        """The model's schema (its version and upcasters)."""
        return self.states.schema

    def load(self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None) -> M:
        """See :meth:`TypedStates.load <statekeeper.schema.TypedStates.load>`."""
        return self._portal.call(self.states.load(agent_id, at_seq=at_seq, at_time=at_time))

    def load_snapshot(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> TypedSnapshot[M]:
        """See :meth:`TypedStates.load_snapshot <statekeeper.schema.TypedStates.load_snapshot>`."""
        return self._portal.call(
            self.states.load_snapshot(agent_id, at_seq=at_seq, at_time=at_time)
        )

    def get(self, agent_id: str) -> M | None:
        """See :meth:`TypedStates.get <statekeeper.schema.TypedStates.get>`."""
        return self._portal.call(self.states.get(agent_id))

    def save(
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
        """See :meth:`TypedStates.save <statekeeper.schema.TypedStates.save>`."""
        return self._portal.call(
            self.states.save(
                agent_id,
                state,
                fsm_state=fsm_state,
                expected_seq=expected_seq,
                idempotency_key=idempotency_key,
                actor=actor,
                lease=lease,
            )
        )

    def create(
        self,
        agent_id: str,
        state: M,
        *,
        fsm_state: str | None = None,
        idempotency_key: str | None = None,
        actor: str | None = None,
        lease: Leased | None = None,
    ) -> AppendResult:
        """See :meth:`TypedStates.create <statekeeper.schema.TypedStates.create>`."""
        return self._portal.call(
            self.states.create(
                agent_id,
                state,
                fsm_state=fsm_state,
                idempotency_key=idempotency_key,
                actor=actor,
                lease=lease,
            )
        )

    def history(self, agent_id: str, *, after_seq: int = 0) -> Iterator[Event]:
        """See :meth:`TypedStates.history <statekeeper.schema.TypedStates.history>`."""
        return self._portal.iterate(self.states.history(agent_id, after_seq=after_seq))
