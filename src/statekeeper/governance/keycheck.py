"""Checking, before anything is written, that the keys given open a store's records.

A command given a key that is not the store's (a wrong key file or keyring) must say so
first, in one way: the :class:`~statekeeper.errors.DecryptionError` of the first record
it cannot open, in words ("the key does not open this store: wrong key file or
keyring?"). Without the check, a command that decrypts nothing on its way (a backup
copies records as stored; a retention dry run plans from clear headers) would report
success under a key that cannot open anything it made, and a record sealed under that
key (a legal hold, an audit entry) would be unreadable to the store's other users.

:func:`check_keys` opens the store's own records: the last legal holds record, else the
audit log's last entry, else the last record of the first agent (in id order) that is
not forgotten. An empty store passes (there is no one the keys could lock out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..arguments import AUDIT_STREAM, HOLDS_STREAM, INTERNAL_PREFIX
from ..errors import AgentForgotten, DecryptionError, KeyNotFound

if TYPE_CHECKING:
    from ..store import StateStore

__all__ = ["check_keys"]


async def check_keys(store: StateStore, why: str = "") -> None:
    """Raise :class:`~statekeeper.errors.DecryptionError` unless ``store``'s keys open
    its own records (see the module); ``why`` (what a wrong key would do, for the
    message) is added to its reason."""
    backend = store.backend
    for stream in (HOLDS_STREAM, AUDIT_STREAM):
        head = await backend.head(stream)
        if head:
            await _open_last(store, stream, head, why)
            return
    after: str | None = None
    while page := await backend.list_agents(after, limit=100):
        for info in page:
            if info.agent_id.startswith(INTERNAL_PREFIX) or not info.head_seq:
                continue
            try:
                await _open_last(store, info.agent_id, info.head_seq, why)
            except AgentForgotten:
                continue  # a destroyed data key says nothing about the keys given
            return
        after = page[-1].agent_id


async def _open_last(store: StateStore, stream: str, head: int, why: str) -> None:
    codec = store.codec
    for raw in await store.backend.read(stream, head - 1, head, limit=1):
        try:
            codec.open(stream, raw.seq, raw.type, raw.timestamp, raw.payload, raw.checksum)
        except DecryptionError as exc:
            if not why or (isinstance(exc, KeyNotFound) and exc.no_keyring):
                raise  # (no key given at all: said so, not blamed on a key)
            reason = f"{exc.reason}; {why}"
            raise DecryptionError(exc.agent_id, exc.seq, exc.key_id, reason) from None
