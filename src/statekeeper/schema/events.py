"""Event schema evolution: custom events and the machine's own history, read as the
current code names them.

Events are never rewritten. Reading the history of a typed agent through
:func:`history` (or ``TypedStates.history``) brings each event to the model's current
schema version:

* a custom event's type and data go through the renames and the event upcasters
  registered for ``(event type, from_version)``, chained version by version;
* a transition's machine event and its ``from``/``to`` states, and every event's
  ``fsm_state``, go through the machine renames (``schema.rename_states`` /
  ``schema.rename_events``), so a history recorded under an older machine definition
  replays on the current one (:func:`replay`).

A custom event recorded by *newer* code (during a rolling deploy) is refused
(:class:`~statekeeper.errors.EventVersionTooNew`): events have no downcasters, and its
type and info may be of a shape the current code does not know.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import EventVersionTooNew, InvalidTransition, UnknownState
from ..records import Event, EventType
from .registry import ModelSchema, _cast_event

if TYPE_CHECKING:
    from ..machine import AgentStateMachine
    from ..store.store import StateStore

__all__ = ["history", "replay", "upcast_event"]

_STORE_TYPES = frozenset({EventType.CREATED, EventType.TRANSITION, EventType.PATCH, EventType.STEP})


def upcast_event(schema: ModelSchema[Any], event: Event) -> Event:
    """``event`` (recorded under its ``schema_version``) as the current code names it.

    A custom event recorded by newer code raises
    :class:`~statekeeper.errors.EventVersionTooNew` (the store's own events — created,
    patch, transition, step — are handed out as recorded: their info is the store's;
    a state or machine event the newer version added or renamed is one the current
    machine lacks, which :func:`replay` reports)."""
    version = event.schema_version
    current = schema.version
    if version > current and event.type not in _STORE_TYPES:
        # recorded by newer code (a rolling deploy): its type and info may be renamed or
        # reshaped by a version this code does not know, and no caster takes them back
        raise EventVersionTooNew(
            schema.name, event.type, version, current, agent_id=event.agent_id, seq=event.seq
        )
    if version >= current:
        return event
    event_type = event.type
    info = dict(event.info)
    if event.type == EventType.TRANSITION:
        if "event" in info and isinstance(info["event"], str):
            info["event"] = schema.event_name(info["event"], version)
        for key in ("from", "to"):
            if isinstance(info.get(key), str):
                info[key] = schema.state_name(info[key], version)
    elif event_type not in _STORE_TYPES:
        for step in range(version, current):
            fn = schema.event_upcasters.get((event_type, step))
            if fn is not None:
                event_type, info = _cast_event(schema, fn, event_type, info, step, event)
            event_type = schema.event_renames.get(step, {}).get(event_type, event_type)
    return dataclasses.replace(
        event,
        type=event_type,
        info=info,
        fsm_state=schema.state_name(event.fsm_state, version),
        schema_version=current,
    )


async def history(
    store: StateStore, agent_id: str, schema: ModelSchema[Any], *, after_seq: int = 0
) -> AsyncIterator[Event]:
    """The agent's events, each brought to the current schema (see :func:`upcast_event`)."""
    async for event in store.history(agent_id, after_seq=after_seq):
        yield upcast_event(schema, event)


def replay(machine: AgentStateMachine[Any, Any], events: Iterable[Event]) -> int:
    """Check recorded transitions (already upcast) against ``machine``: each ``from``
    and ``to`` must be states of the current definition and each move one its rules
    allow; the machine ends restored in the last recorded state. Returns how many
    transitions were replayed. Raises :class:`~statekeeper.errors.UnknownState` or
    :class:`~statekeeper.errors.InvalidTransition` naming the first one that does not
    fit."""
    count = 0
    for event in events:
        try:
            count += _replay_one(machine, event)
        except UnknownState as exc:  # (the definition lost a state the history holds)
            how = f"at seq {event.seq} is in a state the machine lacks"
            raise exc.for_agent(event.agent_id, how) from None
    return count


def _replay_one(machine: AgentStateMachine[Any, Any], event: Event) -> int:
    """Check and replay one event (see :func:`replay`): 1 for a transition, else 0."""
    if event.fsm_state is not None and event.type != EventType.TRANSITION:
        machine.restore(event.fsm_state)
        return 0
    if event.type != EventType.TRANSITION:
        return 0
    source, target, trigger = (
        event.info.get("from"),
        event.info.get("to"),
        event.info.get("event"),
    )
    machine.restore(str(source))
    if trigger is not None:
        machine.state_for(str(target))  # UnknownState if the definition lost it
        if str(target) not in _targets(machine, trigger):
            raise InvalidTransition(
                machine.current_state,
                trigger,
                f"seq {event.seq} of agent {event.agent_id!r} moved to {target!r}, "
                "which the current machine does not allow",
            )
    machine.restore(str(target))
    return 1


def _targets(machine: AgentStateMachine[Any, Any], trigger: Any) -> set[Any]:
    """The state values ``trigger`` may lead to from the machine's current state."""
    here = _value(machine.current_state)
    wanted = _value(trigger)
    return {
        _value(rule.to_state)
        for rule in machine.rules
        if _value(rule.from_state) == here and _value(rule.event) == wanted
    }


def _value(x: Any) -> Any:
    return getattr(x, "value", x)
