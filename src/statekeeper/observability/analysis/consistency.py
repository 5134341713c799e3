"""The state consistency score: the fraction of agents whose state can be trusted.

An agent is consistent when
* its records verify: every checksum / authentication tag, the hash chain from seq 1
  to the authenticated head, and every snapshot equals the replay of the events before
  it (:meth:`StateStore.verify`);
* its machine state is legal: one of the states given (``states=``), when given;
* its tiers agree, on a tiered store: the hot copy's head is not ahead of the durable
  tier's, and a copy that has the durable head holds the same stream up to it.

An agent crypto-shredded by ``forget`` is not checked (its records no longer open, by
design): it is listed in ``forgotten``, as ``verify`` lists it.

``score = consistent agents / agents checked`` (1.0 for an empty store). On a store
opened in a namespace the agents of that namespace (and below) are checked, named
relative to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...store.namespaced import stored_id

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["ConsistencyReport", "consistency_score"]


@dataclass(slots=True)
class ConsistencyReport:
    agents: int = 0
    verified: int = 0
    legal: int = 0
    #: agents checked across tiers (0 on a store with one tier)
    tiered: int = 0
    tiers_agree: int = 0
    consistent: int = 0
    #: (agent id, check, reason) for every failed check
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    #: agents passed over: crypto-shredded (``forget``)
    forgotten: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.consistent / self.agents if self.agents else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "agents": self.agents,
            "verified": self.verified,
            "legal_state": self.legal,
            "tiered": self.tiered,
            "tiers_agree": self.tiers_agree,
            "consistent": self.consistent,
            "problems": [{"agent_id": a, "check": c, "reason": r} for a, c, r in self.problems],
            "forgotten": list(self.forgotten),
        }


async def consistency_score(
    store: StateStore,
    *,
    states: Iterable[str] | None = None,
    agents: Iterable[str] | None = None,
) -> ConsistencyReport:
    """Check every agent (or ``agents``) and return the :class:`ConsistencyReport`."""
    legal_states = None if states is None else {str(s) for s in states}
    ids = list(agents) if agents is not None else [a.agent_id async for a in store.iter_agents()]
    report = ConsistencyReport()
    backend = getattr(store.backend, "inner", store.backend)
    hot = getattr(backend, "hot", None)
    durable = getattr(backend, "durable", None)
    for agent_id in ids:
        verified = await store.verify([agent_id])
        if verified.forgotten and not verified.problems:
            report.forgotten.append(agent_id)
            continue
        report.agents += 1
        ok = True
        if verified.problems:
            ok = False
            for p in verified.problems:
                report.problems.append((agent_id, f"verify:{p.kind}", p.reason))
        else:
            report.verified += 1
        head = await store.head_state(agent_id) if not verified.problems else None
        if legal_states is not None and head is not None and head.fsm_state is not None:
            if head.fsm_state in legal_states:
                report.legal += 1
            else:
                ok = False
                report.problems.append(
                    (agent_id, "legal_state", f"state {head.fsm_state!r} is not a legal state")
                )
        else:
            report.legal += 1
        if hot is not None and durable is not None:
            report.tiered += 1
            reason = await _tiers_disagree(hot, durable, stored_id(store, agent_id))
            if reason is None:
                report.tiers_agree += 1
            else:
                ok = False
                report.problems.append((agent_id, "tiers", reason))
        if ok:
            report.consistent += 1
    return report


async def _tiers_disagree(hot: Any, durable: Any, agent_id: str) -> str | None:
    hot_head = await hot.head(agent_id)
    if hot_head == 0:
        return None  # not in the hot tier: nothing to disagree about
    durable_head = await durable.head(agent_id)
    if hot_head > durable_head:
        return f"hot tier is at seq {hot_head}, durable tier at seq {durable_head}"
    mine = await hot.read(agent_id, hot_head - 1, hot_head)
    theirs = await durable.read(agent_id, hot_head - 1, hot_head)
    if not mine or not theirs or mine[-1].checksum != theirs[-1].checksum:
        return f"the tiers hold different records at seq {hot_head}"
    return None
