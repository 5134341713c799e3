"""A listing of every agent that goes on past lost ones.

A listing that meets an agent whose data is lost (:class:`~statekeeper.errors.AgentLost`:
on Redis, its keys evicted or deleted while the store stays) raises, rightly: a listing
that left it out would hide the loss. A whole-store check (``verify``, ``health``) must
not stop there, though: it reports the lost agent as a finding and checks the rest.
:func:`agents_past_lost` yields every agent in id order, and each lost agent's error in
its place; a loss costs one listing round trip per agent up to it (the page it broke
is read again one agent at a time), nothing otherwise."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable

from ..errors import AgentLost
from ..records import AgentInfo

__all__ = ["agents_past_lost"]

PAGE = 1000  # agents per listing round trip (as StateStore.iter_agents)


async def agents_past_lost(
    list_agents: Callable[[str | None, int], Awaitable[list[AgentInfo]]],
    after: str | None = None,
    page: int = PAGE,
) -> AsyncGenerator[AgentInfo | AgentLost, None]:
    """Every agent ``list_agents(after, limit)`` lists (a store's or an engine's), in
    id order from after ``after``, ``page`` agents per round trip; an agent whose data
    is lost comes as its :class:`AgentLost`."""
    broken: str | None = None  # the lost agent a page broke at: one agent at a time to it
    while True:
        step = page if broken is None else 1
        try:
            listed = await list_agents(after, step)
        except AgentLost as lost:
            if broken is not None:  # the next agent is the lost one
                yield lost
                after, broken = lost.agent_id, None
            else:  # the agents before it in this page: one at a time
                broken = lost.agent_id
            continue
        for info in listed:
            yield info
        if len(listed) < step:
            return
        after = listed[-1].agent_id
        if broken is not None and after >= broken:  # (deleted meanwhile: passed it)
            broken = None
