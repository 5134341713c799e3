"""Refusing to write in the clear into an encrypted store.

A store opened without a key encodes records in the clear. Into a store that holds
encrypted records, that would put plaintext where the user believes everything is
encrypted, silently. So before its first write (once: nothing per save; reads never
look), a store decides whether it may write:

* The store-level marker ``"encrypted"`` (:meth:`Backend.read_marker`; SQLite's
  ``sk_meta`` table, PostgreSQL's ``sk_markers`` table, Redis's ``<prefix>meta`` hash,
  S3's ``<prefix>/m/`` objects, the memory engine, a tiered store's durable tier) is
  set by the first write of a store with a key (before that write) and by ``rekey``
  (:func:`mark_encrypted`). A store without a key that finds it set raises
  :class:`~statekeeper.errors.KeyRequired` on every write, whatever its newest records
  are (they may be cleartext: written before the store was encrypted, or by an older
  version).
* Stores written before the marker existed, and engines that keep no marker
  (``read_marker`` answers None: a third-party engine): the newest records decide,
  the heads of the most recently written agents (the first by id where the engine has
  no index on the last write). When one is encrypted, writes raise ``KeyRequired``.
  The refusal writes nothing (the marker neither): an older encrypted store is marked
  by its next write with a key.

Reads go on as before: an encrypted record still raises
:class:`~statekeeper.errors.DecryptionError`; a record in the clear still loads.
"""

from __future__ import annotations

import contextlib
import copy

from ..backends.base import Backend
from ..codec.pipeline import VERSION, Codec
from ..errors import AgentLost, IntegrityError, KeyRequired
from ..records import AgentInfo, RawEvent
from .listing import agents_past_lost

__all__ = [
    "ENCRYPTED",
    "SAMPLE",
    "KeyGuard",
    "is_encrypted",
    "key_family",
    "mark_encrypted",
    "newest_heads",
    "own_codec",
]

#: how many of the newest agents' heads are looked at
SAMPLE = 8
#: the name of the store-level marker of an encrypted store
ENCRYPTED = "encrypted"


async def mark_encrypted(backend: Backend) -> None:
    """Set the store-level "encrypted" marker (where the engine keeps markers), unless
    it is set: before the first encrypted write, and by ``rekey``."""
    if await backend.read_marker(ENCRYPTED) is False:
        await backend.set_marker(ENCRYPTED)


async def key_family(backend: Backend, codec: Codec) -> str | None:
    """The key family ``codec`` seals the store's agents with (its keyring's vault keys
    data keys by family: :mod:`statekeeper.codec.keyscope`): the store's id, its feed id
    (:meth:`Backend.feed_id`), set on the codec by the store's first use; None without
    such a vault, or on an engine that keeps no id (data keys then by agent id alone)."""
    keyring = codec.keyring
    if keyring is None or keyring.scoped is None:
        return None
    if codec.key_family is None:
        codec.key_family = await backend.feed_id()
        codec.family_pending = False  # (None: an engine that keeps no id, legacy keys)
    return codec.key_family


def own_codec(codec: Codec) -> Codec:
    """The codec a new store seals with: ``codec`` itself, or, when its keyring's vault
    keys data keys by family and another store took ``codec`` already, a copy of it. A
    codec holds the key family of its store (:func:`key_family`): one shared by two
    stores sealed both stores' agents with the first store's keys, and a ``forget`` in
    one shredded the same agent id in the other."""
    keyring = codec.keyring
    if keyring is None or keyring.scoped is None:
        return codec
    if codec.family_pending or codec.key_family is not None:
        codec = copy.copy(codec)  # (its formats, compressors and caches shared as before)
        codec.key_family = None
    codec.family_pending = True  # (no data key made until the family is read)
    return codec


def is_encrypted(payload: bytes) -> bool:
    """True for a record encrypted with a key: a version-1 header with a key id
    (byte 2, the key id's length, is not 0). A version-0 record (a JSON object) never is."""
    return len(payload) > 2 and payload[0] == VERSION and payload[2] != 0


class KeyGuard:
    """Whether a store may write: decided once, by :meth:`check` (see the module
    documentation)."""

    def __init__(self, encrypted: bool) -> None:
        #: the store has a key (its writes are encrypted)
        self.encrypted = encrypted
        #: True once writes are known to be allowed (and, with a key, the store marked)
        self.ok = False
        self._error: KeyRequired | None = None
        self._looked = False

    async def check(self, backend: Backend) -> bool:
        """Before a write (the first time only: one marker read; the marker's write
        with a key, once per store; the newest heads without a key where no marker
        says). True when writes are allowed; raises :class:`KeyRequired` into an
        encrypted store without a key."""
        if not self._looked:
            if self.encrypted:
                await mark_encrypted(backend)
            else:
                # (a store without a key never writes the marker itself: its refusal
                # writes nothing; an older store is marked by its next write with a key)
                if await backend.read_marker(ENCRYPTED) or await _holds_encrypted(backend):
                    self._error = KeyRequired(repr(backend))
            self._looked = True
            self.ok = self._error is None
        if self._error is not None:
            raise KeyRequired(self._error.location)
        return True


async def _holds_encrypted(backend: Backend) -> bool:
    heads = await newest_heads(backend)
    return any(head is not None and is_encrypted(head.payload) for head in heads)


async def newest_heads(backend: Backend) -> list[RawEvent | None]:
    """The head records of the :data:`SAMPLE` most recently written agents (the first
    by id where the engine keeps no order of writes): what the store writes now."""
    agents: list[AgentInfo] = []
    by_id = not backend.lists_by_write
    if not by_id:
        try:
            agents = await backend.list_agents_by_write(limit=SAMPLE)
        except AgentLost:
            by_id = True  # (then the first agents by id, past it)
    if by_id:
        # an agent whose data is lost (AgentLost: Redis evicted it) says nothing of the
        # others: passed over, or no save of any agent could start in this store
        listing = agents_past_lost(backend.list_agents, page=SAMPLE)
        async with contextlib.aclosing(listing):
            async for info in listing:
                if not isinstance(info, AgentLost):
                    agents.append(info)
                if len(agents) >= SAMPLE:
                    break
    if not agents:
        return []
    ids = [agent.agent_id for agent in agents]
    try:
        return await backend.read_heads(ids)
    except IntegrityError:
        # a head that does not read (S3: an agent's newest commits deleted by something
        # else) is that agent's problem: read one by one, it passed over, or no save of
        # any agent could start in this store
        heads: list[RawEvent | None] = []
        for agent_id in ids:
            try:
                heads.extend(await backend.read_heads([agent_id]))
            except IntegrityError:
                continue
        return heads
