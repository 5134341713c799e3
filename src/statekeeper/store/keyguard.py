"""Refusing to write in the clear into an encrypted store.

A store opened without a key encodes records in the clear. Into a store that holds
encrypted records, that would put plaintext where the user believes everything is
encrypted, silently. So before its first write (once: nothing per save; reads never
look), a store without a key looks at the newest records: the heads of the most
recently written agents (the first by id where the engine has no index on the last
write). When one is encrypted (its header names a key), every write raises
:class:`~statekeeper.errors.KeyRequired` before anything is stored. Reads go on as
before: an encrypted record still raises :class:`~statekeeper.errors.DecryptionError`;
a record in the clear still loads.

The newest records decide, so no marker is needed and stores written before this
check are covered on every engine: a store whose newest write was encrypted is an
encrypted store.
"""

from __future__ import annotations

from ..backends.base import Backend
from ..codec.pipeline import VERSION
from ..errors import KeyRequired

__all__ = ["SAMPLE", "KeyGuard", "is_encrypted"]

#: how many of the newest agents' heads are looked at
SAMPLE = 8


def is_encrypted(payload: bytes) -> bool:
    """True for a record encrypted with a key: a version-1 header with a key id
    (byte 2, the key id's length, is not 0). A version-0 record (a JSON object) never is."""
    return len(payload) > 2 and payload[0] == VERSION and payload[2] != 0


class KeyGuard:
    """Whether a store without a key may write: decided once, by :meth:`check`."""

    def __init__(self, encrypted: bool) -> None:
        #: True once writes are known to be allowed (a store with a key: from the start)
        self.ok = encrypted
        self._error: KeyRequired | None = None
        self._looked = encrypted

    async def check(self, backend: Backend) -> bool:
        """Before a write: look at the store's newest records (the first time only).
        True when writes are allowed; raises :class:`KeyRequired` into an encrypted store."""
        if not self._looked:
            if await _holds_encrypted(backend):
                self._error = KeyRequired(repr(backend))
            self._looked = True
            self.ok = self._error is None
        if self._error is not None:
            raise KeyRequired(self._error.location)
        return True


async def _holds_encrypted(backend: Backend) -> bool:
    if backend.lists_by_write:
        agents = await backend.list_agents_by_write(limit=SAMPLE)
    else:
        agents = await backend.list_agents(limit=SAMPLE)
    if not agents:
        return False
    heads = await backend.read_heads([agent.agent_id for agent in agents])
    return any(head is not None and is_encrypted(head.payload) for head in heads)
