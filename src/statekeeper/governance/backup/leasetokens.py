"""The fencing tokens a backup carries (``"lease_tokens"`` in its manifest).

Lease rows are no stream: no backup format copied them (the row path copies streams;
a SQLite image's restore writes its streams only), and a restored store handed every
agent token 1 again: a worker paused under (holder "w1", token 1) before the restore
wrote, when it resumed, under the lease a new "w1" took of the restored agent — the
fencing promise broken with nothing said (docs/concurrency.md, section 2).

Every manifest (full or incremental, any format) lists ``{stored agent id: newest
token}`` of the agents the backup covers (its namespace's on a namespace's backup),
read as the manifest is sealed, after the copy: each is at least the token of any
write the copy holds. The writers seal far from the store (:mod:`.writer`): the
reading is handed to them in a context variable set for the one backup being
written, as the holds are (:mod:`.nsholds`). A restore raises the target's token of
each agent it writes to the largest any manifest of the chain lists
(:meth:`~statekeeper.backends.base.Backend.carry_lease_tokens`), before it writes the
agents; nobody holds the carried lease. A backup written before (no entry) restores
as it did: tokens start at 1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ...backends.lease_tokens import newest_tokens
from .fileformat import BackupKey, FrameReader

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["carry_leases", "sealed_leases", "sealing_leases"]

_Reading = Callable[[], Awaitable[dict[str, int] | None]]
_SEALING: ContextVar[_Reading | None] = ContextVar("sk_backup_leases", default=None)


@contextlib.contextmanager
def sealing_leases(store: StateStore) -> Iterator[None]:
    """While one backup of ``store`` (its namespace and below, if opened in one) is
    written."""
    from ...store.namespaced import NamespacedStateStore

    namespace = store.namespace if isinstance(store, NamespacedStateStore) else ""
    backend = store.backend
    token = _SEALING.set(lambda: newest_tokens(backend, namespace + "/" if namespace else ""))
    try:
        yield
    finally:
        _SEALING.reset(token)


async def sealed_leases() -> dict[str, Any]:
    """The manifest's entry for the backup being written: ``{"lease_tokens": {...}}``,
    or none (an engine without leases)."""
    reading = _SEALING.get()
    tokens = await reading() if reading is not None else None
    return {} if tokens is None else {"lease_tokens": tokens}


def _listed(path: str, key: BackupKey) -> dict[str, int]:
    reader = FrameReader(path, key)
    try:
        listed = reader.manifest.get("lease_tokens") or {}
    finally:
        reader.close()
    return {
        str(a): t
        for a, t in (listed.items() if isinstance(listed, dict) else ())
        if type(t) is int and t > 0
    }


async def carry_leases(
    store: StateStore, paths: Sequence[str], key: BackupKey, agents: Collection[str]
) -> int:
    """Raise the target's token of each of ``agents`` (stored ids, those the restore
    writes) to the largest the backups' manifests list; how many were listed."""
    import asyncio

    newest: dict[str, int] = {}
    for path in paths:
        for agent_id, token in (await asyncio.to_thread(_listed, path, key)).items():
            if agent_id in agents and token > newest.get(agent_id, 0):
                newest[agent_id] = token
    if newest:
        await store.backend.carry_lease_tokens(sorted(newest.items()))
    return len(newest)
