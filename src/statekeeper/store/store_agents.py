"""The store's side of an agent with a state machine: :meth:`StateStore.agent`, and
what a :class:`~.agent.DurableAgent` or the LangGraph saver asks of the stream this
store last read or wrote (its link, checksum and head tag at a seq).

Methods of :class:`~.store.StateStore`, written here as functions and bound in its class
body (as :func:`.copies.public_copy` is in :class:`~.reads.ReadPath`; a subclass
overrides them as any method). They take ``self: StateStore``: they hand the store to
the tools typed for it. A function here never shares its name with a global it calls
(``tests/store/test_store_parts.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ..errors import ConfigurationError
from .writes import Leased

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from ..schema.agent import TypedAgent
    from ..schema.registry import ModelSchema, SchemaRegistry
    from .agent import DurableAgent
    from .store import StateStore

__all__ = ["agent"]

_M = TypeVar("_M")


def _link_at(self: StateStore, agent_id: str, seq: int) -> bytes | None:
    """The chain link at ``seq`` of ``agent_id``'s stream as this store last read or
    wrote it (its pinned or cached record: no read), None when not known. What a
    :class:`DurableAgent` remembers to tell its stream from a re-created one."""
    record = self._unflushed.get(agent_id) or self._cache.peek(agent_id)
    return record.link if record is not None and record.seq == seq else None


def _checksum_at(self: StateStore, agent_id: str, seq: int) -> bytes | None:
    """The stored checksum of the event at ``seq`` of ``agent_id``'s stream as this
    store last read or wrote it (its pinned or cached record at ``seq``: no read),
    None when not known: what a delete conditional on that head event compares
    (:func:`~statekeeper.store.conditional.delete_only_at`)."""
    record = self._unflushed.get(agent_id) or self._cache.peek(agent_id)
    return record.checksum if record is not None and record.seq == seq else None


def _tag_at(self: StateStore, agent_id: str, seq: int) -> bytes | None:
    """The head tag stored with seq ``seq`` of ``agent_id``'s stream as this store
    last read or wrote it (its pinned or cached record, the tag known: no read),
    None when not known. What the LangGraph saver remembers of a thread's stream to
    tell it from one deleted and made again up to the same seq (:meth:`_head_tag`
    gives the stored one): a head seq alone cannot."""
    record = self._unflushed.get(agent_id) or self._cache.peek(agent_id)
    if record is None or record.seq != seq or not record.tag_known:
        return None
    return record.tag


async def _head_tag(self: StateStore, agent_id: str) -> tuple[int, bytes | None]:
    """:meth:`head` with the head tag stored with it (one read, the same row or
    key: ``Backend.head_tag``); while a write of the agent is buffered, its seq and
    tag (no read, as :meth:`head` counts it). A wrapper store checks and maps it as
    it does :meth:`head` (a governed store: read permission; a namespace: the id)."""
    await self._ready(agent_id)
    pinned = self._unflushed.get(agent_id)
    if pinned is not None:
        return pinned.seq, pinned.tag if pinned.tag_known else None
    return await self.backend.head_tag(agent_id)


@overload
async def agent(
    self: StateStore,
    agent_id: str,
    machine: AgentStateMachine[Any, Any] | None = None,
    *,
    initial_data: Mapping[str, Any] | None = None,
    lease: Leased | None = None,
    strict: bool = True,
) -> DurableAgent: ...


@overload
async def agent(
    self: StateStore,
    agent_id: str,
    machine: AgentStateMachine[Any, Any] | None = None,
    *,
    model: type[_M] | ModelSchema[_M],
    initial_state: _M | None = None,
    schemas: SchemaRegistry | None = None,
    lease: Leased | None = None,
    strict: bool = True,
) -> TypedAgent[_M]: ...


async def agent(
    self: StateStore,
    agent_id: str,
    machine: AgentStateMachine[Any, Any] | None = None,
    *,
    initial_data: Mapping[str, Any] | None = None,
    model: type[Any] | ModelSchema[Any] | None = None,
    initial_state: Any = None,
    schemas: SchemaRegistry | None = None,
    lease: Leased | None = None,
    strict: bool = True,
) -> DurableAgent:
    """Load the agent (or create it with ``initial_data``) bound to ``machine``;
    with ``lease``, every write of the agent is fenced by it.

    An event the machine does not allow makes ``agent.transition`` raise
    :class:`~statekeeper.errors.InvalidTransition` (nothing is written, pending
    data changes stay pending); ``strict=False`` gives the bare machine's API
    instead, where it returns False.

    With ``model`` (a pydantic model, dataclass or TypedDict class, or a
    :class:`~statekeeper.schema.ModelSchema`) the agent is a
    :class:`~statekeeper.schema.TypedAgent` whose ``state`` is the model, created
    with ``initial_state`` when new (see ``docs/schema.md``)."""
    if model is not None:
        if initial_data is not None:
            raise ConfigurationError("give initial_data (untyped) or model, not both")
        from ..schema.agent import open_typed_agent

        return await open_typed_agent(
            self, agent_id, machine, model, initial_state,
            schemas=schemas, lease=lease, strict=strict,
        )  # fmt: skip
    if initial_state is not None or schemas is not None:
        raise ConfigurationError("initial_state and schemas need model=")
    from .agent import DurableAgent

    return await DurableAgent.open(
        self, agent_id, machine, initial_data, lease=lease, strict=strict
    )
