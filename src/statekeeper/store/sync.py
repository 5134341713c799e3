"""Blocking facades over :class:`StateStore` and :class:`DurableAgent`.

Each method hands the *same* coroutine the async API runs to a :class:`Portal` (a
private event loop on a background thread) and waits for it: the logic exists once.
Use these from scripts, notebooks or threaded servers; inside ``async`` code use the
async classes directly.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..backends.base import Backend, Health
from ..records import AgentInfo, AppendResult, Event, Snapshot
from .agent import DurableAgent
from .portal import Portal
from .store import StateStore, StoreStats, VerifyReport

if TYPE_CHECKING:
    from ..machine import AgentStateMachine

__all__ = ["SyncDurableAgent", "SyncStateStore"]


class SyncStateStore:
    """The :class:`StateStore` API, blocking. Accepts the same arguments.

    >>> store = SyncStateStore("memory://")
    >>> store.save("agent-1", {"messages": ["hi"]}).last_seq
    1
    >>> store.load("agent-1").data
    {'messages': ['hi']}
    >>> store.close()
    """

    def __init__(self, backend: Backend | str | None = None, **options: Any) -> None:
        self._portal = Portal()
        try:
            self.store: StateStore = self._portal.call(_make_store(backend, options))
        except BaseException:
            self._portal.stop()
            raise

    def __enter__(self) -> SyncStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush, close the backend and stop the background loop."""
        if not self._portal.running:
            return
        try:
            self._portal.call(self.store.close())
        finally:
            self._portal.stop()

    def create(
        self, agent_id: str, data: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> AppendResult:
        """See :meth:`StateStore.create`."""
        return self._portal.call(self.store.create(agent_id, data, **kwargs))

    def save(self, agent_id: str, data: Mapping[str, Any], **kwargs: Any) -> AppendResult:
        """See :meth:`StateStore.save`."""
        return self._portal.call(self.store.save(agent_id, data, **kwargs))

    def append(
        self, agent_id: str, event_type: str, info: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> AppendResult:
        """See :meth:`StateStore.append`."""
        return self._portal.call(self.store.append(agent_id, event_type, info, **kwargs))

    def load(
        self, agent_id: str, *, at_seq: int | None = None, at_time: float | None = None
    ) -> Snapshot:
        """See :meth:`StateStore.load`."""
        return self._portal.call(self.store.load(agent_id, at_seq=at_seq, at_time=at_time))

    def get(self, agent_id: str) -> Snapshot | None:
        """See :meth:`StateStore.get`."""
        return self._portal.call(self.store.get(agent_id))

    def head(self, agent_id: str) -> int:
        """See :meth:`StateStore.head`."""
        return self._portal.call(self.store.head(agent_id))

    def history(
        self, agent_id: str, *, after_seq: int = 0, to_seq: int | None = None
    ) -> Iterator[Event]:
        """See :meth:`StateStore.history`."""
        return self._portal.iterate(
            self.store.history(agent_id, after_seq=after_seq, to_seq=to_seq)
        )

    def list_agents(self, after: str | None = None, limit: int = 100) -> list[AgentInfo]:
        """See :meth:`StateStore.list_agents`."""
        return self._portal.call(self.store.list_agents(after, limit))

    def iter_agents(self) -> Iterator[AgentInfo]:
        """See :meth:`StateStore.iter_agents`."""
        return self._portal.iterate(self.store.iter_agents())

    def count_agents(self) -> int:
        """See :meth:`StateStore.count_agents`."""
        return self._portal.call(self.store.count_agents())

    def delete(self, agent_id: str) -> bool:
        """See :meth:`StateStore.delete`."""
        return self._portal.call(self.store.delete(agent_id))

    def snapshot(self, agent_id: str) -> int:
        """See :meth:`StateStore.snapshot`."""
        return self._portal.call(self.store.snapshot(agent_id))

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

    def agent(
        self,
        agent_id: str,
        machine: AgentStateMachine[Any, Any] | None = None,
        *,
        initial_data: Mapping[str, Any] | None = None,
        lease: Any = None,
        strict: bool = True,
    ) -> SyncDurableAgent:
        """See :meth:`StateStore.agent` (``lease``: fence every write of the agent;
        ``strict=False``: a refused transition returns False instead of raising)."""
        inner = self._portal.call(
            self.store.agent(
                agent_id, machine, initial_data=initial_data, lease=lease, strict=strict
            )
        )
        return SyncDurableAgent(inner, self._portal)


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
        self, event: Any, metadata: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> bool:
        """See :meth:`DurableAgent.transition`."""
        return self._portal.call(self.agent.transition(event, metadata, **kwargs))

    def save(self, info: Mapping[str, Any] | None = None, **kwargs: Any) -> AppendResult | None:
        """See :meth:`DurableAgent.save`."""
        return self._portal.call(self.agent.save(info, **kwargs))

    def record(
        self, event_type: str, info: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> AppendResult:
        """See :meth:`DurableAgent.record`."""
        return self._portal.call(self.agent.record(event_type, info, **kwargs))

    def refresh(self) -> None:
        """See :meth:`DurableAgent.refresh`."""
        self._portal.call(self.agent.refresh())

    def history(self, *, after_seq: int = 0) -> Iterator[Event]:
        """See :meth:`DurableAgent.history`."""
        return self._portal.iterate(self.agent.history(after_seq=after_seq))


async def _make_store(backend: Backend | str | None, options: dict[str, Any]) -> StateStore:
    # Built on the portal's loop so that asyncio objects belong to it.
    return StateStore(backend, **options)
