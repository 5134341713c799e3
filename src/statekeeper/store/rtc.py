"""Run-to-completion for a durable agent's transitions.

A transition of a durable agent is stored after its hooks ran (see :mod:`.agent`). A
hook that fires another transition of the same agent therefore cannot run it at once:
it would be stored first, from a state the outer transition has not stored yet (the
stored history would not link, and replaying it would not give the agent's state).
As in python-statemachine's run-to-completion mode, the event is queued instead and
runs once the transition that queued it is stored, in the order the events were
fired (an event queued by a queued transition's hook goes to the back of the queue).
The hook's ``agent.transition(...)`` returns True at once: the event is queued. A
queued event the machine refuses (strict agents) or whose write fails raises to the
caller of the outer ``agent.transition(...)``, whose own move is stored (a note says
so); the events queued after it are dropped. A transition that is not stored (refused,
or its write failed) drops what its hooks queued.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import DurableAgent

__all__ = ["EventQueue"]

#: a queued transition: event, metadata, idempotency key, actor
Item = tuple[Any, "Mapping[str, Any] | None", "str | None", "str | None"]


class EventQueue:
    """The events a durable agent's hooks fired during its current transition."""

    __slots__ = ("events",)

    def __init__(self) -> None:
        #: None: no transition of the agent is running (nothing can be queued)
        self.events: deque[Item] | None = None

    def put(self, item: Item) -> bool:
        """Queue ``item`` if a transition is running (True), else leave it (False)."""
        events = self.events
        if events is None:
            return False
        event, metadata, key, actor = item
        events.append((event, dict(metadata) if metadata else None, key, actor))
        return True

    async def run(self, agent: DurableAgent, item: Item) -> bool:
        """Run ``item`` (the caller holds the agent's transition lock), then every event
        its hooks (and theirs) queued, each stored before the next fires; whether
        ``item`` moved the agent."""
        events = self.events = deque()
        try:
            moved = await agent._transition(*item)
            while events:
                queued = events.popleft()
                try:
                    await agent._transition(*queued)
                except BaseException as exc:
                    exc.add_note(
                        f"agent {agent.agent_id!r}: {getattr(queued[0], 'value', queued[0])!r} "
                        "was queued by a hook of an earlier transition of this call, which "
                        f"is stored (the agent is in {agent.machine.state_value!r}); "
                        f"{len(events)} event(s) queued after it were dropped"
                    )
                    raise
            return moved
        finally:
            self.events = None
