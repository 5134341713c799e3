"""What a restore's target must take before anything is written: a stream compacted
by retention needs an engine that holds one, a target opened in a namespace takes only
the streams inside it. Each refusal is a :class:`~statekeeper.errors.BackupError`
naming the first stream it refuses. And the target's store id, renewed by the restore,
keeps its key family's data keys (:func:`renew_store_id`); after the writes, the
target takes the keys of the agents it copied (:func:`adopt_copied_keys`), and the
compacted streams raise the target's feed floor (:func:`floor_over_bases`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...backends.base import Capability
from ...codec.pipeline import _FP, Codec
from ...errors import AccessDenied, BackupError
from ...security.witness_store import renewed, renewing
from ...store.feed_deletes import record_restored
from ...store.feed_retention import has_feed, trim_below_bases
from ...store.keyguard import key_family
from ...store.namespaced import NamespacedStateStore
from ..hooks import is_store_admin

if TYPE_CHECKING:
    from ...store import StateStore
    from .restore import _Plan

__all__ = [
    "adopt_copied_keys",
    "check_namespace",
    "check_target_takes",
    "floor_over_bases",
    "renew_store_id",
]

_PAGE = 500
_log = logging.getLogger("statekeeper.restore")


def check_target_takes(store: StateStore, plans: dict[str, _Plan], tags: dict[str, bytes]) -> None:
    """A stream compacted by retention is written as it is stored (its base snapshot,
    then the events after it): the target engine must be able to hold one, else
    :class:`~statekeeper.errors.BackupError` before anything is written."""
    if store.backend.supports(Capability.BASE_IMPORT):
        return
    compacted = sorted(a for a in tags if plans[a].compacted)
    if compacted:
        plan = plans[compacted[0]]
        raise BackupError(
            f"agent {compacted[0]!r} (and {len(compacted) - 1} more) was compacted by"
            f" retention (its history before seq {plan.compacted + 1} is gone): the target"
            f" engine {store.backend.name} cannot hold a compacted stream; restore into"
            " memory, SQLite, PostgreSQL, Redis, S3 or tiered (nothing was restored)"
        )


def check_namespace(store: StateStore, listed: set[str]) -> None:
    """A target opened in a namespace takes only streams inside it (a backup holds
    stored, full ids: they are restored as they are, never re-qualified)."""
    if not isinstance(store, NamespacedStateStore) or not store.namespace:
        return
    prefix = store.namespace + "/"
    outside = sorted(a for a in listed if not a.startswith(prefix))
    if outside:
        shown = "the store's own streams" if outside[0][:1] == "\x01" else repr(outside[0])
        raise BackupError(
            f"the backup holds {len(outside)} stream(s) outside namespace"
            f" {store.namespace!r} (e.g. {shown}); a target opened in a namespace takes"
            " only its own agents: restore into the whole store (no namespace) instead"
        )


async def renew_store_id(store: StateStore, agent_ids: Sequence[str] = ()) -> None:
    """Renew the target's feed id, which is also its key family
    (:mod:`statekeeper.codec.keyscope`): the new family is linked to the old one in
    the key vault, so the target keeps writing, and ``forget`` keeps destroying, the
    data keys of its agents from before the restore.

    Only where the store may act on the feed every tenant shares (:func:`~..hooks.
    is_store_admin`: opened without a principal, or as an admin of every namespace),
    as for raising its floor (:func:`floor_over_bases`). A tenant admin's restore
    (``agent_ids``: what it writes, all in its namespaces) renumbers none of another
    tenant's events — the restored agents enter the feed as new positions after every
    cursor — and renewing the id every cursor names made every tenant's subscribers
    rebuild their read models (``FeedChanged``): it is left, and a warning says so.
    Each restored agent gets a tombstone first (:func:`~...store.feed_deletes.
    record_restored`): a subscriber that still held its events (it expired, or an
    older version deleted it: no tombstone then) drops them before the restored ones
    come (was: applied them twice)."""
    if not is_store_admin(store):
        if has_feed(store.backend):
            await store._ready(write=True)  # (a key checked, the family read: then seal)
            await key_family(store.backend, store.codec)
            await record_restored(
                store.backend, store.codec, [a for a in agent_ids if a[:1] != "\x01"]
            )
            shown = sorted(a for a in agent_ids if a[:1] != "\x01")[:1]
            _log.warning(
                "the change feed's id was not renewed (only an admin of every namespace"
                " may renew the id every tenant's cursors name): the %d restored stream(s)"
                " (e.g. %r) enter the feed as new positions after every cursor, and a"
                " subscriber of their namespace receives them as new appends, each after"
                " a tombstone of it",
                len(agent_ids),
                (store.relative(shown[0]) if isinstance(store, NamespacedStateStore) else shown[0])
                if shown
                else "-",
            )
        return
    old = await key_family(store.backend, store.codec)
    # first, the id it has now marked as one it had: a witness file naming it (one the
    # restore does not know, witness=PATH; or this one, stopped before renewed()) is
    # taken over at the next opening (.witness_store.adopt_renewed), not refused
    await renewing(store.backend)
    new = await store.backend.renew_feed_id()
    witness = getattr(store, "witness", None)
    if witness is not None:  # (it records the store's id: the new one from now on)
        await renewed(witness, store.backend)
    keyring = store.codec.keyring
    scoped = keyring.scoped if keyring is not None else None
    if scoped is not None and old is not None and new is not None:
        scoped.link_family(new, old)
        store.codec.key_family = new


async def adopt_copied_keys(
    store: StateStore, agent_ids: Sequence[str], *, legacy: bool = True
) -> int:
    """Give the target's key family the data key of each agent the restore wrote
    under another family's key (a copy of another store: :func:`statekeeper.codec.
    keyscope.adopt`): its writes after the restore are sealed with that key, so the
    source's ``forget`` shreds the whole copy — before, the target wrote on under a key
    of its own, and its newest snapshot (the whole state) still loaded after the
    source forgot the agent. Called before the restore seals anything (its rebuilt
    snapshots), with the agents it skipped as held too: a restore killed between its
    writes and this, run again (``skip_existing``), writes none of them. The newest
    record of each agent names the key (one read of every head per page); how many
    agents were given a key (``legacy=False``: another family's key only, see
    :func:`~statekeeper.codec.keyscope.adopt`)."""
    keyring = store.codec.keyring
    agents = [a for a in agent_ids if a[:1] != "\x01"]  # (the store's own streams)
    if keyring is None or keyring.scoped is None or not agents:
        return 0
    # (resolved here: a rerun that writes nothing renews no id, which resolves it)
    family = await key_family(store.backend, store.codec)
    if family is None:
        return 0
    adopted = 0
    for at in range(0, len(agents), _PAGE):
        page = agents[at : at + _PAGE]
        heads = await store.backend.read_heads(page)
        copied: list[tuple[str, bytes]] = []
        for agent_id, raw in zip(page, heads, strict=True):
            header = Codec.header(raw.payload) if raw is not None else None
            if raw is not None and header is not None and header.data_key:
                end = 3 + raw.payload[2]
                copied.append((agent_id, bytes(raw.payload[end : end + _FP])))
        adopted += len(await asyncio.to_thread(keyring.adopt_in, family, copied, legacy=legacy))
    return adopted


async def floor_over_bases(
    store: StateStore, bases: dict[str, int], skipped: dict[str, int] | None = None
) -> None:
    """After a restore or an import wrote streams compacted by retention (``bases``:
    stored agent id -> base seq, 0 for a whole stream), raise the target's feed floor
    through each one's first event there
    (:func:`~statekeeper.store.feed_retention.trim_below_bases`): else a projection
    rebuilt from position 0 folds their kept events onto nothing and counts none of
    what came before, silently unlike the source's live one (whose feed retention
    trimmed). Left alone, as retention leaves it, by a principal that may not trim the
    feed every tenant shares (a warning says so, naming a stream). A store admin's
    write of each such stream raised it already, atomically with the stream
    (:func:`~statekeeper.store.feed_retention.from_base_floored`): this step alone left
    a window where a subscriber read the stream without the floor over it; it stays
    for the streams an earlier run left and engines without ``raise_floor``.

    ``skipped``: agents the target held already (left as they are: ``skip_existing``)
    -> the base the backup or the file gives them. Those whose stream there starts at
    that base are raised over too: a restore or an import stopped after writing them
    and before this (killed, or run by a version that did not raise it), run again
    with ``skip_existing``, writes nothing and would leave the gap for good."""
    if skipped and is_store_admin(store):
        ids = sorted(a for a, base in skipped.items() if base >= 1)
        there = await store.backend.stream_bases(ids) if ids else []
        bases = {**{a: b for a, b in zip(ids, there, strict=True) if b == skipped[a]}, **bases}
    if not any(bases.values()):
        return
    if is_store_admin(store):
        try:
            await trim_below_bases(store, bases)
            return
        except AccessDenied:  # a tenant's database role under row security
            pass
    if has_feed(store.backend):  # said, as retention says it (was: silently)
        based = sorted(a for a, base in bases.items() if base >= 1)
        _log.warning(
            "the change feed's floor was not raised over %d stream(s) compacted by"
            " retention (e.g. %r): only an admin of every namespace may trim the feed"
            " every tenant shares; a projection rebuilt from position 0 counts only the"
            " events kept after each base: rebuild it from the states",
            len(based),
            store.relative(based[0]) if isinstance(store, NamespacedStateStore) else based[0],
        )
