"""What :mod:`.rekey` leaves as it is: a record sealed as the codec seals it now, and an
agent whose data key ``forget`` destroyed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec import Codec

if TYPE_CHECKING:
    from ..codec.pipeline import Opened
    from ..store.store import StateStore

__all__ = ["forgotten", "sealed_now"]


def sealed_now(
    opened: Opened, payload: bytes, active: str, own_keys: bool, legacy: bytes | None = None
) -> bool:
    """Whether a record is sealed as the codec seals it now: under the ``active`` key
    and, with a key vault (``own_keys``), with the agent's own data key. A record written
    before the vault, under the master key alone, is not: re-sealed, since ``forget``
    could not make it unreadable otherwise. Nor is, in a store with a key family
    (:mod:`statekeeper.codec.keyscope`), a record under the agent's legacy data key
    (``legacy``: its fingerprint), from before key families: shared by every store of
    the vault (``forget`` in any of them destroys it), the store's records move to its
    own family's key. (A record under another family's key — a restored copy of
    another store's — stays: it is shredded with the store it was copied from.)"""
    if opened.key_id != active or opened.version == 0:
        return False
    header = Codec.header(payload) if own_keys else None
    if header is None or not header.data_key:
        return header is None
    if legacy is None:
        return True
    end = 3 + payload[2]
    return bytes(payload[end : end + len(legacy)]) != legacy


def forgotten(vault: Any, store: StateStore, listed: str) -> bool:
    """Whether the key vault holds a tombstone for the agent ``listed`` (as the store
    lists it: relative in a namespaced store, whose vault holds stored ids)."""
    qualify = getattr(store, "qualify", None)
    agent_id = qualify(listed) if callable(qualify) else listed
    keyring = store.codec.keyring
    if keyring is not None and keyring.data_keys is vault:  # (its family's tombstone)
        # (the store lists the agent: a restored copy's source tombstone counts too)
        return keyring.forgotten_in(store.codec.key_family, agent_id, held=True) is not None
    entry = vault.load(agent_id)
    return entry is not None and entry.wrapped is None
