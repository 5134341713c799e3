"""What :mod:`.rekey` leaves as it is: a record sealed as the codec seals it now, and an
agent whose data key ``forget`` destroyed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec import Codec

if TYPE_CHECKING:
    from ..codec.pipeline import Opened
    from ..store.store import StateStore

__all__ = ["forgotten", "sealed_now"]


def sealed_now(opened: Opened, payload: bytes, active: str, own_keys: bool) -> bool:
    """Whether a record is sealed as the codec seals it now: under the ``active`` key
    and, with a key vault (``own_keys``), with the agent's own data key. A record written
    before the vault, under the master key alone, is not: re-sealed, since ``forget``
    could not make it unreadable otherwise."""
    if opened.key_id != active or opened.version == 0:
        return False
    header = Codec.header(payload) if own_keys else None
    return header is None or header.data_key


def forgotten(vault: Any, store: StateStore, listed: str) -> bool:
    """Whether the key vault holds a tombstone for the agent ``listed`` (as the store
    lists it: relative in a namespaced store, whose vault holds stored ids)."""
    qualify = getattr(store, "qualify", None)
    entry = vault.load(qualify(listed) if callable(qualify) else listed)
    return entry is not None and entry.wrapped is None
