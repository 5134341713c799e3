"""How ``statekeeper import`` (:mod:`.transfer`) writes one agent of the file: created
(from its base when the file's agent was compacted) then its events appended one by
one, each as the file has it (type, info, ops, state, key, actor, version), the last
one written kept as the store holds it (for :func:`.import_undo.written`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .import_undo import last_written

if TYPE_CHECKING:
    from ..store import StateStore
    from .import_lines import ImportedAgent as _Agent

__all__ = ["write_agent"]


async def write_agent(
    store: StateStore,
    agent: _Agent,
    stamp: list[float],
    stored: int,
    last: list[tuple[int, bytes | None] | None] | None = None,
) -> None:
    """Write the agent's events after the ``stored`` first ones (0: create it);
    ``last``: set to the last one written, as the store keeps it (seq, checksum)."""
    if not stored and agent.base is not None:  # compacted at its base, as the source
        from ..governance.hooks import is_store_admin
        from ..store.based import create_from_base

        first = agent.events[0]
        stamp[0] = float(first["ts"])
        await create_from_base(
            store,
            agent.agent_id,
            agent.base,
            first["type"],
            first["info"],
            first["ops"],
            fsm_state=first.get("fsm"),
            idempotency_key=first.get("key"),
            actor=first.get("actor"),
            schema_version=first.get("v"),
            # the feed's floor over it in the same write: a subscriber reading between
            # this write and the import's floor step folded its events onto nothing
            raise_floor=is_store_admin(store),
        )
    elif not stored:
        first = agent.events[0]
        stamp[0] = float(first["ts"])
        await store.create(
            agent.agent_id,
            first["ops"][0]["value"],
            fsm_state=first.get("fsm"),
            schema_version=first.get("v", 1),
            idempotency_key=first.get("key"),
            actor=first.get("actor"),
        )
    if last is not None and not stored:
        last[:] = [last_written(store, agent.agent_id)]
    for line in agent.events[stored - agent.base_seq if stored else 1 :]:
        stamp[0] = float(line["ts"])
        await store.append(
            agent.agent_id,
            line["type"],
            line["info"],
            ops=line["ops"],
            fsm_state=line.get("fsm"),
            idempotency_key=line.get("key"),
            actor=line.get("actor"),
            schema_version=line.get("v"),
        )
        if last is not None:
            last[:] = [last_written(store, agent.agent_id)]
