"""The FSM states a store accepts, and the durable agents it handed out."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from ..arguments import check_state_value
from ..errors import InvalidArgument, StatekeeperError, UnknownState

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from .agent import DurableAgent

__all__ = ["Machines"]


class Machines:
    """The store's ``states`` option, and per agent id the machine of the latest
    durable agent opened (its states are then the only ones accepted for it)."""

    def __init__(self, states: frozenset[str] | None) -> None:
        self.states = states
        self._agents: weakref.WeakSet[DurableAgent] = weakref.WeakSet()
        self._machines: weakref.WeakValueDictionary[str, AgentStateMachine[Any, Any]] = (
            weakref.WeakValueDictionary()
        )

    def adopt(self, agent: DurableAgent) -> None:
        """Remember an agent the store opened (for :meth:`state` and :meth:`unsaved`)."""
        self._agents.add(agent)
        self._machines[agent.agent_id] = agent.machine

    def state(self, agent_id: str, fsm_state: object) -> str | None:
        """``fsm_state`` as stored, if it is a state the agent may take."""
        value = check_state_value(fsm_state)
        if value is None:
            return None
        if self.states is not None and value not in self.states:
            known = ", ".join(sorted(self.states))
            raise InvalidArgument(
                "fsm_state", f"fsm_state {value!r} is not one of this store's states ({known})"
            )
        machine = self._machines.get(agent_id)
        if machine is not None:
            try:
                machine.state_for(value)
            except UnknownState as exc:
                raise InvalidArgument(
                    "fsm_state", f"fsm_state of agent {agent_id!r}: {exc}"
                ) from None
        return value

    def lost(self, agent_id: str, error: BaseException) -> None:
        """A buffered write of ``agent_id`` could not be stored: its live durable agents
        hold a state that is not the stored one (see :meth:`DurableAgent._lose`)."""
        for agent in list(self._agents):
            if agent.agent_id == agent_id:
                agent._lose(error)

    def unsaved(self) -> list[str]:
        """Ids of the live durable agents with unwritten data changes."""
        found: set[str] = set()
        for agent in list(self._agents):
            try:
                dirty = agent.dirty
            except StatekeeperError:  # data that cannot even be diffed: not written
                dirty = True
            if dirty:
                found.add(agent.agent_id)
        return sorted(found)
