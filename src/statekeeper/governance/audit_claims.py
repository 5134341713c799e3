"""Events in the store that no audit entry claims: mutations that bypassed the log.

``audit verify`` checks each entry against the store (:mod:`.audit_checks`); this is
the other direction, for every agent the store still holds: each event of its stream
must be *claimed* by an append entry (``create``, ``save``, ``append``,
``transition``; not voided, outcome ``ok``) whose seq range covers it. An event no
entry claims was written by a process that did not keep the log (a plain
``StateStore`` opened on a governed store) or put there by editing the database.

**Which events must be claimed** (the base: a store may be audited from some day on,
so its agents' older events have no entries):

* the agent's **epoch** is its stream since its last delete entry committed with its
  delete (a delete starts it again at seq 1; one written ahead of its delete, on Redis
  Cluster, S3 or tiered stores, may not have been made, so claims from before it still
  count);
  events compacted away by a ``compact`` entry are gone and not asked;
* after such a delete, **every** seq of the new stream (clock-free: the log was kept
  before the stream began);
* otherwise every seq **from the first one an entry claims** up to the head
  (clock-free: an event after an audited one was written while the log was kept);
* seqs **below** the first claimed one (or of an agent no entry names at all) were
  written before the log began, unless their timestamp says otherwise: an event
  stamped at or after the log's first entry (the *line*) must be claimed. This part
  trusts the writers' clocks (an event stamped in the past by a skewed or lying writer
  passes), and reads one event per such range (the last one: a stream's events are
  appended in time order), the whole range only when it crosses the line.

A ``restore`` writes whole streams under one entry, with their original timestamps:
for an agent restored into since its epoch began the line is the restore's entry time
(events stamped before it may be restored ones), and the clock-free rules do not
apply. An agent deleted and not written again since is left to the delete's own
check (it reports the stream being back). Findings are ``problems``: the log itself
may be intact, the store holds changes it does not record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..arguments import INTERNAL_PREFIX

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..records import AgentInfo
    from .audit_checks import StoreChecks, _Seen

__all__ = ["unclaimed_events"]

_APPENDS = frozenset({"create", "save", "append", "transition"})
#: entries after which an agent's stream may be gone or start again at seq 1
_REMOVALS = frozenset({"delete", "purge", "forget"})
_PAGE = 500


async def unclaimed_events(backend: Backend, checks: StoreChecks) -> list[str]:
    """One problem per agent of ``backend`` holding events no entry of ``checks``
    (the entries :meth:`StoreChecks.see` gathered) claims."""
    problems: list[str] = []
    if checks.started is None:
        return problems  # nothing was ever recorded: no line to hold the store to
    heads: dict[str, int] = {}  # of the agents entries name: what the store holds
    after: str | None = None
    while True:
        page = await backend.list_agents(after, limit=_PAGE)
        for info in page:
            if info.agent_id in checks.agents:
                heads[info.agent_id] = info.head_seq
            if info.head_seq > 0 and not info.agent_id.startswith(INTERNAL_PREFIX):
                found = await _agent(backend, checks, info, checks.started)
                if found:
                    spans = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in found)
                    problems.append(
                        f"{info.agent_id!r}: events {spans} are in the store and no entry "
                        "records them (written without the audit log, or edited in)"
                    )
        if len(page) < _PAGE:
            break
        after = page[-1].agent_id
    # (an engine that expires agents by itself, a Redis with ttl=, removes them with no
    # entry by design: there a missing stream tells nothing)
    named = {} if backend.expires_agents else checks.agents
    for agent, seen in sorted(named.items()):
        gone = _recorded_beyond(checks, seen, heads.get(agent, 0))
        if gone is not None and not agent.startswith(INTERNAL_PREFIX):
            span = f"{gone[0]}..{gone[1]}" if gone[0] != gone[1] else str(gone[0])
            problems.append(
                f"{agent!r}: events {span} are recorded by entries and are not in the store "
                "(removed without the audit log: deleted, rolled back or edited out)"
            )
    return problems


def _recorded_beyond(checks: StoreChecks, seen: list[_Seen], head: int) -> tuple[int, int] | None:
    """The seqs above ``head`` (the agent's head in the store, 0: not there) that append
    entries committed with their change claim since the agent's last recorded removal
    (a delete, a retention purge, a forget), as one range; None when there are none.

    Only the head can go down, and only by a delete: every other change keeps it
    (compaction drops events below it). So an entry's seqs above the head were
    removed by a process that did not keep the log, or by editing the database.
    Appends written ahead of their change (Redis Cluster, S3, tiered) may not have
    been made: the reconciliation of those reports them (``unapplied``)."""
    top = 0
    for s in seen:
        if s.seq in checks.voided:
            continue
        if s.op in _REMOVALS:
            top = 0
        elif s.op in _APPENDS and not s.ahead_mark and s.last is not None:
            top = max(top, s.last)
    if top <= head:
        return None
    return head + 1, top


async def _agent(
    backend: Backend, checks: StoreChecks, info: AgentInfo, started: float
) -> list[tuple[int, int]]:
    agent, head = info.agent_id, info.head_seq
    seen = [s for s in checks.agents.get(agent, ()) if s.seq not in checks.voided]
    start, deleted = 0, False
    for s in seen:
        # (a delete written ahead of its change may not have been made: its stream
        # would still be the old one, so only a delete committed with its entry
        # starts the agent again; past one written ahead, older claims still count)
        if s.op == "delete" and s.together:
            start, deleted = s.seq, True
    epoch = [s for s in seen if s.seq > start]
    restores = [r for r in checks.restores if r > start]
    line = max([started, *(checks.restore_times[r] for r in restores)])
    lower = 1
    claims: list[tuple[int, int]] = []
    for s in epoch:
        if s.op == "compact" and s.last is not None:
            lower = max(lower, s.last + 1)
        elif s.op in _APPENDS and s.first is not None and s.last is not None:
            claims.append((s.first, s.last))
    if deleted and not claims and not restores:
        return []  # deleted and not written again: the delete's check reports it
    missing = _uncovered(sorted(claims), lower, head)
    if not missing:
        return []
    # clock-free: every seq after a delete, every seq from the first claimed one
    sure = 1 if deleted else min((a for a, _ in claims), default=head + 1)
    if restores:
        sure = head + 1  # restored since: the streams' timestamps tell, not their seqs
    found = [(max(a, sure), b) for a, b in missing if b >= sure]
    if info.updated_at >= line:  # some events were stamped after the line: which?
        for a, b in missing:
            if a < sure:
                found.extend(await _stamped_after(backend, agent, a, min(b, sure - 1), line))
    return sorted(found)


async def _stamped_after(
    backend: Backend, agent: str, first: int, last: int, line: float
) -> list[tuple[int, int]]:
    """The seqs of ``first..last`` of ``agent`` stamped at or after ``line``, as ranges
    (one read when the last of them is older: events are appended in time order)."""
    tail = await backend.read(agent, last - 1, last)
    if not tail or tail[-1].timestamp < line:
        return []
    out: list[tuple[int, int]] = []
    cursor = first - 1
    while cursor < last:
        page = await backend.read(agent, cursor, last, limit=_PAGE)
        if not page:
            break
        for raw in page:
            if raw.timestamp >= line:
                if out and out[-1][1] == raw.seq - 1:
                    out[-1] = (out[-1][0], raw.seq)
                else:
                    out.append((raw.seq, raw.seq))
        cursor = page[-1].seq
    return out


def _uncovered(claims: list[tuple[int, int]], lower: int, head: int) -> list[tuple[int, int]]:
    """The seqs of ``lower..head`` no range of ``claims`` (sorted) covers, as ranges."""
    out: list[tuple[int, int]] = []
    covered = lower - 1
    for first, last in claims:
        if first > covered + 1 and covered < head:
            out.append((covered + 1, min(first - 1, head)))
        covered = max(covered, last)
    if covered < head:
        out.append((covered + 1, head))
    return out
