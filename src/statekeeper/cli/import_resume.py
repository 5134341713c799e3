"""``statekeeper import`` run again after an import stopped part-way through an agent
(:mod:`.transfer`): is the stored agent the start of the file's, to be completed?

A stopped import leaves the agent's events up to some seq, each as the file has it.
A retention run on the target may then compact what it left (``keep_last``): its
history up to a base snapshot later than the file's own base is gone. The stored
stream is still the file's start when the events it kept are the file's and the state
at its base is the one the file's events give there (and at that event's time); the
rerun completes it then. Before, the compacted start made it "not this file's agent":
skipped as the target's own, with exit 0 and "verified", left older than the file.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from .. import patch
from ..errors import AgentForgotten, HistoryCompacted
from .export_base import event_line, state_of

if TYPE_CHECKING:
    from ..store import StateStore
    from .import_lines import ImportedAgent

__all__ = ["as_written", "data_at", "interrupted", "stored_start"]


async def stored_start(store: StateStore, agent: ImportedAgent) -> int:
    """Where the target's stream of ``agent`` starts: the file's base, or the later one
    a retention run compacted it to (the seq before its first stored event)."""
    from ..store.namespaced import stored_id

    (base,) = await store.backend.stream_bases([stored_id(store, agent.agent_id)])
    return max(agent.base_seq, base)


def data_at(agent: ImportedAgent, seq: int) -> Any:
    """The state's data the file's events give at ``seq`` (the file's base state, or
    its first event's, folded with the events after it up to ``seq``)."""
    if agent.base is not None:
        data, rest = copy.deepcopy(agent.base.data), agent.events
    else:
        data, rest = copy.deepcopy(agent.events[0]["ops"][0]["value"]), agent.events[1:]
    for line in rest:
        if int(line["seq"]) > seq:
            break
        data = patch.apply(data, copy.deepcopy(line["ops"]))
    return data


async def same_at(store: StateStore, agent: ImportedAgent, seq: int) -> bool:
    """The target's state at ``seq`` (a base past the file's) is the file's there: the
    same data, of the file's event at ``seq`` (its time)."""
    snap = await store.load(agent.agent_id, at_seq=seq)
    line = agent.events[seq - agent.base_seq - 1]
    return snap.updated_at == float(line["ts"]) and snap.data == data_at(agent, seq)


async def interrupted(store: StateStore, agent: ImportedAgent, head: int) -> bool:
    """Whether the stored agent is the start of the file's (an import of this file was
    interrupted after ``head`` of its events, and a retention run may have compacted
    what it left since): the rest may be written."""
    base = agent.base_seq
    if not base < head < base + len(agent.events):
        return False
    try:
        start = await stored_start(store, agent)
        if start >= head:  # (nothing kept to compare: not told from another stream)
            return False
        stored = [
            event_line(ev)
            async for ev in store.history(agent.agent_id, after_seq=start, to_seq=head)
        ]
        if start > base:
            if not await same_at(store, agent, start):
                return False
        elif agent.base is not None and state_of(
            await store.load(agent.agent_id, at_seq=base)
        ) != state_of(agent.base):
            return False
    except (HistoryCompacted, AgentForgotten):  # compacted at another base, or shredded:
        return False  # not this file's agent
    return stored == [as_written(store, w) for w in agent.events[start - base : head - base]]


def as_written(store: StateStore, line: dict[str, Any]) -> dict[str, Any]:
    """A file's event line as ``store`` writes it: its time a float, and — through a
    store opened as a principal, which names the writer of every event that names none
    (the stream says who wrote it) — the principal as the actor of an event the file
    gives no actor. Was: every import as a principal of an event without an actor
    failed its read-back ("imported event differs from the file") and was undone."""
    from ..store.governed import governance_of

    written = {**line, "ts": float(line["ts"])}
    gov = governance_of(store)
    if "actor" not in written and gov is not None and gov.principal is not None:
        written["actor"] = gov.principal
    return written
