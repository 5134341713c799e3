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
* **A new id that continues another** (a LangGraph thread's next generation, written by
  a ``prune``) is given the key the store writes its predecessor with
  (:func:`continue_key`), wrapped for the new id: in a restored copy that is the source's
  key, so the source's ``forget`` (which follows the lineage) reaches the generation the
  target wrote too.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from ..errors import AgentForgotten, DecryptionError, KeyNotFound
from .datakeys import ScopedKeyVault, VaultEntry

if TYPE_CHECKING:
    from .keys import DerivedKey
    from .masterkeys import MasterKeys

__all__ = [
    "LEGACY",
    "adopt",
    "continue_key",
    "family_forget",
    "forget_plan",
    "live_legacy",
    "no_data_key",
    "read_key",
    "rewrap_family",
    "write_key",
]

#: how a forget's audit entry names a legacy key it destroyed
LEGACY = "legacy"


def _live(entry: VaultEntry) -> bool:
    return entry.wrapped is not None and entry.master_id is not None


def _material(ring: MasterKeys, entry: VaultEntry) -> bytes:
    assert entry.wrapped is not None and entry.master_id is not None
    master = ring.get(entry.master_id)
    if master is None:
        raise KeyNotFound(entry.agent_id, None, entry.master_id)
    return master.unwrap(entry.agent_id, entry.wrapped, entry.family)


def _open(ring: MasterKeys, entry: VaultEntry) -> DerivedKey:
    from .keys import DerivedKey

    assert entry.master_id is not None
    return DerivedKey(entry.master_id, _material(ring, entry))


def _fingerprint(material: bytes) -> bytes:
    from .keys import fingerprint_of

    return fingerprint_of(material)


def write_key(ring: MasterKeys, vault: ScopedKeyVault, family: str, agent_id: str) -> DerivedKey:
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
    ring: MasterKeys, vault: ScopedKeyVault, agent_id: str, fingerprint: bytes
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


def forget_plan(
    ring: MasterKeys,
    vault: ScopedKeyVault,
    family: str,
    agent_ids: list[str],
    fingerprints: frozenset[bytes],
) -> list[tuple[str | None, str]]:
    """The live keys a ``forget`` in ``family``'s store destroys (see the module docs):
    ``(family, agent id)`` pairs in the order they go (``None``: a legacy key), the
    agents in ``agent_ids``' order. Nothing is changed."""
    families = vault.families(family)
    plan: list[tuple[str | None, str]] = []
    live = {agent_id: [e for e in vault.entries(agent_id) if _live(e)] for agent_id in agent_ids}
    prints = set(fingerprints)
    # its own keys of every id of the lineage: a copy of one (:func:`adopt`) goes too,
    # under any id (a prune continues the old generation's key: :func:`continue_key`)
    for entries in live.values():
        for entry in entries:
            if entry.family is not None and entry.family in families:
                with contextlib.suppress(KeyNotFound, DecryptionError):
                    prints.add(_fingerprint(_material(ring, entry)))
    for agent_id in agent_ids:
        entries = live[agent_id]
        for entry in entries:
            if entry.family is None:
                plan.append((None, agent_id))
                continue
            ours = entry.family in families
            if not ours and prints:
                try:
                    ours = _fingerprint(_material(ring, entry)) in prints
                except (KeyNotFound, DecryptionError):
                    ours = False  # another key file's key: not one this store's records use
            if ours:
                plan.append((entry.family, agent_id))
    return plan


def scopes_of(plan: list[tuple[str | None, str]]) -> list[str]:
    """The families (and :data:`LEGACY`) a :func:`forget_plan` names, in order, once."""
    return list(dict.fromkeys(LEGACY if f is None else f for f, _ in plan))


def family_forget(
    ring: MasterKeys,
    vault: ScopedKeyVault,
    family: str,
    agent_ids: list[str],
    fingerprints: frozenset[bytes],
    at: float,
) -> list[str]:
    """Destroy the keys of ``agent_ids`` (the agent last, its lineage first) that a
    ``forget`` in ``family``'s store destroys (:func:`forget_plan`); the families (and
    :data:`LEGACY`) whose key was destroyed, in order, without repeats."""
    plan = forget_plan(ring, vault, family, agent_ids, fingerprints)
    scopes: list[str] = []
    for agent_id in agent_ids:
        for scope, one in plan:
            if one != agent_id:
                continue
            if scope is None:
                if vault.remove_legacy(agent_id):
                    scopes.append(LEGACY)
            elif vault.destroy_in(scope, agent_id, at):
                scopes.append(scope)
        vault.destroy_in(family, agent_id, at)  # the tombstone: the id stays refused here
    return list(dict.fromkeys(scopes))


