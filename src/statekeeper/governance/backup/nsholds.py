"""The legal holds of a namespace's backup.

The holds are one stream of the store's own (:data:`~statekeeper.arguments.HOLDS_STREAM`)
for the whole store, and a backup of a store opened in a namespace copies that
namespace's streams only: it held none of them, and a restore of it delivered every
held agent unheld (``forget``, ``delete``, retention could then destroy it), with
nothing said. The stream itself cannot go into a tenant's backup (it names the other
tenants' matters), so the manifest (encrypted and authenticated under the backup key,
as every frame) lists the holds in force on the namespace's agents and namespaces
(``"holds"``: pattern, reason, principal, time) and a restore places each one the
target lacks before it writes any agent, as it places a whole backup's
(:mod:`.restoreholds`).

The writers seal their manifests far from the store (:mod:`.writer`): the list is
handed to them in a context variable set for the one backup being written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ...store.holds import Hold, list_holds
from ...store.namespaced import NamespacedStateStore
from .fileformat import BackupKey, FrameReader

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["manifest_holds", "namespace_holds", "sealed_holds", "sealing_holds"]

_SEALING: ContextVar[list[dict[str, Any]] | None] = ContextVar("sk_backup_holds", default=None)


async def namespace_holds(store: StateStore) -> list[dict[str, Any]] | None:
    """The holds on ``store``'s namespace and below, for its backup's manifest; None
    on a store opened without a namespace (its backup copies the holds stream)."""
    if not isinstance(store, NamespacedStateStore) or not store.namespace:
        return None
    prefix = store.namespace + "/"
    return [
        {"pattern": h.pattern, "reason": h.reason, "principal": h.principal, "at": h.at}
        for h in await list_holds(store)
        if h.pattern.startswith(prefix)
    ]


@contextlib.contextmanager
def sealing_holds(holds: list[dict[str, Any]] | None) -> Iterator[None]:
    """While one backup is written: the holds its manifest lists (None: no entry)."""
    token = _SEALING.set(holds)
    try:
        yield
    finally:
        _SEALING.reset(token)


def sealed_holds() -> dict[str, Any]:
    """The manifest's entry for the backup being written: ``{"holds": [...]}`` or none."""
    holds = _SEALING.get()
    return {} if holds is None else {"holds": holds}


def manifest_holds(path: str, key: BackupKey) -> tuple[Hold, ...]:
    """The holds a namespace backup's manifest lists (none in any other backup)."""
    reader = FrameReader(path, key)
    try:
        listed = reader.manifest.get("holds") or ()
    finally:
        reader.close()
    return tuple(
        Hold(str(h["pattern"]), str(h["reason"]), h.get("principal"), float(h.get("at", 0.0)))
        for h in listed
    )
