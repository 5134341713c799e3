"""Blocking facades over :class:`StateStore` and :class:`DurableAgent`.

Each method runs the *same* coroutine the async API runs through a :class:`Portal` (an
event loop run on the calling thread, no thread hop: issue 11): the logic exists once.
Use these from scripts, notebooks or threaded servers; inside ``async`` code use the
async classes directly.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import time
from collections.abc import Callable, Collection, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from ..backends.base import Backend, Health
from ..records import AgentInfo, AppendResult, Event, EventType, FeedEvent, Snapshot
from ..security.highwater import DEFAULT_INTERVAL
from .agent import DurableAgent
from .feed import Subscription
from .feed_cursor import FeedBounds, FeedCursor
from .portal import Portal
from .store import StateStore, StoreStats, StreamDigest, VerifyReport
from .sync_exit import OPEN, close_at_exit
from .sync_intents import SyncIntents

_M = TypeVar("_M")

if TYPE_CHECKING:
    from ..codec import Codec, TypeRegistry
    from ..codec.keys import Keyring
    from ..machine import AgentStateMachine
    from ..schema.agent import TypedAgent
    from ..schema.registry import ModelSchema, SchemaRegistry
    from .durability import Durability
    from .governed import AccessPolicy, AuditSettings
    from .heads import AgentHead, StoredSize
    from .store import Leased
    from .verification import Problem

__all__ = ["SyncDurableAgent", "SyncStateStore", "SyncSubscription"]

logger = logging.getLogger("statekeeper.store.sync")


class SyncStateStore(SyncIntents):
    """The :class:`StateStore` API, blocking, with the same signatures (a test compares
    them with the async ones).

    >>> store = SyncStateStore("memory://")
    >>> store.save("agent-1", {"messages": ["hi"]}).last_seq
    1
    >>> store.load("agent-1").data
    {'messages': ['hi']}
    >>> store.close()
    """

    def __init__(
        self,
        backend: Backend | str | None = None,
        *,
        durability: Durability | str = "sync",
        snapshot_every: int | Literal["bounded", "cost", "auto"] = "bounded",
        snapshot_bytes: int | None = 256 * 1024,
        cache_size: int = 1024,
        validate_cache: bool = True,
        flush_size: int = 100,
        flush_interval: float = 1.0,
        clock: Callable[[], float] = time.time,
        codec: Codec | None = None,
        write_retries: int = 8,
        keyring: Keyring | None = None,
        compression: str | None = None,
        format: str = "json",
        types: TypeRegistry | Iterable[type] | None = None,
        checksum: str | None = None,
        full_snapshot_every: int = 1,
        max_event_bytes: int | None = None,
        max_snapshot_bytes: int | None = None,
        max_state_bytes: int | None = None,
        states: Iterable[Any] | None = None,
        witness: str | os.PathLike[str] | bool | None = None,
        witness_interval: float = DEFAULT_INTERVAL,
        principal: str | None = None,
        policy: AccessPolicy | None = None,
        audit: AuditSettings | None = None,
        namespace: str | None = None,
        settle_after: float | None = None,
    ) -> None:
        """See :class:`StateStore`."""
        options = {k: v for k, v in locals().items() if k not in ("self", "backend")}
        self._portal = Portal()
        #: what :meth:`close` ends first, on the loop (the leases of the sync lease
        #: managers over this store: their heartbeats run there)
        self._closing: dict[int, tuple[object, Callable[[], Coroutine[Any, Any, object]]]] = {}
        try:
            self.store: StateStore = self._portal.call(_make_store(backend, options))
        except BaseException:
            self._portal.stop()
            raise
        # collected without close (by every face too): the store is closed on its loop
        self._portal.on_abandon(functools.partial(_close_store, self.store, self._closing))
        # one never closed keeps its buffered writes, and ends its loop's tasks, at exit
        self._at_exit = close_at_exit(self)

    def __enter__(self) -> SyncStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush, close the backend and stop the background loop.

        Closing from one thread while others are inside calls of this store (or of a sync face
        over it): new calls are refused with :class:`~statekeeper.errors.StoreClosed`; the calls
        in flight finish first — a save in flight lands and its caller gets its result, a step's
        or an update's function (in its caller's thread) returns and is recorded — except waits
        that may not end by themselves (a live subscription's next event), which end with
        ``StoreClosed``. A write acknowledged before ``close`` returns is durable (``close``
        flushes); one whose caller got ``StoreClosed`` was never started. Then the leases the
        sync lease managers hold are released, the store closes and the loop's thread ends. In a
        process forked from the one that opened it, ``close`` only marks it closed (the
        backend's connections are the parent's).

        One never closed (or refused on its own loop: :class:`ConfigurationError`) is flushed and
        closed at exit (:mod:`.sync_exit`), and closed once it and its faces are collected."""
        portal = self._portal
        portal.refuse_on_loop("closing a sync store")  # (first: then still closed at exit)
        OPEN.discard(self)
        atexit.unregister(self._at_exit)
        if portal.forked:
            portal.stop()
            return
        if not portal.begin_close():
            portal.wait_stopped()  # (closing in another thread)
            return
        try:
            portal.drain()
            portal.call(_close_store(self.store, self._closing))
        finally:
            portal.stop()

    def _close_with(self, key: object, closer: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Have :meth:`close` run ``closer()`` first, on the store's loop, unless
        :meth:`_close_alone` takes ``key`` out before (a sync face over this store that
        holds something open on the loop: a lease and its heartbeat)."""
        self._closing[id(key)] = (key, closer)  # (the key kept: its id stays its own)

    def _close_alone(self, key: object) -> None:
        """``key`` was closed by its owner: :meth:`close` need not close it."""
        self._closing.pop(id(key), None)

    def create(
        self,
        agent_id: str,
        data: Mapping[str, Any] | None = None,
        *,
        fsm_state: str | None = None,
        schema_version: int = 1,
        idempotency_key: str | None = None,
        actor: str | None = None,
        lease: Leased | None = None,
    ) -> AppendResult:
        """See :meth:`StateStore.create`."""
        return self._portal.call(
            self.store.create(
                agent_id,
                data,
                fsm_state=fsm_state,
                schema_version=schema_version,
                idempotency_key=idempotency_key,
                actor=actor,
                lease=lease,
            )
        )

    def save(
        self,
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
        """See :meth:`StateStore.save`."""
        return self._portal.call(
            self.store.save(
                agent_id,
                data,
                fsm_state=fsm_state,
                expected_seq=expected_seq,
                idempotency_key=idempotency_key,
                event_type=event_type,
                actor=actor,
                info=info,
                schema_version=schema_version,
                lease=lease,
            )
        )

    def append(
        self,
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
        """See :meth:`StateStore.append`."""
        return self._portal.call(
            self.store.append(
                agent_id,
                event_type,
                info,
                ops=ops,
                fsm_state=fsm_state,
                expected_seq=expected_seq,
                idempotency_key=idempotency_key,
                actor=actor,
                schema_version=schema_version,
                lease=lease,
            )
        )

    def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> Snapshot:
        """See :meth:`StateStore.load`."""
        return self._portal.call(self.store.load(agent_id, at_seq=at_seq, at_time=at_time))

    def get(self, agent_id: str) -> Snapshot | None:
        """See :meth:`StateStore.get`."""
        return self._portal.call(self.store.get(agent_id))

    def get_many(self, agent_ids: Sequence[str]) -> list[Snapshot | None]:
        """See :meth:`StateStore.get_many`."""
        return self._portal.call(self.store.get_many(agent_ids))

    def head(self, agent_id: str) -> int:
        """See :meth:`StateStore.head`."""
        return self._portal.call(self.store.head(agent_id))

    def head_state(self, agent_id: str) -> AgentHead | None:
        """See :meth:`StateStore.head_state`."""
        return self._portal.call(self.store.head_state(agent_id))

    def head_states(self, agent_ids: Sequence[str]) -> list[AgentHead | None]:
        """See :meth:`StateStore.head_states`."""
        return self._portal.call(self.store.head_states(agent_ids))

    def stored_size(self, agent_id: str) -> StoredSize:
        """See :meth:`StateStore.stored_size`."""
        return self._portal.call(self.store.stored_size(agent_id))

    def find_key(self, agent_id: str, key: str) -> AppendResult | None:
        """See :meth:`StateStore.find_key`."""
        return self._portal.call(self.store.find_key(agent_id, key))

    def digest(self, agent_id: str, at_seq: int | None = None) -> StreamDigest:
        """See :meth:`StateStore.digest`."""
        return self._portal.call(self.store.digest(agent_id, at_seq))

    def check_digest(self, expected: StreamDigest) -> str | None:
        """See :meth:`StateStore.check_digest`."""
        return self._portal.call(self.store.check_digest(expected))

    def witness_problems(self, agent_ids: list[str] | None = None) -> list[Problem]:
        """See :meth:`StateStore.witness_problems`."""
        return self._portal.call(self.store.witness_problems(agent_ids))

    def orphan_problems(self, verified: Collection[str] = ()) -> list[Problem]:
        """See :meth:`StateStore.orphan_problems`."""
        return self._portal.call(self.store.orphan_problems(verified))

    def history(
        self, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[Event]:
        """See :meth:`StateStore.history`."""
        return self._portal.iterate(
            self.store.history(agent_id, after_seq=after_seq, to_seq=to_seq)
        )

    def subscribe(
        self,
        from_position: int | FeedCursor | str = 0,
        *,
        namespace: str | None = None,
        agent_prefix: str | None = None,
        event_types: Iterable[str] | None = None,
        batch_size: int = 256,
        stop_at_head: bool = False,
    ) -> SyncSubscription:
        """See :meth:`StateStore.subscribe`: the same subscription, driven from here; its
        :attr:`~SyncSubscription.cursor` is the resume point, as on the async one."""
        return SyncSubscription(
            self.store.subscribe(
                from_position,
                namespace=namespace,
                agent_prefix=agent_prefix,
                event_types=event_types,
                batch_size=batch_size,
                stop_at_head=stop_at_head,
            ),
            self._portal,
        )

    def feed_bounds(self) -> tuple[int, int]:
        """See :meth:`StateStore.feed_bounds`."""
        return self._portal.call(self.store.feed_bounds())

    def feed_cursor_bounds(self) -> FeedBounds:
        """See :meth:`StateStore.feed_cursor_bounds`."""
        return self._portal.call(self.store.feed_cursor_bounds())

    def trim_feed(self, through: int | FeedCursor | str) -> int:
        """See :meth:`StateStore.trim_feed`."""
        return self._portal.call(self.store.trim_feed(through))

    def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """See :meth:`StateStore.list_agents`."""
        return self._portal.call(self.store.list_agents(after, limit))

    def iter_agents(self) -> Iterator[AgentInfo]:
        """See :meth:`StateStore.iter_agents`."""
        return self._portal.iterate(self.store.iter_agents())

    def count_agents(self) -> int:
        """See :meth:`StateStore.count_agents`."""
        return self._portal.call(self.store.count_agents())

    def unlisted_agents(self) -> list[str]:
        """See :meth:`StateStore.unlisted_agents`."""
        return self._portal.call(self.store.unlisted_agents())

    def delete(self, agent_id: str) -> bool:
        """See :meth:`StateStore.delete`."""
        return self._portal.call(self.store.delete(agent_id))

    def snapshot(self, agent_id: str) -> int:
        """See :meth:`StateStore.snapshot`."""
        return self._portal.call(self.store.snapshot(agent_id))

    def settle(self, agent_id: str) -> int | None:
        """See :meth:`StateStore.settle`."""
        return self._portal.call(self.store.settle(agent_id))

    def flush(self) -> None:
        """See :meth:`StateStore.flush`."""
        self._portal.call(self.store.flush())

    def verify(self, agent_ids: list[str] | None = None) -> VerifyReport:
        """See :meth:`StateStore.verify`."""
        return self._portal.call(self.store.verify(agent_ids))

    def health(self) -> Health:
        """See :meth:`StateStore.health`."""
        return self._portal.call(self.store.health())

    def stats(self) -> StoreStats:
        """See :meth:`StateStore.stats`."""
        return self.store.stats()

    @overload
    def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        initial_data: Mapping[str, Any] | None = None,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> SyncDurableAgent: ...

    @overload
    def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        model: type[_M] | ModelSchema[_M],
        initial_state: _M | None = None,
        schemas: SchemaRegistry | None = None,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> SyncTypedAgent[_M]: ...

    def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        initial_data: Mapping[str, Any] | None = None,
        model: type[Any] | ModelSchema[Any] | None = None,
        initial_state: Any = None,
        schemas: SchemaRegistry | None = None,
        lease: Leased | None = None,
        strict: bool = True,
    ) -> SyncDurableAgent:
        """See :meth:`StateStore.agent` (``lease``: fence every write of the agent;
        ``strict=False``: a refused transition returns False instead of raising;
        ``model``: a typed agent, :class:`SyncTypedAgent`)."""
        # one call serves both overloads (the async face checks the combination)
        open_agent: Callable[..., Coroutine[Any, Any, DurableAgent]] = self.store.agent
        inner = self._portal.call(
            open_agent(
                agent_id,
                machine,
                initial_data=initial_data,
                model=model,
                initial_state=initial_state,
                schemas=schemas,
                lease=lease,
                strict=strict,
            )
        )
        if model is None:
            return SyncDurableAgent(inner, self._portal)
        return SyncTypedAgent(cast("TypedAgent[Any]", inner), self._portal)


class SyncSubscription(Iterator[FeedEvent]):
    """A :class:`~statekeeper.store.feed.Subscription` driven from sync code: iterate it
    (each step runs the async subscription's ``__anext__`` on the portal's loop) and
    read :attr:`cursor` (or :attr:`position`) to resume later. The position state lives
    in the one async subscription; this only carries calls to it."""

    def __init__(self, subscription: Subscription, portal: Portal) -> None:
        self.subscription = subscription
        self._portal = portal
        # (a live subscription may wait for ever: closing the store ends the wait)
        self._steps = portal.iterate(subscription, interruptible=True)

    def __iter__(self) -> SyncSubscription:
        return self

    def __next__(self) -> FeedEvent:
        return next(self._steps)

    @property
    def cursor(self) -> FeedCursor:
        """See :attr:`Subscription.cursor <statekeeper.store.feed.Subscription.cursor>`."""
        return self.subscription.cursor

    @property
    def position(self) -> int:
        """See :attr:`Subscription.position <statekeeper.store.feed.Subscription.position>`."""
        return self.subscription.position

    def next_batch(self, limit: int = 256) -> list[FeedEvent]:
        """See :meth:`Subscription.next_batch <statekeeper.store.feed.Subscription.next_batch>`."""
        return self._portal.call(self.subscription.next_batch(limit), interruptible=True)


class SyncDurableAgent:
    """The :class:`DurableAgent` API, blocking (machine callbacks run on the portal)."""

    def __init__(self, agent: DurableAgent, portal: Portal) -> None:
        self.agent = agent
        self._portal = portal

    @property
    def agent_id(self) -> str:
        """The agent's id."""
        return self.agent.agent_id

    @property
    def data(self) -> dict[str, Any]:
        """The working data document (mutate it, then save or transition)."""
        return self.agent.data

    @property
    def machine(self) -> AgentStateMachine[Any, Any]:
        """The bound state machine."""
        return self.agent.machine

    @property
    def state(self) -> Any:
        """The machine's current state."""
        return self.agent.state

    @property
    def seq(self) -> int:
        """The last seq this agent wrote or loaded."""
        return self.agent.seq

    def transition(
        self,
        event: Any,
        metadata: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str | None = None,
    ) -> bool:
        """See :meth:`DurableAgent.transition` (fired from a hook of this agent's own
        transition, which runs on the portal's loop, the event is queued the same way)."""
        if self.agent._queue_from_hook(event, metadata, idempotency_key, actor):
            return True
        return self._portal.call(
            self.agent.transition(event, metadata, idempotency_key=idempotency_key, actor=actor)
        )

    def save(
        self,
        info: Mapping[str, Any] | None = None,
        *,
        event_type: str = EventType.PATCH,
        idempotency_key: str | None = None,
        actor: str | None = None,
    ) -> AppendResult | None:
        """See :meth:`DurableAgent.save`."""
        return self._portal.call(
            self.agent.save(
                info, event_type=event_type, idempotency_key=idempotency_key, actor=actor
            )
        )

    def record(
        self,
        event_type: str,
        info: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        actor: str | None = None,
    ) -> AppendResult:
        """See :meth:`DurableAgent.record`."""
        return self._portal.call(
            self.agent.record(event_type, info, idempotency_key=idempotency_key, actor=actor)
        )

    def bind(self, lease: Leased | None) -> None:
        """See :meth:`DurableAgent.bind`."""
        self.agent.bind(lease)

    def refresh(self) -> None:
        """See :meth:`DurableAgent.refresh`."""
        self._portal.call(self.agent.refresh())

    def history(self, *, after_seq: int = 0) -> Iterator[Event]:
        """See :meth:`DurableAgent.history`."""
        return self._portal.iterate(self.agent.history(after_seq=after_seq))


async def _close_store(
    store: StateStore,
    closing: dict[int, tuple[object, Callable[[], Coroutine[Any, Any, object]]]],
) -> None:
    """Close what the sync faces hold open on the loop (leases), then the store."""
    closers = [closer for _, closer in closing.values()]
    closing.clear()
    for closer in closers:
        try:
            await closer()
        except Exception as exc:  # the store closes all the same
            logger.warning("closing %r with its store failed: %s", closer, exc)
    await store.close()


async def _make_store(backend: Backend | str | None, options: dict[str, Any]) -> StateStore:
    # Built on the portal's loop so that asyncio objects belong to it.
    return StateStore(backend, **options)


class SyncTypedAgent(SyncDurableAgent, Generic[_M]):
    """A :class:`~statekeeper.schema.TypedAgent`, blocking: ``state`` is the model
    instance (validated on every save), ``fsm_state`` the machine's state."""

    agent: TypedAgent[_M]

    def __init__(self, agent: TypedAgent[_M], portal: Portal) -> None:
        super().__init__(agent, portal)

    @property
    def state(self) -> _M:
        """The typed state (assign a new instance, or mutate it, then save)."""
        return self.agent.state

    @state.setter
    def state(self, value: _M) -> None:
        self.agent.state = value

    @property
    def fsm_state(self) -> Any:
        """The machine's current state."""
        return self.agent.fsm_state
