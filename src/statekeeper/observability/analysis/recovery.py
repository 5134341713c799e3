"""Recovery time: measured (open + load + replay) and predicted from stream lengths.

Recovering an agent after a crash is opening the store and loading its latest state: a
read of its latest snapshot and a replay of the events after it. :func:`measure_recovery`
opens a fresh store with no cache, times that for a sample of agents, fits
``t = a + b·n`` (n: events replayed after the snapshot) by least squares, and predicts
every agent's recovery time from its own replay length. The recovery time objective
(RTO) is met when the worst predicted (and measured) recovery is within it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import AgentForgotten, InvalidArgument

if TYPE_CHECKING:
    from ...codec.keys import Keyring
    from ...store import StateStore

__all__ = [
    "RecoveryReport",
    "RecoverySample",
    "fit_line",
    "measure_recovery",
    "measure_snapshot_cost",
]


@dataclass(frozen=True, slots=True)
class RecoverySample:
    agent_id: str
    #: events replayed on top of the latest snapshot
    replay_events: int
    #: seconds the cold load took
    seconds: float


@dataclass(slots=True)
class RecoveryReport:
    """What recovering the store's agents takes (seconds)."""

    open_seconds: float
    samples: list[RecoverySample]
    #: fitted fixed cost per agent (a) and cost per replayed event (b)
    intercept: float
    per_event: float
    #: predicted recovery time of every agent (open + a + b·n), worst first
    predicted: list[tuple[str, int, float]] = field(default_factory=list)
    objective: float | None = None

    @property
    def measured_rto(self) -> float:
        """Open plus the slowest measured load."""
        return self.open_seconds + max((s.seconds for s in self.samples), default=0.0)

    @property
    def predicted_rto(self) -> float:
        """The worst predicted recovery of any agent."""
        return max((p[2] for p in self.predicted), default=self.open_seconds)

    @property
    def met(self) -> bool | None:
        """Whether both RTOs are within the objective (None without one)."""
        if self.objective is None:
            return None
        return max(self.measured_rto, self.predicted_rto) <= self.objective

    def to_dict(self) -> dict[str, Any]:
        return {
            "open_seconds": self.open_seconds,
            "intercept_seconds": self.intercept,
            "seconds_per_event": self.per_event,
            "measured_rto_seconds": self.measured_rto,
            "predicted_rto_seconds": self.predicted_rto,
            "objective_seconds": self.objective,
            "met": self.met,
            "samples": [
                {"agent_id": s.agent_id, "replay_events": s.replay_events, "seconds": s.seconds}
                for s in self.samples
            ],
            "slowest_predicted": [
                {"agent_id": a, "replay_events": n, "seconds": t} for a, n, t in self.predicted[:10]
            ],
        }


def fit_line(points: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y = a + b·x`` (b = 0 when every x is the same;
    b is clamped at 0: replaying more never makes a load faster)."""
    pts = list(points)
    if not pts:
        return 0.0, 0.0
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return my, 0.0
    b = max(0.0, sum((x - mx) * (y - my) for x, y in pts) / sxx)
    a = my - b * mx
    if a < 0:  # a load never costs less than nothing: through the origin instead
        sxy = sum(x * y for x, y in pts)
        return 0.0, max(0.0, sxy / sum(x * x for x, _ in pts))
    return a, b


async def measure_recovery(
    url: str,
    *,
    keyring: Keyring | None = None,
    agents: Iterable[str] | None = None,
    sample: int = 50,
    objective: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    namespace: str | None = None,
) -> RecoveryReport:
    """Open the store at ``url`` read-only with no cache and time the cold load of up to
    ``sample`` agents (the longest replays first), then predict every agent's.

    ``namespace``: only the agents of that namespace and below it (``agents`` and the
    report's ids relative to it), as a store opened with ``namespace=`` sees them.

    ``objective``: the RTO to check against (seconds). ``clock``: what the times are
    read from (seconds; a test passes one driven by the work done).
    """
    from ...backends.url import open_backend
    from ...store import StateStore
    from ...store.namespaced import stored_id

    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise InvalidArgument("sample", f"sample must be a positive integer, not {sample!r}")
    if objective is not None and (
        isinstance(objective, bool) or not isinstance(objective, int | float) or objective <= 0
    ):
        raise InvalidArgument(
            "objective", f"objective must be a positive number of seconds, not {objective!r}"
        )
    t0 = clock()
    backend = open_backend(url, readonly=True)
    store = StateStore(backend, keyring=keyring, cache_size=0, witness=False, namespace=namespace)
    try:
        await backend.ensure_store()
        opened = clock() - t0
        lengths: list[tuple[str, int]] = []
        ids = (
            list(agents) if agents is not None else [a.agent_id async for a in store.iter_agents()]
        )
        for agent_id in ids:
            stored = stored_id(store, agent_id)
            head = await backend.head(stored)
            if head == 0:
                continue
            snap = await backend.latest_snapshot(stored)
            lengths.append((agent_id, head - (snap.seq if snap is not None else 0)))
        lengths.sort(key=lambda p: (-p[1], p[0]))
        chosen = lengths[: max(1, sample // 2)]
        rest = lengths[len(chosen) :]
        step = max(1, len(rest) // max(1, sample - len(chosen)))
        chosen += rest[::step][: sample - len(chosen)]
        samples = []
        forgotten: set[str] = set()
        for agent_id, n in chosen:
            t1 = clock()
            try:
                await store.load(agent_id)
            except AgentForgotten:  # crypto-shredded: nothing to recover, by design
                forgotten.add(agent_id)
                continue
            samples.append(RecoverySample(agent_id, n, clock() - t1))
    finally:
        await store.close()
    a, b = fit_line((s.replay_events, s.seconds) for s in samples)
    predicted = sorted(
        ((agent_id, n, opened + a + b * n) for agent_id, n in lengths if agent_id not in forgotten),
        key=lambda p: (-p[2], p[0]),
    )
    return RecoveryReport(opened, samples, a, b, predicted, objective)


async def measure_snapshot_cost(
    store: StateStore, agents: Iterable[str] | None = None, *, sample: int = 20, rounds: int = 5
) -> float:
    """Seconds one snapshot costs the write that carries it: the median time to encode
    and seal (serialize, compress, encrypt, checksum) the latest state of up to
    ``sample`` agents, as the store does when a snapshot is due. 0.0 with no agents."""
    from ...codec import ZERO_LINK

    ids = list(agents) if agents is not None else [a.agent_id async for a in store.iter_agents()]
    times: list[float] = []
    codec = store.codec
    for agent_id in ids[:sample]:
        try:
            snap = await store.get(agent_id)
        except AgentForgotten:  # crypto-shredded: no state to seal
            continue
        if snap is None:
            continue
        body = {
            "fsm": snap.fsm_state,
            "v": snap.schema_version,
            "created_at": snap.created_at,
            "updated_at": snap.updated_at,
            "entered": snap.state_entered_at,
            "data": snap.data,
        }
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            plaintext = codec.serialize(body, "state")
            codec.seal(agent_id, snap.seq, "snapshot", snap.updated_at, plaintext, ZERO_LINK)
            best = min(best, time.perf_counter() - t0)
        times.append(best)
    return statistics.median(times) if times else 0.0
