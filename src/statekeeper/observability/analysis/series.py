"""Time series of a store's activity over a period, read from its recorded history.

What the history holds is replayed onto a grid of ``step``-second buckets: events
appended, machine transitions, distinct agents active, the entropy of the states moved
into (the ``analyze --window`` series), and how many agents were in each state at the
end of every bucket. (Latencies, conflicts and cache hits are not in the history: they
are the live Prometheus metrics, plotted by Grafana from ``docs/observability.md``.)

>>> s = activity_from_events(
...     [("a", 0.0, "idle"), ("a", 5.0, "busy"), ("b", 12.0, None), ("a", 15.0, "idle")],
...     step=10.0,
... )
>>> s.starts, s.events, s.transitions, s.active_agents
((0.0, 10.0), (2, 2), (1, 1), (1, 2))
>>> s.agents_by_state
{'busy': (1, 0), 'idle': (0, 1)}
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import AgentForgotten, InvalidArgument
from ...records import Snapshot
from .entropy import entropy
from .history import _agent_ids, _check_window, kept_history

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["ActivitySeries", "activity_from_events", "activity_series"]

#: points of a series when no step is given
POINTS = 120
#: at most this many buckets: a plot of more points than pixels says nothing more
MAX_BUCKETS = 10_000


@dataclass(frozen=True, slots=True)
class ActivitySeries:
    """One value per bucket ``[starts[i], starts[i] + step)`` for every series."""

    step: float
    starts: tuple[float, ...]
    #: events appended (every type)
    events: tuple[int, ...]
    #: moves of a machine from one state to another (or back into the same)
    transitions: tuple[int, ...]
    #: distinct agents that appended an event
    active_agents: tuple[int, ...]
    #: entropy (bits) of the states moved into by the bucket's transitions
    entropy: tuple[float, ...]
    #: state -> agents in that state at the end of each bucket (agents seen so far)
    agents_by_state: dict[str, tuple[int, ...]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "starts": list(self.starts),
            "events": list(self.events),
            "transitions": list(self.transitions),
            "active_agents": list(self.active_agents),
            "entropy": list(self.entropy),
            "agents_by_state": {k: list(v) for k, v in self.agents_by_state.items()},
        }


def _check_step(step: float) -> None:
    if (
        isinstance(step, bool)
        or not isinstance(step, int | float)
        or not math.isfinite(step)
        or step <= 0
    ):
        raise InvalidArgument("step", f"step must be a positive number of seconds, not {step!r}")


def activity_from_events(
    events: Iterable[tuple[str, float, str | None]],
    *,
    step: float | None = None,
    since: float | None = None,
    until: float | None = None,
    bases: Iterable[tuple[str, float, str]] = (),
) -> ActivitySeries:
    """The series of ``(agent_id, timestamp, fsm_state or None)`` events, each agent's
    in stream order, on a grid of ``step`` seconds (default: the period in
    :data:`POINTS` steps, at least a second) from ``since`` (default: the first event)
    to ``until`` (default: the last). Events before ``since`` only set where their
    agents stand when the period starts. ``bases``: ``(agent_id, entered, fsm_state)``
    of agents whose stream retention compacted — the state they stood in (since
    ``entered``) before their first event kept: neither an event nor a move."""
    if step is not None:
        _check_step(step)
    _check_window(since, until)
    seen = list(events)
    inside = [
        e for e in seen if (since is None or e[1] >= since) and (until is None or e[1] < until)
    ]
    if not inside and (since is None or until is None):
        return ActivitySeries(step or 1.0, (), (), (), (), (), {})
    start = since if since is not None else min(e[1] for e in inside)
    last = until if until is not None else max(e[1] for e in inside)
    if step is None:
        step = max(1.0, (last - start) / POINTS)
    end = last if until is not None else last + step * 1e-9
    n = max(1, math.ceil((end - start) / step))
    if n > MAX_BUCKETS:
        raise InvalidArgument(
            "step",
            f"a step of {step:g} s makes {n} buckets over the period (at most {MAX_BUCKETS}):"
            " choose a longer step or a shorter period",
        )
    counts = [0] * n
    moves = [0] * n
    agents: list[set[str]] = [set() for _ in range(n)]
    targets: list[Counter[str]] = [Counter() for _ in range(n)]
    state_of: dict[str, str] = {}
    named: set[str] = set()
    # state changes by bucket: (bucket, agent, new state); before the period: bucket -1
    changes: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for agent_id, at, base in bases:
        if until is not None and at >= until:
            continue
        state_of[agent_id] = base
        named.add(base)
        changes[-1 if at < start else min(n - 1, int((at - start) // step))].append(
            (agent_id, base)
        )
    for agent_id, at, fsm in seen:
        if until is not None and at >= until:
            continue
        index = -1 if at < start else min(n - 1, int((at - start) // step))
        if index >= 0:
            counts[index] += 1
            agents[index].add(agent_id)
        if fsm is None:
            continue
        if index >= 0 and agent_id in state_of:
            moves[index] += 1
            targets[index][fsm] += 1
        state_of[agent_id] = fsm
        named.add(fsm)
        changes[index].append((agent_id, fsm))
    where: dict[str, str] = {}
    for agent_id, fsm in changes.get(-1, ()):
        where[agent_id] = fsm
    names = sorted(named)
    by_state: dict[str, list[int]] = {name: [] for name in names}
    for index in range(n):
        for agent_id, fsm in changes.get(index, ()):
            where[agent_id] = fsm
        tally = Counter(where.values())
        for name in names:
            by_state[name].append(tally.get(name, 0))
    entropies = []
    for t in targets:
        total = sum(t.values())
        entropies.append(entropy([c / total for c in t.values()]) if total else 0.0)
    return ActivitySeries(
        step=float(step),
        starts=tuple(start + i * step for i in range(n)),
        events=tuple(counts),
        transitions=tuple(moves),
        active_agents=tuple(len(a) for a in agents),
        entropy=tuple(entropies),
        agents_by_state={k: tuple(v) for k, v in by_state.items()},
    )


async def activity_series(
    store: StateStore,
    step: float | None = None,
    *,
    agents: Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    forgotten: list[str] | None = None,
) -> ActivitySeries:
    """:func:`activity_from_events` over the recorded history of ``agents`` (default:
    all). Every record read is verified as on any read; an agent crypto-shredded by
    ``forget`` is passed over (its id appended to ``forgotten``)."""
    if step is not None:
        _check_step(step)
    _check_window(since, until)
    found: list[tuple[str, float, str | None]] = []
    bases: list[tuple[str, float, str]] = []
    async for agent_id in _agent_ids(store, agents):
        try:  # read whole first: a forgotten agent adds nothing
            kept = [event async for event in kept_history(store, agent_id)]
        except AgentForgotten:
            if forgotten is not None:
                forgotten.append(agent_id)
            continue
        for event in kept:
            if isinstance(event, Snapshot):  # retention's base
                if event.fsm_state is not None:
                    entered = event.state_entered_at or event.updated_at
                    bases.append((agent_id, entered, event.fsm_state))
                continue
            found.append((agent_id, event.timestamp, event.fsm_state))
    return activity_from_events(found, step=step, since=since, until=until, bases=bases)
