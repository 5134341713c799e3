"""The writing pass of a restore from one store image (a full file backup, or a run of
page backups rebuilt into one) into an empty store of an engine that copies one in
bulk (:meth:`~statekeeper.backends.base.Backend.import_image`: SQLite, by ``INSERT ...
SELECT`` from the attached image, no record a Python object): the image's streams
were all checked by the checking pass (every record opened with the target's keys,
every chain followed, every head tag the target's own), so the streams are written as
the image holds them instead of appended one request at a time (:mod:`.writepass`,
~55 % of a restore's CPU, docs/benchmarks.md "backup15").

Taken only when it writes what the record path would: one image, every agent of the
backup restored (none forgotten, none left out), each with its head tag kept; the
engine checks the target holds no stream and that what it wrote is the count the
checking pass found. Otherwise (another engine, a target with streams, tags made
again) :mod:`.writepass` writes.

The copy is one write transaction: all of it or nothing, and the target's write lock
held for its length (~2-3 CPU-s for 100,000 agents and 188 MB): another process
writing to the same target meanwhile waits, as for any long transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import BackupCorrupt
from ..hooks import is_store_admin

if TYPE_CHECKING:
    from ...store import StateStore
    from .restore import _Part, _Plan

__all__ = ["write_image"]


async def write_image(
    store: StateStore, parts: Sequence[_Part], plans: dict[str, _Plan], tags: dict[str, bytes]
) -> int | None:
    """How many agents were written from the image in bulk, or None (nothing written:
    the record path then writes)."""
    if len(parts) != 1 or len(tags) != len(plans):
        return None
    path, image, _ = parts[0]
    if image is None:
        return None
    if any(plans[a].tag is None or plans[a].tag != tag for a, tag in tags.items()):
        return None
    chosen = [plans[a] for a in tags]
    counts = (
        len(chosen),
        sum(p.events for p in chosen),
        sum(
            (p.snapshot is not None)
            + (p.compacted > 0 and (p.snapshot is None or p.snapshot[0] != p.compacted))
            for p in chosen
        ),
    )
    try:
        # the feed's floor over the compacted streams in the copy's own transaction
        # (a store admin's restore: restoretarget.floor_over_bases says why)
        floor = is_store_admin(store) and any(p.compacted for p in chosen)
        done = await store.backend.import_image(
            image, counts, **({"raise_floor": True} if floor else {})
        )
    except BackupCorrupt as exc:
        raise BackupCorrupt(path, exc.what, exc.reason) from None
    return len(chosen) if done else None