def adopt(
    ring: MasterKeys,
    vault: ScopedKeyVault,
    family: str,
    copied: list[tuple[str, bytes]],
    *,
    legacy: bool = True,
) -> list[str]:
    """Give ``family``'s store the key of each agent it holds a copy of: ``copied``
    names the agent and the fingerprint of the key its newest record is sealed with (a
    restore's writes). When that key is another family's (or a legacy one), an entry
    ``(family, agent)`` with the same key, wrapped by the active master key, is made
    (see the module docs). An agent ``family`` itself has an entry of already, or one
    with a tombstone in a family it continues, is left as it is; a live key of the
    agent in a family it continues (the target's own agent of that id, deleted before
    the restore renewed its id) stays, for the records it sealed, but the writes use
    the copy's key (:func:`write_key` takes ``family``'s own entry first): else the
    source's forget left what the target wrote of the copy readable. ``legacy=False``
    adopts another family's key only (a legacy key stays the vault's, not the store's).
    Returns the agents given a key."""
    families = vault.families(family)
    master = ring.active
    rows: list[tuple[str, str, bytes]] = []
    for agent_id, fingerprint in copied:
        entries = vault.entries(agent_id)
        own = [e for e in entries if e.family is not None and e.family in families]
        if any(e.family == family or not _live(e) for e in own):
            continue
        for entry in entries:
            if not _live(entry) or (entry.family is None and not legacy):
                continue
            try:
                material = _material(ring, entry)
            except (KeyNotFound, DecryptionError):
                continue
            if _fingerprint(material) == fingerprint:
                if entry not in own:  # (its own key sealed the copy: nothing to adopt)
                    rows.append((agent_id, master.id, master.wrap(agent_id, material, family)))
                break
    many = getattr(vault, "create_many_in", None)  # (one commit: a custom vault may lack it)
    if many is not None:
        many(family, rows)
    else:
        for agent_id, master_id, wrapped in rows:
            vault.create_in(family, agent_id, master_id, wrapped)
    return [agent_id for agent_id, _, _ in rows]


def continue_key(
    ring: MasterKeys, vault: ScopedKeyVault, family: str, agent_id: str, predecessor: str
) -> bool:
    """Give ``agent_id``, which continues ``predecessor`` in ``family``'s store (the
    vault links the two), the key that store writes ``predecessor`` with, wrapped for
    ``agent_id`` by the active master key (see the module docs). Before, the new id was
    given a key of the store's own family: in a restored copy (whose key of the
    predecessor is the source's, :func:`adopt`) the source's ``forget`` left it live, and
    the thread it forgot stayed readable there. Nothing is made when ``agent_id`` has a
    key or tombstone of ``family``'s lineage already (or a legacy tombstone), or the
    predecessor has no live key there (:func:`write_key` then decides, as before). True
    when the key was given."""
    families = vault.families(family)
    for entry in vault.entries(agent_id):
        if entry.family is None and not _live(entry):
            return False
        if entry.family is not None and entry.family in families:
            return False
    source = _writing_entry(vault, families, family, predecessor)
    if source is None:
        return False
    try:
        material = _material(ring, source)
    except (KeyNotFound, DecryptionError):  # (another key file's: write_key decides)
        return False
    master = ring.active
    vault.create_in(family, agent_id, master.id, master.wrap(agent_id, material, family))
    return True


def _writing_entry(
    vault: ScopedKeyVault, families: set[str], family: str, agent_id: str
) -> VaultEntry | None:
    """The live entry :func:`write_key` writes ``agent_id`` with in ``family``'s store
    (its own, else one of a family it continues), or None (none, or a tombstone)."""
    entries = [e for e in vault.entries(agent_id) if e.family is not None]
    for entry in entries:
        if entry.family == family:
            return entry if _live(entry) else None
    lineage = [e for e in entries if e.family in families]
    if any(not _live(e) for e in lineage):
        return None
    return lineage[0] if lineage else None


def rewrap_family(ring: MasterKeys, vault: ScopedKeyVault, family: str) -> list[str]:
    """Wrap every live key of ``family`` and the families it continues, and every live
    legacy key of the vault, under the active master key (``rekey``: the keys of agents
    it does not walk — deleted agents', whose backups need them, a LangGraph thread's
    pruned generations' — stayed wrapped under the master key being retired). A legacy
    key (written before key families) names no store: any store of the vault may have
    used it (:func:`read_key`), so each store's rekey wraps them all — before, a deleted
    agent's legacy key stayed under the retired key, which ``keys status`` did not count.
    A key no key of this keyring opens (another key file's) is left as it is. The agent
    ids whose key was wrapped again; none without ``live_in`` (a custom vault)."""
    live_in = getattr(vault, "live_in", None)
    if live_in is None:
        return []
    master = ring.active
    done: list[str] = []
    for one in [*sorted(vault.families(family)), None]:
        for entry in live_in(one) if one is not None else live_legacy(vault):
            if entry.master_id in (None, master.id):
                continue
            try:
                material = _material(ring, entry)
            except (KeyNotFound, DecryptionError):
                continue
            wrapped = master.wrap(entry.agent_id, material, one)
            if one is None:
                vault.rewrap(entry.agent_id, master.id, wrapped)
            else:
                vault.rewrap_in(one, entry.agent_id, master.id, wrapped)
            done.append(entry.agent_id)
    return done


def live_legacy(vault: object) -> list[VaultEntry]:
    """The vault's live legacy keys (none from a vault that cannot list them)."""
    listed = getattr(vault, "live_legacy", None)
    return list(listed()) if listed is not None else []
