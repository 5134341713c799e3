"""The store page's report: state health, content metrics and the seed's mathematics,
computed with :mod:`statekeeper.observability` on a bounded scope of agents.

A store of a million agents cannot be scanned for one page, so the report covers the
first ``scope`` agents in id order (of a namespace when one is given) and says so:
the same functions ``statekeeper health``, ``statekeeper analyze`` and
``statekeeper metrics serve`` run over the whole store:

* :func:`~statekeeper.observability.health.health_report` — agents by state, stuck
  agents, largest states, streams due a snapshot, stale leases, thresholds crossed;
* the content gauges ``statekeeper metrics serve`` exports, rendered by its own
  collector (:class:`~statekeeper.observability.exposition.StoreExporter`) in the
  Prometheus text format;
* :func:`~statekeeper.observability.analysis.history.transition_matrices` — the
  transition matrix ``P_ij`` with counts (drawn as a heat map), its entropy rate and
  stationary distribution;
* :func:`~statekeeper.observability.analysis.history.entropy_windows` — the entropy of
  the states agents moved into, window by window (entropy over time), and the entropy
  of the current state distribution.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..arguments import INTERNAL_PREFIX, check_agent_id
from ..errors import AgentLost
from ..namespaces import check_namespace
from ..store.listing import agents_past_lost
from .listing import parse_count, parse_duration, start_after

if TYPE_CHECKING:
    from ..observability.analysis.history import EntropyWindow
    from ..observability.analysis.markov import TransitionMatrix
    from ..observability.health import HealthReport
    from ..store import StateStore

__all__ = ["DEFAULT_SCOPE", "MAX_SCOPE", "StoreAnalysis", "analyse", "heat"]

DEFAULT_SCOPE = 500
MAX_SCOPE = 20_000
#: entropy over time, without a window given: the span of the moves in this many
AUTO_WINDOWS = 24
#: at most this many windows of entropy over time (the window widens to fit)
MAX_WINDOWS = 48


@dataclass
class StoreAnalysis:
    """What the store page's report panel shows."""

    scope: int
    namespace: str
    #: agents looked at (at most ``scope``)
    agents: int
    #: True when the store holds more agents than the scope covered
    truncated: bool
    #: the agents looked at whose stored data is lost (``AgentLost``)
    lost: list[str]
    health: HealthReport
    metrics: str
    matrix: TransitionMatrix | None
    windows: list[EntropyWindow]
    window: float
    #: entropy (bits) of the distribution of agents over states, and normalised
    state_entropy: float
    state_entropy_normalised: float
    elapsed: float = 0.0
    #: the entropy-over-time chart: (x, y, width, height, window) per bar
    bars: list[tuple[float, float, float, float, EntropyWindow]] = field(default_factory=list)
    max_entropy: float = 0.0
    #: the agents whose history retention compacted: the matrix counts their moves from
    #: their base on only
    compacted: list[str] = field(default_factory=list)


def heat(p: float) -> int:
    """The heat-map class (0..10) of a probability."""
    return 0 if p <= 0 else max(1, min(10, round(p * 10)))


def _parse(params: dict[str, str]) -> tuple[int, str, float | None]:
    scope_text = params.get("scope", "").strip()
    scope = parse_count(scope_text, "scope", DEFAULT_SCOPE, MAX_SCOPE, "agents")
    # a namespace (statekeeper.namespaces): its agents and those of namespaces below
    namespace = check_namespace(params.get("ns", "").strip(), "ns")
    if namespace:
        check_agent_id(namespace + "/", "ns")
    window_text = params.get("window", "").strip()
    window = parse_duration(window_text, "window") if window_text else None
    return scope, namespace, window


