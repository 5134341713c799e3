"""The built-in projections: the read models most deployments want.

* ``agent_states``: every agent's current state machine state (``agent_states``).
* ``agent_activity``: agents by namespace (the id part before the last ``/``:
  :func:`statekeeper.namespaces.namespace_of`) and
  last activity (``agent_activity``, indexed by ``(namespace, last_activity)``).
* ``tool_calls``: per tool, calls, failures and latency (total, max, and a histogram
  with Prometheus' default buckets) from events of type ``tool_call`` whose data names
  the ``tool`` and its ``duration`` in seconds (``ok: false`` counts a failure).
* ``transitions``: how often agents moved from one state to another — the counts
  ``N_ij`` of the seed's transition matrix ``P_ij = N_ij / N_i`` — counted exactly as
  :func:`statekeeper.observability.analysis.moves` counts them (every event that sets
  a state, after the agent's previous state).

``agent_states`` and ``agent_activity`` can be rebuilt from the agents' current states
(:meth:`Projection.seed`) after retention trimmed the feed; ``tool_calls`` and
``transitions`` count events, which the states do not keep: their rebuild then raises
:class:`~statekeeper.errors.ProjectionNeedsHistory`.
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any, ClassVar

from ..namespaces import namespace_of
from ..records import FeedEvent, Snapshot
from .projection import Projection

__all__ = [
    "BUILTINS",
    "LATENCY_BUCKETS",
    "AgentActivity",
    "AgentStates",
    "ToolCalls",
    "Transitions",
    "namespace_of",
]

#: upper bounds (seconds) of the latency histogram: Prometheus' default buckets
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)

#: the event type the tool-call projection counts
TOOL_CALL = "tool_call"


class AgentStates(Projection):
    """``agent_states(agent_id, state, seq, entered_at)``: the current state of every
    agent (``state`` NULL while its machine never set one)."""

    name = "agent_states"
    tables = ("agent_states",)

    def setup(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE IF NOT EXISTS agent_states (agent_id TEXT PRIMARY KEY, state TEXT,"
            " seq INTEGER NOT NULL, entered_at REAL)"
        )
        db.execute("CREATE INDEX IF NOT EXISTS agent_states_state ON agent_states (state)")

    def deleted(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        db.execute("DELETE FROM agent_states WHERE agent_id = ?", (change.agent_id,))

    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        e = change.event
        if e.fsm_state is None:
            db.execute(
                "INSERT INTO agent_states (agent_id, state, seq, entered_at)"
                " VALUES (?, NULL, ?, NULL)"
                " ON CONFLICT (agent_id) DO UPDATE SET seq = excluded.seq",
                (e.agent_id, e.seq),
            )
        else:
            db.execute(
                "INSERT INTO agent_states (agent_id, state, seq, entered_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (agent_id) DO UPDATE SET state = excluded.state,"
                " seq = excluded.seq, entered_at = excluded.entered_at",
                (e.agent_id, e.fsm_state, e.seq, e.timestamp),
            )

    def seed(self, db: sqlite3.Connection, state: Snapshot) -> None:
        fsm = state.fsm_state
        db.execute(
            "INSERT INTO agent_states (agent_id, state, seq, entered_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (agent_id) DO UPDATE SET state = excluded.state,"
            " seq = excluded.seq, entered_at = excluded.entered_at",
            (state.agent_id, fsm, state.seq, state.state_entered_at if fsm is not None else None),
        )


class AgentActivity(Projection):
    """``agent_activity(agent_id, namespace, first_activity, last_activity, last_seq,
    events)``."""

    name = "agent_activity"
    tables = ("agent_activity",)

    def setup(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE IF NOT EXISTS agent_activity (agent_id TEXT PRIMARY KEY,"
            " namespace TEXT NOT NULL, first_activity REAL NOT NULL,"
            " last_activity REAL NOT NULL, last_seq INTEGER NOT NULL, events INTEGER NOT NULL)"
        )
        db.execute(
            "CREATE INDEX IF NOT EXISTS agent_activity_ns"
            " ON agent_activity (namespace, last_activity)"
        )
        # Read models built before namespaces had one definition hold the part of each
        # id before its FIRST '/': rewritten once to the namespace (before the last).
        db.execute("CREATE TABLE IF NOT EXISTS agent_activity_rule (rule TEXT PRIMARY KEY)")
        if db.execute("SELECT 1 FROM agent_activity_rule WHERE rule = 'last-slash'").fetchone():
            return
        db.create_function("sk_namespace_of", 1, namespace_of, deterministic=True)
        try:
            db.execute(
                "UPDATE agent_activity SET namespace = sk_namespace_of(agent_id)"
                " WHERE namespace IS NOT sk_namespace_of(agent_id)"
            )
        finally:
            db.create_function("sk_namespace_of", 1, None)
        db.execute("INSERT INTO agent_activity_rule VALUES ('last-slash')")

    def deleted(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        db.execute("DELETE FROM agent_activity WHERE agent_id = ?", (change.agent_id,))

    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        e = change.event
        db.execute(
            "INSERT INTO agent_activity VALUES (?, ?, ?, ?, ?, 1)"
            " ON CONFLICT (agent_id) DO UPDATE SET"
            " last_activity = max(last_activity, excluded.last_activity),"
            " last_seq = excluded.last_seq, events = events + 1",
            (e.agent_id, namespace_of(e.agent_id), e.timestamp, e.timestamp, e.seq),
        )

    def seed(self, db: sqlite3.Connection, state: Snapshot) -> None:
        # every event up to seq: its first at the stream's creation, its last at the
        # state's last update, seq events in all
        db.execute(
            "INSERT INTO agent_activity VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (agent_id) DO UPDATE SET first_activity = excluded.first_activity,"
            " last_activity = excluded.last_activity, last_seq = excluded.last_seq,"
            " events = excluded.events",
            (
                state.agent_id,
                namespace_of(state.agent_id),
                state.created_at,
                state.updated_at,
                state.seq,
                state.seq,
            ),
        )


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


class ToolCalls(Projection):
    """``tool_calls(tool, calls, failures, timed, total_seconds, max_seconds)`` and
    ``tool_call_latency(tool, le, count)`` (a cumulative-free histogram: each call in
    the first bucket whose bound ``le`` is >= its duration; ``le`` NULL: above all)."""

    name = "tool_calls"
    tables = ("tool_calls", "tool_call_latency", "tool_call_shares", "tool_call_latency_shares")
    event_types: ClassVar[frozenset[str] | None] = frozenset({TOOL_CALL})

    def setup(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE IF NOT EXISTS tool_calls (tool TEXT PRIMARY KEY,"
            " calls INTEGER NOT NULL, failures INTEGER NOT NULL, timed INTEGER NOT NULL,"
            " total_seconds REAL NOT NULL, max_seconds REAL NOT NULL)"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS tool_call_latency (tool TEXT NOT NULL, le REAL,"
            " count INTEGER NOT NULL, UNIQUE (tool, le))"
        )
        # each agent's share of both: what a delete of the agent takes out of them
        db.execute(
            "CREATE TABLE IF NOT EXISTS tool_call_shares (agent_id TEXT NOT NULL,"
            " tool TEXT NOT NULL, calls INTEGER NOT NULL, failures INTEGER NOT NULL,"
            " timed INTEGER NOT NULL, total_seconds REAL NOT NULL, max_seconds REAL NOT NULL,"
            " PRIMARY KEY (agent_id, tool))"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS tool_call_latency_shares (agent_id TEXT NOT NULL,"
            " tool TEXT NOT NULL, le REAL, count INTEGER NOT NULL, UNIQUE (agent_id, tool, le))"
        )

    def deleted(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        # the agent's share of every count goes (a read model made before shares were
        # kept holds none of its earlier calls: rebuild it once)
        agent = (change.agent_id,)
        shares = db.execute(
            "SELECT tool, calls, failures, timed, total_seconds, max_seconds"
            " FROM tool_call_shares WHERE agent_id = ?",
            agent,
        ).fetchall()
        for tool, calls, failures, timed, total, _ in shares:
            db.execute(
                "UPDATE tool_calls SET calls = calls - ?, failures = failures - ?,"
                " timed = timed - ?, total_seconds = total_seconds - ? WHERE tool = ?",
                (calls, failures, timed, total, tool),
            )
        latency = db.execute(
            "SELECT tool, le, count FROM tool_call_latency_shares WHERE agent_id = ?", agent
        ).fetchall()
        for tool, le, count in latency:
            db.execute(
                "UPDATE tool_call_latency SET count = count - ? WHERE tool = ? AND le IS ?",
                (count, tool, le),
            )
        db.execute("DELETE FROM tool_call_shares WHERE agent_id = ?", agent)
        db.execute("DELETE FROM tool_call_latency_shares WHERE agent_id = ?", agent)
        for tool, *_, longest in shares:  # its longest call may have been the tool's
            db.execute(
                "UPDATE tool_calls SET max_seconds = (SELECT coalesce(max(max_seconds), 0.0)"
                " FROM tool_call_shares WHERE tool = ?) WHERE tool = ? AND max_seconds <= ?",
                (tool, tool, longest),
            )
        db.execute("DELETE FROM tool_calls WHERE calls <= 0")
        db.execute("DELETE FROM tool_call_latency WHERE count <= 0")

    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        data = change.event.info
        tool = data.get("tool")
        if not isinstance(tool, str) or not tool:
            return  # not a tool call this projection can attribute
        duration = _seconds(data.get("duration"))
        failed = 1 if data.get("ok") is False else 0
        db.execute(
            "INSERT INTO tool_calls VALUES (?, 1, ?, ?, ?, ?) ON CONFLICT (tool) DO UPDATE SET"
            " calls = calls + 1, failures = failures + excluded.failures,"
            " timed = timed + excluded.timed,"
            " total_seconds = total_seconds + excluded.total_seconds,"
            " max_seconds = max(max_seconds, excluded.max_seconds)",
            (tool, failed, 1 if duration is not None else 0, duration or 0.0, duration or 0.0),
        )
        db.execute(
            "INSERT INTO tool_call_shares VALUES (?, ?, 1, ?, ?, ?, ?)"
            " ON CONFLICT (agent_id, tool) DO UPDATE SET"
            " calls = calls + 1, failures = failures + excluded.failures,"
            " timed = timed + excluded.timed,"
            " total_seconds = total_seconds + excluded.total_seconds,"
            " max_seconds = max(max_seconds, excluded.max_seconds)",
            (
                change.agent_id,
                tool,
                failed,
                1 if duration is not None else 0,
                duration or 0.0,
                duration or 0.0,
            ),
        )
        if duration is not None:
            le = next((b for b in LATENCY_BUCKETS if duration <= b), None)
            updated = db.execute(
                "UPDATE tool_call_latency SET count = count + 1 WHERE tool = ? AND le IS ?",
                (tool, le),
            ).rowcount
            if not updated:
                db.execute("INSERT INTO tool_call_latency VALUES (?, ?, 1)", (tool, le))
            key = (change.agent_id, tool, le)
            updated = db.execute(
                "UPDATE tool_call_latency_shares SET count = count + 1"
                " WHERE agent_id = ? AND tool = ? AND le IS ?",
                key,
            ).rowcount
            if not updated:
                db.execute("INSERT INTO tool_call_latency_shares VALUES (?, ?, ?, 1)", key)


class Transitions(Projection):
    """``transitions(source, target, count)``: the moves between states, and
    ``transition_heads(agent_id, state)``: each agent's last state (what the next move
    starts from)."""

    name = "transitions"
    tables = ("transitions", "transition_heads", "transition_shares")

    def setup(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE IF NOT EXISTS transitions (source TEXT NOT NULL, target TEXT NOT NULL,"
            " count INTEGER NOT NULL, PRIMARY KEY (source, target))"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS transition_heads (agent_id TEXT PRIMARY KEY,"
            " state TEXT NOT NULL)"
        )
        # each agent's share of the counts: what a delete of the agent takes out
        db.execute(
            "CREATE TABLE IF NOT EXISTS transition_shares (agent_id TEXT NOT NULL,"
            " source TEXT NOT NULL, target TEXT NOT NULL, count INTEGER NOT NULL,"
            " PRIMARY KEY (agent_id, source, target))"
        )

    def deleted(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        # its last state and its share of the counts go (a read model made before
        # shares were kept holds none of its earlier moves: rebuild it once)
        agent = (change.agent_id,)
        shares = db.execute(
            "SELECT source, target, count FROM transition_shares WHERE agent_id = ?", agent
        ).fetchall()
        for source, target, count in shares:
            db.execute(
                "UPDATE transitions SET count = count - ? WHERE source = ? AND target = ?",
                (count, source, target),
            )
        db.execute("DELETE FROM transitions WHERE count <= 0")
        db.execute("DELETE FROM transition_shares WHERE agent_id = ?", agent)
        db.execute("DELETE FROM transition_heads WHERE agent_id = ?", agent)

    def apply(self, db: sqlite3.Connection, change: FeedEvent) -> None:
        e = change.event
        if e.fsm_state is None:
            return
        row = db.execute(
            "SELECT state FROM transition_heads WHERE agent_id = ?", (e.agent_id,)
        ).fetchone()
        if row is not None:
            db.execute(
                "INSERT INTO transitions VALUES (?, ?, 1)"
                " ON CONFLICT (source, target) DO UPDATE SET count = count + 1",
                (row[0], e.fsm_state),
            )
            db.execute(
                "INSERT INTO transition_shares VALUES (?, ?, ?, 1)"
                " ON CONFLICT (agent_id, source, target) DO UPDATE SET count = count + 1",
                (e.agent_id, row[0], e.fsm_state),
            )
        db.execute(
            "INSERT INTO transition_heads VALUES (?, ?)"
            " ON CONFLICT (agent_id) DO UPDATE SET state = excluded.state",
            (e.agent_id, e.fsm_state),
        )


#: the built-in projections, by name
BUILTINS: dict[str, type[Projection]] = {
    p.name: p for p in (AgentStates, AgentActivity, ToolCalls, Transitions)
}
