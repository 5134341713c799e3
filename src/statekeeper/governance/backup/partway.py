"""``restore(..., skip_existing=True)`` after a restore stopped part-way.

A full backup and its incrementals restore an agent in parts (the full's events,
then each incremental's); a restore stopped between two parts leaves the agent at
the end of an earlier part: the backup's stream up to there, the same event at that
seq. Skipping such an agent as "already held" would leave it older than the backup
with a report of success, so the restore is refused, naming it, before anything is
written. An agent of the target's own (another stream: another event at its head) is
skipped as documented.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import RestoredPartWay
from ...store.namespaced import NamespacedStateStore

if TYPE_CHECKING:
    from ...store import StateStore


async def stopped_part_way(
    store: StateStore, ends: Mapping[int, bytes], head: int, agent_id: str, held: int
) -> bool:
    """Whether the target's stream of ``agent_id`` (head ``held``) is the backup's up
    to the end of a part that is not its last (``ends``: the checksum of each part's
    last event by its seq; ``head``: the backup's head)."""
    expected = ends.get(held)
    if held == head or expected is None:
        return False
    stored = await store.backend.read(agent_id, held - 1, held)
    return bool(stored) and stored[-1].checksum == expected


async def refuse_part_way(
    store: StateStore, plans: Mapping[str, Any], present: Sequence[str], held: Mapping[str, int]
) -> None:
    """:class:`~statekeeper.errors.RestoredPartWay`, naming every one, when agents of
    ``present`` (held by the target at ``held``) were left by a restore stopped part-way."""
    found: dict[str, tuple[int, int]] = {}
    for agent_id in present:
        plan = plans[agent_id]
        if await stopped_part_way(store, plan.ends, plan.head, agent_id, held[agent_id]):
            shown = (
                store.relative(agent_id) if isinstance(store, NamespacedStateStore) else agent_id
            )
            found[shown] = (held[agent_id], plan.head)
    if found:
        raise RestoredPartWay(found)
