"""Checking a lease given for one agent (``store.agent(..., lease=)``, ``agent.bind``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import StateStore

__all__ = ["check_agent_lease"]


def check_agent_lease(store: StateStore, agent_id: str, lease: object) -> None:
    """Refuse ``lease`` for ``agent_id`` of ``store`` (as the caller names it) when it
    was granted on another agent (see :func:`.writes.check_lease_agent`)."""
    from .namespaced import NamespacedStateStore
    from .writes import check_lease_agent, check_write_options

    check_write_options(None, None, lease)
    if isinstance(store, NamespacedStateStore):
        check_lease_agent(store.qualify(agent_id), lease, store.relative)
    else:
        check_lease_agent(agent_id, lease)
