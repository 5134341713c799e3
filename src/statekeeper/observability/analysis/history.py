"""Transitions read out of a store's event streams.

An event that moved an agent's machine records the state it moved to
(:attr:`~statekeeper.records.Event.fsm_state`); the first such event of a stream is
where the agent started. Every later one is a move ``previous → new`` (a self-loop when
the machine fired a transition back into the same state), made at the event's
timestamp after ``dwell`` seconds in the previous state.

An agent crypto-shredded by ``forget`` (its records no longer open) is passed over, as
every store-wide job does; its id goes to the ``forgotten`` list when one is given. An
agent whose stream retention compacted (``keep_last``, ``ttl``) is read from its base:
the state it was in there (entered at the base's ``state_entered_at``) and the events
kept after it (:func:`kept_history`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ...errors import AgentForgotten, HistoryCompacted, InvalidArgument
from ...records import Event, Snapshot
from .entropy import entropy
from .markov import TransitionMatrix, estimate

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = [
    "EntropyWindow",
    "Move",
    "entropy_windows",
    "kept_history",
    "moves",
    "namespace",
    "state_distribution",
    "transition_matrices",
]

GroupBy = Literal["all", "namespace"] | Callable[[str], str]


@dataclass(frozen=True, slots=True)
class Move:
    """One observed transition of one agent."""

    agent_id: str
    source: str
    target: str
    #: when it happened (event timestamp, seconds since the epoch)
    at: float
    #: seconds the agent had spent in ``source``
    dwell: float


def namespace(agent_id: str) -> str:
    """The namespace of an agent id: what comes before its first ``:`` or ``/``
    (``""`` for an id without one)."""
    cut = min((i for i in (agent_id.find(":"), agent_id.find("/")) if i >= 0), default=-1)
    return agent_id[:cut] if cut >= 0 else ""


def _check_window(since: float | None, until: float | None) -> None:
    for name, value in (("since", since), ("until", until)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value)
        ):
            raise InvalidArgument(name, f"{name} must be a timestamp in seconds, not {value!r}")
    if since is not None and until is not None and until < since:
        raise InvalidArgument("until", "until is before since")


async def _agent_ids(store: StateStore, agents: Iterable[str] | None) -> AsyncIterator[str]:
    if agents is not None:
        for agent_id in agents:
            yield agent_id
        return
    async for info in store.iter_agents():
        yield info.agent_id


async def kept_history(store: StateStore, agent_id: str) -> AsyncIterator[Event | Snapshot]:
    """The agent's events in stream order. When retention compacted the start of the
    stream, the base comes first (its :class:`Snapshot`: where the agent stood, in
    ``fsm_state`` since ``state_entered_at``), then the events kept after it."""
    started = False
    try:
        async for event in store.history(agent_id):
            started = True
            yield event
        return
    except HistoryCompacted as exc:
        if started:  # compacted while being read: what was yielded would be yielded again
            raise
        base = exc.base_seq
    yield await store.load(agent_id, at_seq=base)
    async for event in store.history(agent_id, after_seq=base):
        yield event


async def moves(
    store: StateStore,
    *,
    agents: Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    forgotten: list[str] | None = None,
    compacted: list[str] | None = None,
) -> AsyncIterator[Move]:
    """Every transition of ``agents`` (default: all) made in ``[since, until)``, agent
    by agent, in stream order. Every record read is verified as on any read; a
    forgotten agent is passed over (its id appended to ``forgotten``); an agent whose
    history retention compacted is read from its base (its id appended to
    ``compacted``: the moves before the base are not known any more)."""
    _check_window(since, until)
    async for agent_id in _agent_ids(store, agents):
        state: str | None = None
        entered = 0.0
        try:
            async for event in kept_history(store, agent_id):
                if isinstance(event, Snapshot):  # retention's base: where the kept events start
                    if compacted is not None:
                        compacted.append(agent_id)
                    if event.fsm_state is not None:  # (entered: 0 when not recorded)
                        state = event.fsm_state
                        entered = event.state_entered_at or event.updated_at
                    continue
                if event.fsm_state is None:
                    continue
                at = event.timestamp
                if (
                    state is not None
                    and (since is None or at >= since)
                    and (until is None or at < until)
                ):
                    yield Move(agent_id, state, event.fsm_state, at, max(0.0, at - entered))
                state, entered = event.fsm_state, at
        except AgentForgotten:
            if forgotten is not None:
                forgotten.append(agent_id)


def _grouper(group_by: GroupBy) -> Callable[[str], str]:
    if group_by == "all":
        return lambda _: "all"
    if group_by == "namespace":
        return namespace
    if callable(group_by):
        return group_by
    raise InvalidArgument(
        "group_by", f"group_by must be 'all', 'namespace' or a function, not {group_by!r}"
    )


async def transition_matrices(
    store: StateStore,
    *,
    group_by: GroupBy = "all",
    agents: Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    forgotten: list[str] | None = None,
    compacted: list[str] | None = None,
) -> dict[str, TransitionMatrix]:
    """``P`` estimated per group of agents (``"all"``: one matrix; ``"namespace"``: one
    per agent-id namespace; or a function of the agent id, e.g. the machine each runs)
    from the moves made in ``[since, until)``. Forgotten agents are passed over (their
    ids appended to ``forgotten``); agents retention compacted are read from their
    base (their ids appended to ``compacted``)."""
    key = _grouper(group_by)
    grouped: dict[str, list[tuple[str, str]]] = defaultdict(list)
    async for move in moves(
        store, agents=agents, since=since, until=until, forgotten=forgotten, compacted=compacted
    ):
        grouped[key(move.agent_id)].append((move.source, move.target))
    return {group: estimate(pairs) for group, pairs in sorted(grouped.items())}


async def state_distribution(
    store: StateStore,
    *,
    agents: Iterable[str] | None = None,
    forgotten: list[str] | None = None,
) -> dict[str, int]:
    """How many agents are in each state now (``""``: agents whose machine never moved).
    Forgotten agents are not counted (their ids are appended to ``forgotten``)."""
    found: Counter[str] = Counter()
    async for agent_id in _agent_ids(store, agents):
        try:
            head = await store.head_state(agent_id)
        except AgentForgotten:
            if forgotten is not None:
                forgotten.append(agent_id)
            continue
        if head is not None:
            found[head.fsm_state or ""] += 1
    return dict(sorted(found.items()))


@dataclass(frozen=True, slots=True)
class EntropyWindow:
    """The moves of one time window and the entropy of where they went."""

    start: float
    end: float
    moves: int
    #: entropy (bits) of the distribution of target states of the window's moves
    entropy: float


#: the most windows :func:`entropy_windows` builds (each one an object, empty or not)
MAX_WINDOWS = 10_000


async def entropy_windows(
    store: StateStore,
    window: float,
    *,
    agents: Iterable[str] | None = None,
    since: float | None = None,
    until: float | None = None,
    max_windows: int = MAX_WINDOWS,
) -> list[EntropyWindow]:
    """The entropy of the states agents moved into, window by window (``window``
    seconds each, from the first move): a population whose behaviour suddenly changes
    shows up as a step in this series. More than ``max_windows`` windows (a window of
    1 s over a year: 31 million) is refused with :class:`InvalidArgument` naming the
    count and the smallest window that fits, before any is built."""
    if isinstance(window, bool) or not isinstance(window, int | float) or not 0 < window < math.inf:
        raise InvalidArgument(
            "window", f"window must be a positive number of seconds, not {window!r}"
        )
    seen = [m async for m in moves(store, agents=agents, since=since, until=until)]
    if not seen:
        return []
    start = min(m.at for m in seen) if since is None else since
    last = max(m.at for m in seen) - start
    count = int(last // window) + 1
    if count > max_windows:
        least = math.ceil(last / max(max_windows - 1, 1))
        raise InvalidArgument(
            "window",
            f"a window of {window:g} s makes {count} windows over {last:g} s of moves; at"
            f" most {max_windows}: use a window of at least {least} s",
        )
    buckets: dict[int, Counter[str]] = defaultdict(Counter)
    for m in seen:
        buckets[int((m.at - start) // window)][m.target] += 1
    out = []
    for index in range(max(buckets) + 1):
        targets = buckets.get(index, Counter())
        n = sum(targets.values())
        h = entropy([c / n for c in targets.values()]) if n else 0.0
        out.append(EntropyWindow(start + index * window, start + (index + 1) * window, n, h))
    return out
