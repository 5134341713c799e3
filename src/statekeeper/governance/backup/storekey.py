"""The keys that sealed a store's newest records, for a backup of a store opened
without its keys.

``backup`` refuses a backup key that is one of the store's master keys
(:meth:`.fileformat.BackupKey.check_not_store_key`): whoever holds the store's key must
not open its backups. A store opened with its keyring is checked against every key of
it. A backup needs no store key (it copies records as stored), so it is often taken
without one; then each record's clear header tells the key that sealed it: its key id
and the 4-byte fingerprint of that master key. The head records of the most recently
written agents (:func:`~statekeeper.store.keyguard.newest_heads`) and of the store's
own streams (legal holds, audit log) give the keys the store seals with now — the key
file an operator would give by mistake. A key that sealed only older records, or
records sealed with agents' data keys (crypto-shredding), is not seen this way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...arguments import AUDIT_STREAM, HOLDS_STREAM
from ...codec.pipeline import _FP, Codec
from ...store.keyguard import newest_heads

if TYPE_CHECKING:
    from ...store import StateStore

__all__ = ["sealing_keys"]


async def sealing_keys(store: StateStore) -> list[tuple[str, bytes]]:
    """(key id, fingerprint) of the master keys that sealed the store's newest records;
    none when the store was opened with its keyring (that one is checked instead)."""
    if store.codec.keyring is not None:
        return []
    backend = store.backend
    heads = [*await newest_heads(backend), *await backend.read_heads([HOLDS_STREAM, AUDIT_STREAM])]
    found: list[tuple[str, bytes]] = []
    for raw in heads:
        header = Codec.header(bytes(raw.payload)) if raw is not None else None
        if raw is None or header is None or header.key_id is None or header.data_key:
            continue
        end = 3 + raw.payload[2]
        found.append((header.key_id, bytes(raw.payload[end : end + _FP])))
    return found
