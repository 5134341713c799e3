"""Data keys by key family: which key a store writes an agent's records with, which key
opens a record, and which keys ``forget`` destroys (see
:mod:`statekeeper.codec.datakeys`, "Key families").

* **Writes** of a store whose family is ``F`` use ``(F, agent)``'s key (made on the
  first write; a live key of a family ``F`` continues — a restore renewed the store's
  id — is used instead). A tombstone of the agent in ``F``'s lineage, or a legacy
  tombstone (a ``forget`` made before families), refuses the write: ``AgentForgotten``.
* **Reads** find the key by the record's key fingerprint among every live entry of the
  agent (legacy or any family): a copy of a store's records (a restore into another
  store, a ``move``) opens with the key that sealed it, wherever it is.
* **forget** in a store destroys: its family's key of the agent (a tombstone left),
  every key whose fingerprint the store's records of the agent carry (a restored
  copy's keys: copies shred together), and the agent's legacy key (any store of the
  vault may have used it, as before families). Another store's own key of the same
  agent id is left alone.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..errors import AgentForgotten, DecryptionError, KeyNotFound
from .datakeys import ScopedKeyVault, VaultEntry

if TYPE_CHECKING:
    from .keys import DerivedKey, Keyring

__all__ = ["LEGACY", "family_forget", "no_data_key", "read_key", "write_key"]

#: how a forget's audit entry names a legacy key it destroyed
LEGACY = "legacy"


def _live(entry: VaultEntry) -> bool:
    return entry.wrapped is not None and entry.master_id is not None


def _open(ring: Keyring, entry: VaultEntry) -> DerivedKey:
    from .keys import DerivedKey

    assert entry.wrapped is not None and entry.master_id is not None
    master = ring.get(entry.master_id)
    if master is None:
        raise KeyNotFound(entry.agent_id, None, entry.master_id)
    material = master.unwrap(entry.agent_id, entry.wrapped, entry.family)
    return DerivedKey(entry.master_id, material)


def write_key(ring: Keyring, vault: ScopedKeyVault, family: str, agent_id: str) -> DerivedKey:
    """The key ``family``'s store writes ``agent_id``'s records with (made when none).

    One vault query for an agent that has its key (or none at all, anywhere: a new
    agent, then its key is made), as before families; the family's lineage is read only
    when another family holds the agent id."""
    entries = vault.entries(agent_id)
    for entry in entries:
        if entry.family == family:
            if not _live(entry):
                raise AgentForgotten(agent_id, entry.forgotten_at)
            return _open(ring, entry)
    own: VaultEntry | None = None
    others = [e for e in entries if e.family is not None]
    families = vault.families(family) if others else {family}
    for entry in entries:
        if entry.family is None:
            if not _live(entry):  # a forget made before families: the id stays refused
                raise AgentForgotten(agent_id, entry.forgotten_at)
            continue
        if entry.family not in families:
            continue  # another store's key of the same agent id
        if not _live(entry):
            raise AgentForgotten(agent_id, entry.forgotten_at)
        own = own or entry  # a family this store's family continues (a restore)
    if own is None:
        master = ring.active
        wrapped = master.wrap(agent_id, os.urandom(32), family)
        own = vault.create_in(family, agent_id, master.id, wrapped)
        if not _live(own):  # (a forget in another process, in between)
            raise AgentForgotten(agent_id, own.forgotten_at)
    return _open(ring, own)


def read_key(
    ring: Keyring, vault: ScopedKeyVault, agent_id: str, fingerprint: bytes
) -> tuple[DerivedKey, list[DerivedKey]]:
    """The key whose fingerprint is ``fingerprint`` among the agent's live entries, and
    every live key opened on the way (for the caller's cache).

    Raises :class:`~statekeeper.errors.AgentForgotten` when none matches and the agent
    has a tombstone; when none matches otherwise, a live key is returned anyway (the
    codec's fingerprint check then says the record's key is not this one) or, with no
    key at all, :class:`~statekeeper.errors.DecryptionError` /
    :class:`~statekeeper.errors.KeyNotFound`."""
    opened: list[DerivedKey] = []
    forgotten: float | None = None
    tombstone = False
    problem: Exception | None = None
    for entry in vault.entries(agent_id):
        if not _live(entry):
            tombstone = True
            if entry.forgotten_at is not None:
                forgotten = max(forgotten or 0.0, entry.forgotten_at)
            continue
        try:
            key = _open(ring, entry)
        except (KeyNotFound, DecryptionError) as exc:  # another key file's entry
            problem = problem or exc
            continue
        opened.append(key)
        if key.fingerprint == fingerprint:
            return key, opened
    if tombstone:
        raise AgentForgotten(agent_id, forgotten)
    if opened:
        return opened[0], opened
    if problem is not None:
        raise problem
    raise no_data_key(agent_id)


def no_data_key(agent_id: str) -> DecryptionError:
    """The error of a record whose agent has no data key in the vault, and no
    tombstone either: not a forgotten agent but a record that does not belong here."""
    return DecryptionError(
        agent_id,
        None,
        "data key",
        "the key vault holds no data key for this agent (a record moved from"
        " another agent, or a vault other than the one that wrote it)",
    )


def family_forget(
    ring: Keyring,
    vault: ScopedKeyVault,
    family: str,
    agent_ids: list[str],
    fingerprints: frozenset[bytes],
    at: float,
) -> list[str]:
    """Destroy the keys of ``agent_ids`` (the agent last, its lineage first) that a
    ``forget`` in ``family``'s store destroys (see the module docs); the families (and
    :data:`LEGACY`) whose key was destroyed, in order, without repeats."""
    families = vault.families(family)
    scopes: list[str] = []
    for agent_id in agent_ids:
        for entry in vault.entries(agent_id):
            if not _live(entry):
                continue
            if entry.family is None:
                if vault.remove_legacy(agent_id):
                    scopes.append(LEGACY)
                continue
            ours = entry.family in families
            if not ours and fingerprints:
                try:
                    ours = _open(ring, entry).fingerprint in fingerprints
                except (KeyNotFound, DecryptionError):
                    ours = False  # another key file's key: not one this store's records use
            if ours and vault.destroy_in(entry.family, agent_id, at):
                scopes.append(entry.family)
        vault.destroy_in(family, agent_id, at)  # the tombstone: the id stays refused here
    return list(dict.fromkeys(scopes))