async def _ids(
    store: StateStore, scope: int, namespace: str, lost: list[str]
) -> tuple[list[str], bool]:
    """The first ``scope`` agent ids (of ``namespace``), and whether more exist; the
    ids among them whose data is lost (:class:`~statekeeper.errors.AgentLost`) are
    appended to ``lost`` too (the report counts them as unreadable, as ``statekeeper
    health`` does, and reads no history of them)."""
    prefix = namespace + "/" if namespace else ""
    ids: list[str] = []
    listing = agents_past_lost(store.list_agents, start_after(prefix))
    async with contextlib.aclosing(listing):
        async for item in listing:
            agent_id = item.agent_id
            if not agent_id.startswith(prefix):
                if agent_id > prefix:
                    return ids, False  # past the namespace
                continue
            if agent_id.startswith(INTERNAL_PREFIX):
                continue
            if len(ids) == scope:
                return ids, True
            ids.append(agent_id)
            if isinstance(item, AgentLost):
                lost.append(agent_id)
    return ids, False


def _metrics_text(report: HealthReport) -> str:
    """The gauges ``statekeeper metrics serve`` exports for ``report``, in the
    Prometheus text format, produced by its own collector."""
    from prometheus_client import CollectorRegistry, generate_latest

    from ..observability.exposition import StoreExporter

    async def scan() -> HealthReport:
        return report

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreExporter(scan, name="inspected", interval=3600.0))
    return generate_latest(registry).decode()


def _bars(analysis: StoreAnalysis) -> None:
    top = max((w.entropy for w in analysis.windows), default=0.0)
    analysis.max_entropy = top
    n = len(analysis.windows)
    if not n:
        return
    width = 600.0 / n
    for i, w in enumerate(analysis.windows):
        h = 0.0 if top <= 0 else 100.0 * w.entropy / top
        analysis.bars.append((i * width + 1, 110.0 - h, max(width - 2, 1.0), h, w))


async def analyse(store: StateStore, params: dict[str, str]) -> StoreAnalysis:
    """The report for the query parameters ``scope``, ``ns`` and ``window``."""
    from ..observability.analysis import entropy, normalized_entropy
    from ..observability.analysis.history import (
        entropy_windows,
        moves,
        transition_matrices,
    )
    from ..observability.health import health_report

    scope, namespace, window = _parse(params)
    started = time.perf_counter()
    lost: list[str] = []
    ids, truncated = await _ids(store, scope, namespace, lost)
    report = await health_report(store, agents=ids)  # a lost agent: unreadable
    gone = set(lost)
    ids = [agent_id for agent_id in ids if agent_id not in gone]  # no history to read
    compacted: list[str] = []  # retention compacted them: their moves from the base only
    matrices = await transition_matrices(store, agents=ids, compacted=compacted)
    matrix = matrices.get("all")
    # entropy over time: windows of ``window`` seconds (default: the span of the moves
    # in AUTO_WINDOWS), widened to at most MAX_WINDOWS
    times = [m.at async for m in moves(store, agents=ids)]
    span = max(times) - min(times) if times else 0.0
    if window is None:
        window = max(span / AUTO_WINDOWS * 1.0001, 1.0)
    elif span / window > MAX_WINDOWS:
        window = span / MAX_WINDOWS * 1.0001
    windows = await entropy_windows(store, window, agents=ids) if times else []
    counts = report.by_state
    total = sum(counts.values())
    dist = [n / total for n in counts.values()] if total else []
    analysis = StoreAnalysis(
        scope=scope,
        namespace=namespace,
        agents=len(ids) + len(lost),
        truncated=truncated,
        lost=lost,
        health=report,
        metrics=_metrics_text(report),
        matrix=matrix,
        windows=windows,
        window=window,
        state_entropy=entropy(dist),
        state_entropy_normalised=normalized_entropy(dist),
        compacted=sorted(set(compacted)),
    )
    _bars(analysis)
    analysis.elapsed = time.perf_counter() - started
    return analysis


def row_entropies(matrix: TransitionMatrix) -> list[tuple[str, float, int]]:
    """``(state, entropy of its outgoing transitions, moves out)`` per state."""
    return [(s, matrix.row_entropy(s), matrix.exits(s)) for s in matrix.states]


def describe(analysis: StoreAnalysis) -> dict[str, Any]:
    """Extra template values."""
    return {"rows": row_entropies(analysis.matrix) if analysis.matrix else []}
