"""The legal holds of a backup restored into a store that has holds of its own.

The holds are a stream of the store's own (:data:`~statekeeper.arguments.HOLDS_STREAM`);
a restore keeps the target's own streams and leaves the backup's copy out
(:mod:`.restore`). Left at that, an agent held in the backup would arrive unheld in a
target that had a hold placed already (or that ``--skip-existing`` restores into), and
``forget``/``delete``/retention could destroy it. A restore must not weaken a
protection: the backup's holds stream is written into a throwaway in-memory store
with the target's codec (the same writing pass as the restore's, so it is verified
as every stream is), read there, and each hold in force in the backup that the target
lacks is placed in the target with :func:`~statekeeper.governance.holds.carry_hold`
as it was placed (its reason, who placed it and when: ``hold list`` shows the
backup's, not the restore's), naming the backup (``restored_from``); audited like
any hold, the entry naming the backup too. Holds the target
has are kept as they are, also one the backup had released.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...arguments import HOLDS_STREAM
from ...backends.memory import MemoryBackend
from ...store.holds import Hold, list_holds, read_holds
from ..holds import carry_hold
from ..hooks import AuditSink
from .fileformat import BackupKey
from .nsholds import manifest_holds
from .writepass import write_all

if TYPE_CHECKING:
    from ...store import StateStore
    from .restore import _Part, _Plan

__all__ = ["backup_holds", "carry_holds", "holds_of"]


async def backup_holds(
    store: StateStore,
    parts: Sequence[_Part],
    key: BackupKey,
    plans: dict[str, _Plan],
    tag: bytes,
) -> tuple[Hold, ...]:
    """The holds in force in the backup's holds stream (its head tag ``tag``), read
    from a throwaway in-memory store with ``store``'s codec: nothing of the target
    written."""
    from ...store import StateStore

    scratch = StateStore(MemoryBackend(), codec=store.codec)
    try:
        await write_all(scratch, parts, key, plans, {HOLDS_STREAM: tag}, 1, None)
        seq, head_tag = await scratch.backend.head_tag(HOLDS_STREAM)
        holds, _ = await read_holds(scratch, seq, head_tag) if seq else ((), b"")
        return holds
    finally:
        await scratch.close()


async def carry_holds(
    store: StateStore, holds: Sequence[Hold], backup_id: str, audit: AuditSink | None
) -> list[str]:
    """Place in ``store`` each of ``holds`` (the backup's) whose pattern it does not
    hold; the patterns placed. The same holds on both sides: nothing written or
    audited."""
    have = {h.pattern for h in await list_holds(store)}
    placed = []
    for hold in holds:
        if hold.pattern in have:
            continue
        if await carry_hold(store, hold, backup_id, audit=audit):
            placed.append(hold.pattern)
    return placed


async def holds_of(
    store: StateStore,
    parts: Sequence[_Part],
    key: BackupKey,
    plans: dict[str, _Plan],
    tags: dict[str, bytes],
    kept: Sequence[str],
) -> tuple[Hold, ...]:
    """The backup's holds to place in ``store`` before its agents: those of its holds
    stream when the target keeps its own (``kept``; else the stream is restored whole),
    or those a namespace's backup lists in its last manifest (:mod:`.nsholds`)."""
    if HOLDS_STREAM in kept:
        return await backup_holds(store, parts, key, plans, tags[HOLDS_STREAM])
    if HOLDS_STREAM in tags:
        return ()
    return manifest_holds(parts[-1][0], key)
