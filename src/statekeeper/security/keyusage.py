"""``statekeeper keys status``: how many stored records name each key
(:func:`key_usage`), so that a key is retired only once nothing needs it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..arguments import AUDIT_STREAM, HOLDS_STREAM
from ..codec import Codec
from ..errors import StatekeeperError
from ..records import RawEvent
from .rekey_checks import forgotten

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["FORGOTTEN", "data_key_usage", "idempotency_usage", "key_usage"]

#: where :func:`key_usage` counts the records of agents ``forget`` crypto-shredded
FORGOTTEN = "(forgotten)"

_PAGE = 500


async def key_usage(store: StateStore) -> dict[str, int]:
    """How many stored records (events, snapshots) and stream heads name each key, read
    from clear headers. ``"(none)"`` counts records stored in the clear, and
    :data:`FORGOTTEN` those of the agents ``forget`` crypto-shredded (whatever key they
    name: no key opens them any more, none is needed for them). Use it to confirm that
    a retired key is no longer needed.

    The pre-migration records a migration keeps inside each migrated head event (for
    its rollback, until it is finalized or rolled back) count under the key they are
    sealed with: a rotation re-encrypts the event around them, not them, and a
    rollback needs that key to read them. Only the head event is opened for them (one
    decryption per stream); one written since its migration keeps them below its
    head, not counted: its rollback downcasts its current state and needs them (and
    their key) only when forced (``rollback(force=True)``, ``migrate --rollback
    --force``), which names the agent and the key when it is missing.

    On a store opened as a principal: the agents it may read, and the audit log (every
    tenant's entries) only for an admin on ``**``, who alone may read it."""
    from ..schema.rewrite import kept_key_ids  # (the schema imports the store)
    from ..store.feed_intents import sealed_streams
    from ..store.governed import governance_of  # (the store imports this package)

    backend = store.backend
    gov = governance_of(store)
    with_log = gov is None or gov.store_admin()
    counts: dict[str, int] = {}
    keyring = store.codec.keyring
    vault = keyring.data_keys if keyring is not None else None
    from ..store.keyguard import key_family

    await key_family(store.backend, store.codec)  # (whose tombstones count here)
    shredded = False  # the stream counted is a forgotten agent's

    def count(key_id: str | None) -> None:
        name = key_id if key_id is not None else "(none)"
        if shredded:  # its data key is destroyed: no key opens its records any more
            name = FORGOTTEN
        counts[name] = counts.get(name, 0) + 1

    async def ids() -> AsyncIterator[str]:
        async for info in store.iter_agents():
            yield info.agent_id
        if with_log and await backend.head(AUDIT_STREAM) > 0:
            yield AUDIT_STREAM  # sealed like a stream: its keys count too
        if await backend.head(HOLDS_STREAM) > 0:
            yield HOLDS_STREAM  # the legal holds (statekeeper hold): the same
        if with_log:  # the feed's tombstones (every tenant's), which rekey re-encrypts
            for stream in await sealed_streams(backend):
                yield stream

    async for agent_id in ids():
        # (its records named the master key they were sealed under: "old key: run
        # rekey" for ever, as rekey leaves a forgotten agent as it is)
        shredded = vault is not None and await forgotten(vault, store, agent_id)
        _, tag = await backend.head_tag(agent_id)
        count(Codec.head_key_id(tag) if tag is not None and len(tag) > 1 and tag[1] else None)
        cursor = 0
        last: RawEvent | None = None
        while True:
            page = await backend.read(agent_id, cursor, None, limit=_PAGE)
            for raw in page:
                header = Codec.header(raw.payload)
                count(header.key_id if header is not None else "(unreadable)")
                cursor = raw.seq
            last = page[-1] if page else last
            if len(page) < _PAGE:
                break
        if last is not None:
            try:  # (the head event opened: its key may be gone, counted missing above)
                kept = kept_key_ids(store.codec, agent_id, last)
            except StatekeeperError:
                kept = []
            for key_id in kept:
                count(key_id)
        below: int | None = None
        while True:
            snap = await backend.latest_snapshot(agent_id, below)
            if snap is None:
                break
            header = Codec.header(snap.payload)
            count(header.key_id if header is not None else "(unreadable)")
            if snap.seq <= 1:
                break
            below = snap.seq - 1
    return counts


async def idempotency_usage(store: StateStore) -> dict[str, int]:
    """How many idempotency records are stored under each key id (``"(none)"``: in
    clear), forgotten agents' left out. ``rekey`` moves each under the active key but
    one whose events a compaction removed (``idempotency_records_left``): it stays under
    its old key, and once that key is removed from the keyring a retry of its append is
    stored a second time. :func:`key_usage` counts records and heads, not these, so
    ``keys status`` lists them apart. Empty on an engine that cannot list them."""
    from ..backends.base import Capability
    from ..store.idempotency import HMAC_PREFIX

    backend = store.backend
    if not backend.supports(Capability.KEY_EXPORT):
        return {}
    keyring = store.codec.keyring
    vault = keyring.data_keys if keyring is not None else None
    from ..store.keyguard import key_family

    await key_family(store.backend, store.codec)  # (whose tombstones count here)
    qualify = getattr(store, "qualify", None)
    counts: dict[str, int] = {}
    async for info in store.iter_agents():
        if vault is not None and await forgotten(vault, store, info.agent_id):
            continue
        stored_id = qualify(info.agent_id) if callable(qualify) else info.agent_id
        for stored, _, _ in await backend.idempotency_keys(stored_id):
            if stored.startswith(HMAC_PREFIX):
                name = stored[len(HMAC_PREFIX) :].rpartition(":")[0]
            else:
                name = "(none)"
            counts[name] = counts.get(name, 0) + 1
    return counts


async def data_key_usage(store: StateStore) -> dict[str, int]:
    """How many live data keys of the store (its key family and the families it
    continues, in the key vault) are wrapped under each master key id — the agents
    listed or not (a deleted agent's key, kept for the backups taken before; a LangGraph
    thread's pruned generations'). A key still wrapping some is needed to open them:
    ``rekey`` wraps them all under the active key. Empty without a key vault that keys
    by family (or one that cannot list a family's keys: a custom vault)."""
    import asyncio

    from ..codec.keyscope import live_legacy
    from ..store.keyguard import key_family

    keyring = store.codec.keyring
    scoped = keyring.scoped if keyring is not None else None
    live_in = getattr(scoped, "live_in", None)
    family = await key_family(store.backend, store.codec)
    if scoped is None or live_in is None or family is None:
        return {}

    def count() -> dict[str, int]:
        counts: dict[str, int] = {}
        legacy = live_legacy(scoped)  # (no store named: any store of the vault's)
        for entry in [e for one in scoped.families(family) for e in live_in(one)] + legacy:
            name = entry.master_id or "(none)"
            counts[name] = counts.get(name, 0) + 1
        return counts

    return await asyncio.to_thread(count)
