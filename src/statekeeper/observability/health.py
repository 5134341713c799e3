"""The state-health report: what an operator checks before anything else.

:func:`health_report` scans a store (every agent, or those given) and returns a typed
:class:`HealthReport`:

* agents by state;
* agents stuck in a state — longer than ``stuck_after`` seconds, or longer than
  ``stuck_factor`` times their own usual (median) time in that state;
* the largest states (latest snapshot size) and the fastest-growing streams (events in
  the last ``growth_window`` seconds);
* streams due a snapshot (a load would replay ``snapshot_every`` events or more);
* agents failing verification (with ``verify=True``: every record, chain and snapshot);
* lease holders that stopped renewing (a lease that expired without being released);
* operation, error, conflict and retry counts and rates, when the store is
  instrumented (:func:`~.instrumentation.instrument`);
* appends the store acknowledged into its write buffer that a failed flush dropped
  (``StoreStats.lost``, ``statekeeper_write_buffer_lost_total``): a breach.

:attr:`HealthReport.breaches` lists every threshold crossed; ``statekeeper health``
exits non-zero when there is one (a cron check).

On a store opened in a namespace (``StateStore(url, namespace="acme")``, CLI
``--namespace acme``) the report covers the agents of that namespace and below it
only, named relative to it (as the store names them); leases and stream sizes are
read under the stored ids.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import AgentForgotten, InvalidArgument, StatekeeperError
from ..records import RawSnapshot
from ..store.listing import agents_past_lost
from ..store.namespaced import stored_id

if TYPE_CHECKING:
    from ..store import StateStore
    from .instrumentation import Instrumentation

__all__ = [
    "Growth",
    "HealthReport",
    "HealthThresholds",
    "OperationRates",
    "SizedState",
    "StaleLease",
    "StuckAgent",
    "health_report",
]


@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """When the report says something is wrong (None: never for that check)."""

    #: seconds in a non-settled state after which an agent is stuck
    stuck_after: float | None = 3600.0
    #: ... or this many times its own median time in that state (needs >= 2 past visits)
    stuck_factor: float | None = 5.0
    #: states an agent may rest in for ever (never stuck)
    settled_states: frozenset[str] = frozenset({"idle", "completed"})
    #: a latest snapshot larger than this many bytes is a breach
    max_state_bytes: int | None = 16 * 1024 * 1024
    #: a stream whose load would replay more than this many events is a breach
    #: (None: ``2 × snapshot_every`` of the store)
    max_replay_events: int | None = None
    #: more stuck agents than this is a breach
    max_stuck: int = 0
    #: more stale leases than this is a breach
    max_stale_leases: int = 0
    #: errors over operations above this is a breach (instrumented stores only)
    max_error_rate: float | None = 0.01
    #: the window of "fastest growing" (seconds)
    growth_window: float = 3600.0
    #: how many entries the top lists keep
    top: int = 10

    def __post_init__(self) -> None:
        for name in ("stuck_after", "stuck_factor", "max_error_rate"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            ):
                raise InvalidArgument(name, f"{name} must be a number >= 0 or None, not {value!r}")
        for name in ("max_state_bytes", "max_replay_events"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InvalidArgument(
                    name, f"{name} must be an integer >= 1 or None, not {value!r}"
                )
        if not isinstance(self.growth_window, int | float) or self.growth_window <= 0:
            raise InvalidArgument("growth_window", "growth_window must be > 0 seconds")
        if isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 1:
            raise InvalidArgument("top", f"top must be an integer >= 1, not {self.top!r}")


@dataclass(frozen=True, slots=True)
class StuckAgent:
    agent_id: str
    state: str
    #: seconds in ``state`` so far
    seconds: float
    #: its median time in ``state`` on earlier visits (None: fewer than two)
    usual_seconds: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class SizedState:
    agent_id: str
    #: stored bytes of the latest snapshot (the state's size), or of the events when
    #: the agent has no snapshot yet
    state_bytes: int
    #: events a load replays on top of it
    replay_events: int
    head_seq: int


@dataclass(frozen=True, slots=True)
class Growth:
    agent_id: str
    #: events appended in the growth window
    events: int
    per_hour: float


@dataclass(frozen=True, slots=True)
class StaleLease:
    agent_id: str
    holder: str
    token: int
    #: seconds since the lease expired without being renewed or released
    expired_for: float


@dataclass(frozen=True, slots=True)
class OperationRates:
    """Counts of an instrumented store since it was instrumented."""

    operations: int
    errors: int
    conflicts: int
    retries: int
    fencing_rejections: int
    integrity_failures: int

    @property
    def error_rate(self) -> float:
        return self.errors / self.operations if self.operations else 0.0

    @property
    def retry_rate(self) -> float:
        return self.retries / self.operations if self.operations else 0.0


@dataclass(slots=True)
class HealthReport:
    """See the module documentation."""

    generated_at: float
    agents: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    stuck: list[StuckAgent] = field(default_factory=list)
    #: the ``top`` largest states (a top list: :attr:`oversize_states` counts them all)
    largest: list[SizedState] = field(default_factory=list)
    #: how many of the agents scanned have a state above ``max_state_bytes`` (every one,
    #: not only those of :attr:`largest`; 0 without that threshold)
    oversize_states: int = 0
    fastest_growing: list[Growth] = field(default_factory=list)
    due_snapshot: list[SizedState] = field(default_factory=list)
    #: None when verification was not run
    failing_verification: list[tuple[str, str]] | None = None
    stale_leases: list[StaleLease] = field(default_factory=list)
    rates: OperationRates | None = None
    #: every threshold crossed, one sentence each
    breaches: list[str] = field(default_factory=list)
    #: agents that could not be read (id, error)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    #: agents passed over because ``forget`` crypto-shredded them (unreadable by design:
    #: not a breach)
    forgotten: list[str] = field(default_factory=list)
    #: appends this store acknowledged into its write buffer (``durability="async"``)
    #: that a failed flush dropped: never stored (a breach)
    lost_writes: int = 0

    @property
    def ok(self) -> bool:
        return not self.breaches

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        if self.rates is not None:
            out["rates"]["error_rate"] = self.rates.error_rate
            out["rates"]["retry_rate"] = self.rates.retry_rate
        return out


def _rates(instrumentation: Instrumentation) -> OperationRates:
    t = instrumentation.tallies
    return OperationRates(
        operations=sum(h.count for h in t.operations.values()),
        errors=sum(
            n for (_, error), n in t.operation_errors.items() if error not in ("not_found",)
        ),
        conflicts=t.conflicts,
        retries=t.retries,
        fencing_rejections=t.fencing_rejections,
        integrity_failures=t.integrity_failures,
    )


async def _usual(store: StateStore, agent_id: str, state: str) -> float | None:
    from .analysis.history import moves

    dwells = [m.dwell async for m in moves(store, agents=[agent_id]) if m.source == state]
    return statistics.median(dwells) if len(dwells) >= 2 else None


async def health_report(
    store: StateStore,
    thresholds: HealthThresholds | None = None,
    *,
    agents: Iterable[str] | None = None,
    verify: bool = False,
    instrumentation: Instrumentation | None = None,
    now: float | None = None,
) -> HealthReport:
    """Scan the store and report (see the module documentation).

    ``now``: the time to judge by (default: the store's clock).
    """
    limits = thresholds if thresholds is not None else HealthThresholds()
    if not isinstance(limits, HealthThresholds):
        raise InvalidArgument("thresholds", "thresholds must be a HealthThresholds")
    at = store.clock() if now is None else now
    report = HealthReport(generated_at=at)
    backend = store.backend
    leases = backend.supports_leases
    max_replay = limits.max_replay_events or 2 * store.snapshot_events
    # every agent, a lost one too (AgentLost: its data gone; unreadable, a breach)
    ids = (
        list(agents)
        if agents is not None
        else [info.agent_id async for info in agents_past_lost(store.list_agents)]
    )
    states: Counter[str] = Counter()
    sized: list[SizedState] = []
    growth: list[Growth] = []
    for agent_id in ids:
        try:
            head = await store.head_state(agent_id)
            if head is None:
                continue
            report.agents += 1
            state = head.fsm_state or ""
            states[state] += 1
            # the engine's id (qualified on a store opened in a namespace: the report
            # names the agents as the store does, relative to it)
            stored = stored_id(store, agent_id)
            snap: RawSnapshot | None = await backend.latest_snapshot(stored)
            replay = head.seq - (snap.seq if snap is not None else 0)
            size = len(snap.payload) if snap is not None else 0
            if snap is None:  # no snapshot: the events are the state
                size = sum(len(e.payload) for e in await backend.read(stored, 0, head.seq))
            sized.append(SizedState(agent_id, size, replay, head.seq))
            recent = head.seq - await backend.seq_at(stored, at - limits.growth_window)
            if recent > 0:
                growth.append(Growth(agent_id, recent, recent * 3600.0 / limits.growth_window))
            if state and state not in limits.settled_states and head.state_entered_at > 0:
                dwell = at - head.state_entered_at
                reason = None
                usual = None
                if limits.stuck_factor is not None and dwell > 0:
                    usual = await _usual(store, agent_id, state)
                    if usual is not None and usual > 0 and dwell > limits.stuck_factor * usual:
                        reason = f"{dwell / usual:.1f}× its usual time in {state!r}"
                if reason is None and limits.stuck_after is not None and dwell > limits.stuck_after:
                    reason = f"longer than {limits.stuck_after:g} s in {state!r}"
                if reason is not None:
                    report.stuck.append(StuckAgent(agent_id, state, dwell, usual, reason))
            if leases:
                lease = await backend.get_lease(stored)
                if lease is not None and lease.holder is not None and lease.expires_at < at:
                    report.stale_leases.append(
                        StaleLease(agent_id, lease.holder, lease.token, at - lease.expires_at)
                    )
        except AgentForgotten:
            report.forgotten.append(agent_id)
        except StatekeeperError as exc:
            report.unreadable.append((agent_id, str(exc)))
    report.by_state = dict(sorted(states.items(), key=lambda kv: (-kv[1], kv[0])))
    report.largest = sorted(sized, key=lambda s: (-s.state_bytes, s.agent_id))[: limits.top]
    if limits.max_state_bytes is not None:  # over every agent: the list above is a top N
        report.oversize_states = sum(s.state_bytes > limits.max_state_bytes for s in sized)
    report.fastest_growing = sorted(growth, key=lambda g: (-g.events, g.agent_id))[: limits.top]
    report.due_snapshot = sorted(
        (s for s in sized if s.replay_events >= store.snapshot_events),
        key=lambda s: (-s.replay_events, s.agent_id),
    )
    report.stuck.sort(key=lambda s: (-s.seconds, s.agent_id))
    if verify:
        checked = await store.verify(ids)
        report.failing_verification = [(p.agent_id, p.reason) for p in checked.problems]
    if instrumentation is not None:
        report.rates = _rates(instrumentation)
    report.lost_writes = store.stats().lost
    _judge(report, limits, max_replay)
    return report


def _judge(report: HealthReport, limits: HealthThresholds, max_replay: int) -> None:
    b = report.breaches
    if len(report.stuck) > limits.max_stuck:
        b.append(f"{len(report.stuck)} agent(s) stuck (allowed: {limits.max_stuck})")
    if limits.max_state_bytes is not None and report.oversize_states and report.largest:
        big = report.largest[0]
        b.append(
            f"{report.oversize_states} state(s) larger than {limits.max_state_bytes} bytes"
            f" (largest: {big.agent_id}, {big.state_bytes} bytes)"
        )
    long = [s for s in report.due_snapshot if s.replay_events > max_replay]
    if long:
        b.append(f"{len(long)} stream(s) would replay more than {max_replay} events on load")
    if report.failing_verification:
        failing = sorted({a for a, _ in report.failing_verification})
        b.append(f"{len(failing)} agent(s) fail verification")
    if len(report.stale_leases) > limits.max_stale_leases:
        b.append(f"{len(report.stale_leases)} lease holder(s) stopped renewing")
    if report.unreadable:
        b.append(f"{len(report.unreadable)} agent(s) could not be read")
    if report.lost_writes:
        b.append(
            f"{report.lost_writes} buffered write(s) lost: acknowledged, never stored "
            "(a write-behind flush failed; see the log)"
        )
    rates = report.rates
    if rates is not None and limits.max_error_rate is not None:
        if rates.error_rate > limits.max_error_rate:
            b.append(f"error rate {rates.error_rate:.2%} above {limits.max_error_rate:.2%}")
        if rates.integrity_failures:
            b.append(f"{rates.integrity_failures} integrity failure(s)")
