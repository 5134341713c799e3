"""Per-agent data keys of a keyring with a key vault (crypto-shredding): made,
opened, rewrapped, forgotten, adopted and linked, their family rules in
:mod:`.keyscope`.
"""

from __future__ import annotations

import os

from ..errors import AgentForgotten, ConfigurationError, DecryptionError
from . import keyscope
from .datakeys import ScopedKeyVault, VaultEntry
from .masterkeys import MasterKeys
from .subkeys import (
    KEY_BYTES,
    DerivedKey,
    _forgettable,
)


class VaultKeys(MasterKeys):
    """A keyring's per-agent data keys, kept in its key vault (``data_keys``)."""

    def data_key(
        self,
        agent_id: str,
        *,
        create: bool = False,
        family: str | None = None,
        fingerprint: bytes | None = None,
    ) -> DerivedKey:
        """The agent's data key (created, wrapped and stored in the vault when
        ``create`` and the agent has none yet).

        With a vault that keys by family (:mod:`.keyscope`): a write (``create``) of
        a store of key family ``family`` gets that family's key; a read names the
        record's key ``fingerprint`` and gets the key that sealed it. Without
        ``family`` (a codec of no store), the legacy key of the agent id alone.

        Raises :class:`~statekeeper.errors.AgentForgotten` when the key was destroyed,
        :class:`~statekeeper.errors.DecryptionError` when (without ``create``) the vault
        never held one for the agent, and
        :class:`~statekeeper.errors.ConfigurationError` when the keyring has no vault.
        """
        scoped = self.scoped
        if scoped is not None:
            if create and family is not None:
                key = self._writing.get((family, agent_id))
                if key is None:
                    key = keyscope.write_key(self, scoped, family, agent_id)
                    with self._lock:
                        self._writing[(family, agent_id)] = key
                        self._by_fp[(agent_id, key.fingerprint)] = key
                return key
            if fingerprint is not None and not create:
                key = self._by_fp.get((agent_id, fingerprint))
                if key is None:
                    key, opened = keyscope.read_key(self, scoped, agent_id, fingerprint)
                    with self._lock:
                        for one in opened:
                            self._by_fp[(agent_id, one.fingerprint)] = one
                return key
        key = self._data.get(agent_id)
        if key is not None:
            return key
        vault = self.data_keys
        if vault is None:
            raise ConfigurationError(
                "per-agent data keys need a key vault (Keyring(data_keys=...) or"
                ' "data_keys" in the key file)'
            )
        entry = vault.load(agent_id)
        if entry is None and create:
            master = self.active
            entry = vault.create(agent_id, master.id, master.wrap(agent_id, os.urandom(KEY_BYTES)))
        if entry is None:
            # no tombstone either: not a forgotten agent but a record that does not
            # belong here (moved from another agent) or a vault that did not write it
            raise keyscope.no_data_key(agent_id)
        if entry.wrapped is None or entry.master_id is None:
            raise AgentForgotten(agent_id, entry.forgotten_at)
        master_key = self.get(entry.master_id)
        if master_key is None:
            from ..errors import KeyNotFound

            raise KeyNotFound(agent_id, None, entry.master_id)
        key = DerivedKey(entry.master_id, master_key.unwrap(agent_id, entry.wrapped))
        with self._lock:
            self._data[agent_id] = key
        return key

    def rewrap(self, agent_id: str) -> bool:
        """Wrap the agent's data key under the active master key (key rotation: the
        old master key can then be retired). True when it was rewrapped; False when it
        already was, or the agent has no live key."""
        vault = self.data_keys
        if vault is None:
            return False
        if self.scoped is not None:
            return self._rewrap_families(self.scoped, agent_id)
        entry = vault.load(agent_id)
        if entry is None or entry.wrapped is None or entry.master_id is None:
            return False
        if entry.master_id == self.active_id:
            return False
        old = self.get(entry.master_id)
        if old is None:
            from ..errors import KeyNotFound

            raise KeyNotFound(agent_id, None, entry.master_id)
        material = old.unwrap(agent_id, entry.wrapped)
        master = self.active
        vault.rewrap(agent_id, master.id, master.wrap(agent_id, material))
        with self._lock:
            self._data[agent_id] = DerivedKey(master.id, material)
        return True

    def _rewrap_families(self, vault: ScopedKeyVault, agent_id: str) -> bool:
        """:meth:`rewrap` of every live entry of the agent (legacy or any family) that
        this keyring opens (another key file's entries are left as they are)."""
        done = False
        master = self.active
        for entry in vault.entries(agent_id):
            if entry.wrapped is None or entry.master_id in (None, self.active_id):
                continue
            old = self.get(entry.master_id) if entry.master_id is not None else None
            if old is None:
                continue
            try:
                material = old.unwrap(agent_id, entry.wrapped, entry.family)
            except DecryptionError:
                continue
            wrapped = master.wrap(agent_id, material, entry.family)
            if entry.family is None:
                vault.rewrap(agent_id, master.id, wrapped)
            else:
                vault.rewrap_in(entry.family, agent_id, master.id, wrapped)
            done = True
        with self._lock:
            self._data.pop(agent_id, None)
            self._forget_cached(agent_id)
        return done

    def rewrap_family(self, family: str | None) -> int:
        """:meth:`rewrap` of every live key of the store of key family ``family`` (and
        the families it continues), its agents listed or not
        (:func:`.keyscope.rewrap_family`): how many were wrapped again. 0 without a
        family or a vault without families."""
        scoped = self.scoped
        if family is None or scoped is None:
            return 0
        done = keyscope.rewrap_family(self, scoped, family)
        with self._lock:  # (a cached key names the master key it was wrapped under)
            for agent_id in done:
                self._data.pop(agent_id, None)
                self._forget_cached(agent_id)
        return len(done)

    def _forget_cached(self, agent_id: str) -> None:
        for pair in [p for p in self._writing if p[1] == agent_id]:
            del self._writing[pair]
        for held in [p for p in self._by_fp if p[0] == agent_id]:
            del self._by_fp[held]

    def forget_in(
        self,
        family: str | None,
        agent_id: str,
        *,
        fingerprints: frozenset[bytes] = frozenset(),
        at: float | None = None,
    ) -> list[str]:
        """:meth:`forget` as a store of key family ``family`` does it (see
        :mod:`.keyscope`): the keys of the agent (and its lineage) that family's store
        uses, those whose fingerprint is in ``fingerprints`` (its records'), and its
        legacy key. Returns the families (``"legacy"``) whose key was destroyed. Without
        a family, or a vault without families: :meth:`forget` (``["legacy"]`` when it
        destroyed a key)."""
        import time

        _forgettable(agent_id)
        scoped = self.scoped
        if family is None or scoped is None:
            return [keyscope.LEGACY] if self.forget(agent_id, at=at) else []
        when = time.time() if at is None else at
        lineage = getattr(scoped, "lineage", None)
        linked: set[str] = lineage(agent_id) if lineage is not None else set()
        ids = [*sorted(i for i in linked if i[:1] != "\x01"), agent_id]
        with self._lock:
            for one in ids:
                self._data.pop(one, None)
                self._forget_cached(one)
        return keyscope.family_forget(self, scoped, family, ids, fingerprints, when)

    def forget_scopes_in(
        self, family: str | None, agent_id: str, *, fingerprints: frozenset[bytes] = frozenset()
    ) -> list[str]:
        """The families (``"legacy"``) whose key of the agent :meth:`forget_in` would
        destroy now, destroying nothing (what a forget's audit entry, written before the
        keys go, names): the same refusal of a store's own stream, and the same lineage
        (never one of those: was followed here, the entry naming a "legacy" key the
        forget then left)."""
        _forgettable(agent_id)
        scoped = self.scoped
        if family is None or scoped is None:
            vault = self.data_keys
            entry = vault.load(agent_id) if vault is not None else None
            live = entry is not None and entry.wrapped is not None
            return [keyscope.LEGACY] if live else []
        lineage = getattr(scoped, "lineage", None)
        linked: set[str] = lineage(agent_id) if lineage is not None else set()
        ids = [*sorted(i for i in linked if i[:1] != "\x01"), agent_id]
        return keyscope.scopes_of(keyscope.forget_plan(self, scoped, family, ids, fingerprints))

    def adopt_in(
        self, family: str | None, copied: list[tuple[str, bytes]], *, legacy: bool = True
    ) -> list[str]:
        """Give the store of key family ``family`` the keys of the agents it holds a
        copy of (a restore's writes: :func:`.keyscope.adopt`); ``copied`` pairs an agent
        with its newest record's key fingerprint. The agents given a key; none without
        a family or a vault without families."""
        scoped = self.scoped
        if family is None or scoped is None or not copied:
            return []
        adopted = keyscope.adopt(self, scoped, family, copied, legacy=legacy)
        with self._lock:
            for agent_id in adopted:
                self._forget_cached(agent_id)
        return adopted

    def forgotten_in(
        self, family: str | None, agent_id: str, *, held: bool = False
    ) -> VaultEntry | None:
        """The tombstone that refuses ``agent_id`` in ``family``'s store (its own, a
        family it continues, or a legacy one), or None when it is not forgotten there.

        ``held``: that store holds records of the agent (it lists it, or exported it).
        When it has no key of the agent in its lineage (live or not) and no live legacy
        one, its records are a copy sealed with another store's key (a restore made
        before :func:`.keyscope.adopt`): then, when every key of the agent in the vault
        is destroyed, the newest tombstone (before, None: the copy counted as not
        forgotten although nothing opens it)."""
        vault = self.data_keys
        if vault is None:
            return None
        scoped = self.scoped
        if family is None or scoped is None:
            entry = vault.load(agent_id)
            return entry if entry is not None and entry.wrapped is None else None
        families = scoped.families(family)
        entries = scoped.entries(agent_id)
        for entry in entries:
            if entry.wrapped is None and (entry.family is None or entry.family in families):
                return entry
        if not held or any(e.wrapped is not None or e.family in families for e in entries):
            return None
        return max(entries, key=lambda e: e.forgotten_at or 0.0, default=None)

    def forget(self, agent_id: str, *, at: float | None = None) -> bool:
        """Destroy the agent's data key (crypto-shredding): every record encrypted
        with it becomes unreadable, everywhere, for good. True when a key was
        destroyed; False when the agent had none (a tombstone is stored anyway, so the
        id cannot be given a new key and its old records stay unreadable).

        The keys of the ids the vault links to ``agent_id`` (:meth:`link`: a
        LangGraph thread's generations) are destroyed too, the linked ones first.

        This is the agent's legacy key, keyed by its id alone: in a vault with key
        families its tombstone refuses the id in every store of the vault. A store's
        ``forget`` (:func:`statekeeper.governance.shredding.forget`) uses
        :meth:`forget_in`, which leaves other stores' keys of the id alone."""
        import time

        _forgettable(agent_id)
        vault = self.data_keys
        if vault is None:
            raise ConfigurationError("forget needs a keyring with a key vault (data_keys)")
        when = time.time() if at is None else at
        lineage = getattr(vault, "lineage", None)
        linked: set[str] = lineage(agent_id) if lineage is not None else set()
        linked = {one for one in linked if one[:1] != "\x01"}  # (never a store's own)
        with self._lock:
            for one in (*sorted(linked), agent_id):
                self._data.pop(one, None)
                self._forget_cached(one)
        for one in sorted(linked):
            vault.destroy(one, when)
        return vault.destroy(agent_id, when)

    def link(self, agent_id: str, predecessor: str) -> bool:
        """Record in the vault that ``agent_id`` continues ``predecessor``'s records
        (a new stream that replaces it), so :meth:`forget` of either destroys both
        keys. False when there is no vault, or it keeps no lineage."""
        link = getattr(self.data_keys, "link", None)
        if link is None:
            return False
        link(agent_id, predecessor)
        return True

    def continue_in(self, family: str | None, agent_id: str, predecessor: str) -> bool:
        """Give ``agent_id`` (a new id continuing ``predecessor``: :meth:`link`) the key
        the store of key family ``family`` writes ``predecessor`` with
        (:func:`.keyscope.continue_key`). False without a family or a vault without
        families, or when nothing was given."""
        scoped = self.scoped
        if family is None or scoped is None:
            return False
        given = keyscope.continue_key(self, scoped, family, agent_id, predecessor)
        if given:
            with self._lock:
                self._forget_cached(agent_id)
        return given
