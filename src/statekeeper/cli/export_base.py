"""The base line of ``statekeeper export`` (see :mod:`.transfer`): the state at the
retention base of an agent retention compacted, written before its events and read
back as the :class:`~statekeeper.records.Snapshot` it names."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError
from ..records import Event, Snapshot

__all__ = ["base_line", "base_of", "event_line", "state_of"]


def base_line(snap: Snapshot) -> dict[str, Any]:
    return {
        "base": snap.agent_id,
        "seq": snap.seq,
        "state": snap.fsm_state,
        "data": snap.data,
        "schema_version": snap.schema_version,
        "created_at": snap.created_at,
        "updated_at": snap.updated_at,
        "entered": snap.state_entered_at,
    }


def base_of(number: int, line: dict[str, Any]) -> Snapshot:
    """The base line at ``number`` as the state it names; ConfigurationError otherwise."""
    agent_id, seq = line.get("base"), line.get("seq")
    times: list[Any] = [line.get(name) for name in ("created_at", "updated_at", "entered")]
    if (
        not isinstance(agent_id, str)
        or type(seq) is not int
        or seq < 1
        or not isinstance(line.get("data"), dict)
        or not isinstance(line.get("state"), str | None)
        or type(line.get("schema_version")) is not int
        or not all(isinstance(t, int | float) and not isinstance(t, bool) for t in times)
    ):
        raise ConfigurationError(
            f"line {number}: a base line needs base (the agent id), seq (1 or more), "
            "state, data (an object), schema_version, created_at, updated_at and entered"
        )
    return Snapshot(
        agent_id,
        seq,
        line["state"],
        line["data"],
        line["schema_version"],
        float(times[0]),
        float(times[1]),
        float(times[2]),
    )


def state_of(snap: Snapshot) -> tuple[Any, ...]:
    """What a load of ``snap``'s seq returns, to compare (the agent id aside)."""
    return (
        snap.seq,
        snap.fsm_state,
        snap.data,
        snap.schema_version,
        snap.created_at,
        snap.updated_at,
        snap.state_entered_at,
    )


def event_line(ev: Event) -> dict[str, Any]:
    """One event's line of an export file."""
    line: dict[str, Any] = {
        "agent_id": ev.agent_id,
        "seq": ev.seq,
        "type": ev.type,
        "ts": ev.timestamp,
        "info": ev.info,
        "ops": ev.ops,
    }
    if ev.fsm_state is not None:
        line["fsm"] = ev.fsm_state
    if ev.actor is not None:
        line["actor"] = ev.actor
    if ev.idempotency_key is not None:
        line["key"] = ev.idempotency_key
    if ev.schema_version != 1:
        line["v"] = ev.schema_version
    return line
