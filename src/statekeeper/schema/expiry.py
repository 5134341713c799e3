"""States that expire (``Session``): their expiry honoured on every backend.

A model whose instances have an ``expires_at`` property (seconds since the epoch, or
None for never — :class:`~statekeeper.schema.structures.Session` computes it from
``last_seen + ttl``) is an *expiring* model. For its agents:

* on an engine with a native TTL (:attr:`Capability.TTL <statekeeper.backends.base.Capability>`:
  Redis), every write through a :class:`~statekeeper.schema.TypedAgent` sets the agent's
  key expiry to the time left (:func:`apply_ttl`): Redis deletes the agent by itself;
* on every engine, reading the latest state of an expired agent treats it as gone
  (``TypedStates.get`` gives None, ``TypedStates.load`` raises ``AgentNotFound``,
  ``store.agent(id, model=...)`` deletes it and starts a new one) — also between the
  moment it expired and the moment Redis removes it;
* :func:`expire` deletes every expired agent of a model (the sweep an engine without a
  native TTL needs to reclaim the space; run it from a scheduler).

A delete made because a state read expired is made only while the agent is still at
the seq that was read (:func:`~statekeeper.store.conditional.delete_only_at`): a
session touched by another worker between that read and the delete is no longer
expired, and deleting it would lose that acknowledged write without an error. Nor is
one deleted and made again by another worker up to that seq: the delete is
conditional on the head record's checksum too, read before the state is judged again
(:func:`judged_again`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..backends.base import Capability
from ..errors import AgentOnHold, ConflictError, SchemaError
from ..store.conditional import delete_only_at
from .models import MODEL_KEY
from .registry import ModelSchema, SchemaRegistry, schema_of
from .rewrite import states_of, stored

if TYPE_CHECKING:
    from ..store.store import StateStore

__all__ = ["apply_ttl", "expire", "expires_at", "expiring", "is_expired", "judged_again"]

#: the smallest TTL given to the engine (a state written already expired)
_MIN_TTL = 0.001


def expiring(model: type[Any]) -> bool:
    """True when ``model``'s instances say when they expire (an ``expires_at`` property)."""
    return isinstance(getattr(model, "expires_at", None), property)


def expires_at(state: object) -> float | None:
    """When ``state`` expires (seconds since the epoch), None when it never does or
    its model does not expire."""
    if not expiring(type(state)):
        return None
    at = getattr(state, "expires_at", None)
    return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else None


def is_expired(state: object, now: float | None = None) -> bool:
    """True once ``state``'s expiry has passed."""
    at = expires_at(state)
    return at is not None and (time.time() if now is None else now) >= at


async def apply_ttl(store: StateStore, agent_id: str, state: object) -> bool:
    """Set the agent's engine TTL to the time ``state`` has left (the engine's default
    TTL, if any, when it never expires), on engines with a native TTL; a no-op
    elsewhere (False) and for models that do not expire. Write-behind appends are
    flushed first, so the TTL lands on the stored agent."""
    if not expiring(type(state)) or not store.backend.supports(Capability.TTL):
        return False
    at = expires_at(state)
    # a state that never expires goes back to the engine's own default (Redis ``ttl=``
    # option: the operator's policy for every agent), not to "forever"
    default = getattr(store.backend, "ttl", None)
    ttl = default if at is None else max(at - time.time(), _MIN_TTL)
    if store.durability == "async":
        await store.flush()
    # the engine names the agent by its stored id (a namespaced store's are relative)
    return await store.backend.set_ttl(stored(store, [agent_id])[0], ttl)


async def expire(
    store: StateStore,
    model: type[Any] | ModelSchema[Any],
    *,
    schemas: SchemaRegistry | None = None,
    now: float | None = None,
) -> list[str]:
    """Delete every agent of ``model`` whose latest state has expired; returns their
    ids. Agents of other models (and untyped ones) are left alone."""
    schema = schema_of(model, schemas)
    if not expiring(schema.adapter.model):
        return []
    now = time.time() if now is None else now
    names = schema.names()
    gone: list[str] = []
    after: str | None = None
    while True:
        page = await store.list_agents(after=after, limit=1000)
        ids = [info.agent_id for info in page]
        for agent_id, snap in zip(ids, await states_of(store, ids), strict=True):
            if snap is None or snap.data.get(MODEL_KEY) not in names:
                continue
            try:
                state = schema.load(snap.data, snap.schema_version, agent_id=agent_id, seq=snap.seq)
            except SchemaError:
                continue  # unreadable as the model: not this sweep's to judge
            if not is_expired(state, now):
                continue
            checksum = await judged_again(store, schema, agent_id, snap.seq, now)
            if checksum is None:
                continue  # written (or deleted) since it was read: no longer judged, kept
            try:
                with delete_only_at(snap.seq, checksum):  # only the state judged expired
                    if await store.delete(agent_id):
                        gone.append(agent_id)
            except AgentOnHold:
                continue  # a legal hold exempts it from every purge: kept, expired or not
            except ConflictError:
                continue  # written since it was read (touched): no longer judged, kept
        if len(page) < 1000:
            return gone
        after = ids[-1]


async def judged_again(
    store: StateStore, schema: ModelSchema[Any], agent_id: str, seq: int, now: float | None = None
) -> bytes | None:
    """The stored checksum of ``agent_id``'s event at ``seq`` (the head a state judged
    expired was read at), if the state read again after it is still at ``seq`` and
    expired — the delete conditional on that checksum then deletes the stream judged,
    never one deleted and made again since up to ``seq`` (another head record). None:
    written, deleted or made again since; not to be deleted now."""
    checksum = await store.backend.head_checksum(stored(store, [agent_id])[0], seq)
    if checksum is None:
        return None
    again = await store.get(agent_id)
    if again is None or again.seq != seq:
        return None
    try:
        state = schema.load(again.data, again.schema_version, agent_id=agent_id, seq=seq)
    except SchemaError:
        return None
    return checksum if is_expired(state, now) else None
