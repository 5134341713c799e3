"""Per-agent data keys, for crypto-shredding.

With a key vault on the keyring (``Keyring(..., data_keys=vault)``, or ``"data_keys":
"FILE"`` in a key file), each agent's records are encrypted with a random 256-bit
**data key** of its own instead of the master key. The data key is stored in the
vault *wrapped* (AES-256-GCM) by a master key of the keyring, never in the clear and
never in the store. ``statekeeper forget AGENT`` (:meth:`Keyring.forget`) destroys the
wrapped key and leaves a tombstone: from then on every copy of that agent's records —
in every tier, the SQLite WAL, a replica, a backup taken before — is ciphertext that
no key opens, and reading it raises :class:`~statekeeper.errors.AgentForgotten`.

The vault lives **outside** the store on purpose: a backup or a replica of the store
holds no data keys, so it cannot bring a forgotten agent back. Keep the vault with the
key file (it is as sensitive as the store's data), and back it up as a key, not as data:
a vault restored from before a ``forget`` would revive the agent.

:class:`SqliteKeyVault` is a SQLite file (``secure_delete`` on, so a destroyed key's
bytes are overwritten in the file, not just unlinked from a page); :class:`MemoryKeyVault`
is for tests. Anything with the :class:`KeyVault` methods (a KMS, a secrets manager)
works too.

**Lineage.** An agent id can name the ids whose records it continues (a LangGraph
thread's new generation after ``prune`` names the generation it replaced: the old
stream is deleted but its key stays, because a backup taken before the prune needs it).
:meth:`Keyring.forget` destroys the key of every id linked to the one forgotten, either
way, so forgetting a thread destroys every generation's key. A vault without ``link``
and ``lineage`` (a custom one) keeps no lineage: forget then destroys only the id named.

**Key families.** One vault serves any number of stores (one key file, one
``$STATEKEEPER_KEY_FILE``, for several services), so an agent id alone does not name a
data key: ``user-1`` of a billing store and ``user-1`` of a support store are different
people. A vault with families (:class:`ScopedKeyVault`: both vaults here) keys each data
key by ``(family, agent id)``; a store's family is its store id (its change feed's id,
:meth:`~statekeeper.backends.base.Backend.feed_id`), so each store gets its own keys
and ``forget`` in one store leaves the other's ``user-1`` alone. A copy of a store (a
backup, a restore, a replica, a tiered store's cold tier, a ``move``) holds the same
records, and a record names its key by the key's fingerprint in its clear header: the
copy is read with, and shredded with, the key that sealed it, whatever store holds it
(:mod:`statekeeper.codec.keyscope`).

Entries written before families (``data_keys`` table, keyed by agent id alone) are
*legacy*: they stay readable in every store of the vault; a store writes new records
under its own family's key; ``forget`` destroys the legacy key too (any store of the
vault may have used it: the behaviour before families, kept for those keys only) and
a legacy tombstone (a ``forget`` made before the upgrade) still refuses the id in every
store. A destroyed legacy key is removed (its bytes overwritten), not left as such a
tombstone: the forgetting store's own family keeps the tombstone.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..errors import BackendError, ConfigurationError

__all__ = [
    "MASTER_KEYED",
    "VAULT_TABLES",
    "KeyVault",
    "MemoryKeyVault",
    "ScopedKeyVault",
    "SqliteKeyVault",
    "VaultEntry",
    "open_vault",
    "uses_data_key",
]


#: the prefix of the hidden, short-lived streams sealed with the master key, not a data
#: key of their own: a delete's or a forget's feed intent (``statekeeper.store.
#: feed_intents``; its agent id, head and checksum, no data of the agent). Each had a key
#: of its own before, never destroyed once the intent was gone: one vault row per forget.
MASTER_KEYED = "\x01sk-feed/pending/"


def uses_data_key(agent_id: str) -> bool:
    """Whether a store with a key vault seals ``agent_id``'s records with a data key of
    its own (every agent but :data:`MASTER_KEYED` streams)."""
    return not agent_id.startswith(MASTER_KEYED)


@dataclass(frozen=True, slots=True)
class VaultEntry:
    """An agent's data key as the vault holds it: ``wrapped`` by master key
    ``master_id`` (nonce + AES-GCM ciphertext), or a tombstone (``forgotten_at`` set,
    no key material left)."""

    agent_id: str
    master_id: str | None
    wrapped: bytes | None
    forgotten_at: float | None = None
    #: the key family (see the module docs); None: a legacy entry, keyed by agent id alone
    family: str | None = None


@runtime_checkable
class KeyVault(Protocol):
    """Where wrapped data keys live. Implementations must be safe across threads."""

    def load(self, agent_id: str) -> VaultEntry | None:
        """The agent's entry, or None when the vault never held a key for it."""
        ...

    def create(self, agent_id: str, master_id: str, wrapped: bytes) -> VaultEntry:
        """Store a new wrapped key unless the agent already has an entry (key or
        tombstone); return the entry that is stored (the first writer wins)."""
        ...

    def destroy(self, agent_id: str, at: float) -> bool:
        """Replace the agent's key with a tombstone (key material overwritten). True
        when a key was destroyed, False when there was none or it was already gone."""
        ...

    def rewrap(self, agent_id: str, master_id: str, wrapped: bytes) -> None:
        """Replace a live key's wrapping (key rotation of the master key)."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...


@runtime_checkable
class ScopedKeyVault(KeyVault, Protocol):
    """A vault that keys data keys by ``(family, agent id)`` besides its legacy entries
    (keyed by agent id alone: :class:`KeyVault`'s methods). See the module docs."""

    def load_in(self, family: str, agent_id: str) -> VaultEntry | None:
        """The agent's entry in ``family``, or None."""
        ...

    def create_in(self, family: str, agent_id: str, master_id: str, wrapped: bytes) -> VaultEntry:
        """:meth:`KeyVault.create` in ``family`` (the first writer wins)."""
        ...

    def destroy_in(self, family: str, agent_id: str, at: float) -> bool:
        """:meth:`KeyVault.destroy` in ``family`` (a tombstone is left either way)."""
        ...

    def rewrap_in(self, family: str, agent_id: str, master_id: str, wrapped: bytes) -> None:
        """:meth:`KeyVault.rewrap` in ``family``."""
        ...

    def entries(self, agent_id: str) -> list[VaultEntry]:
        """Every entry of ``agent_id``: the legacy one first (if any), then each family's."""
        ...

    def remove_legacy(self, agent_id: str) -> bool:
        """Remove the agent's live legacy key (its bytes overwritten); True when there
        was one. A legacy tombstone stays."""
        ...

    def link_family(self, family: str, predecessor: str) -> None:
        """Record that the store of ``family`` was the store of ``predecessor`` before
        (its id was renewed: a restore into it)."""
        ...

    def families(self, family: str) -> set[str]:
        """``family`` and every family linked to it, directly or not, either way."""
        ...


class MemoryKeyVault:
    """A vault in a dict (tests, demos): gone with the process."""

    def __init__(self) -> None:
        self._entries: dict[str, VaultEntry] = {}
        self._scoped: dict[tuple[str, str], VaultEntry] = {}
        self._links: set[tuple[str, str]] = set()
        self._family_links: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryKeyVault(entries={len(self._entries)})"

    def load(self, agent_id: str) -> VaultEntry | None:
        return self._entries.get(agent_id)

    def create(self, agent_id: str, master_id: str, wrapped: bytes) -> VaultEntry:
        with self._lock:
            return self._entries.setdefault(agent_id, VaultEntry(agent_id, master_id, wrapped))

    def destroy(self, agent_id: str, at: float) -> bool:
        with self._lock:
            entry = self._entries.get(agent_id)
            self._entries[agent_id] = VaultEntry(
                agent_id, None, None, entry.forgotten_at if entry and entry.forgotten_at else at
            )
            return entry is not None and entry.wrapped is not None

    def rewrap(self, agent_id: str, master_id: str, wrapped: bytes) -> None:
        with self._lock:
            entry = self._entries.get(agent_id)
            if entry is not None and entry.wrapped is not None:
                self._entries[agent_id] = VaultEntry(agent_id, master_id, wrapped)

    def link(self, agent_id: str, predecessor: str) -> None:
        """Record that ``agent_id`` continues ``predecessor`` (see the module docs)."""
        with self._lock:
            self._links.add((agent_id, predecessor))

    def lineage(self, agent_id: str) -> set[str]:
        """Every id linked to ``agent_id``, directly or through others, either way
        (``agent_id`` itself not included)."""
        with self._lock:
            links = list(self._links)
        return _connected(
            agent_id,
            lambda ids: {b for a, b in links if a in ids} | {a for a, b in links if b in ids},
        )

    def load_in(self, family: str, agent_id: str) -> VaultEntry | None:
        return self._scoped.get((family, agent_id))

    def create_in(self, family: str, agent_id: str, master_id: str, wrapped: bytes) -> VaultEntry:
        with self._lock:
            entry = VaultEntry(agent_id, master_id, wrapped, None, family)
            return self._scoped.setdefault((family, agent_id), entry)

    def create_many_in(self, family: str, rows: list[tuple[str, str, bytes]]) -> None:
        """:meth:`create_in` of each ``(agent id, master id, wrapped)`` (one commit in a
        vault that has commits)."""
        for agent_id, master_id, wrapped in rows:
            self.create_in(family, agent_id, master_id, wrapped)

    def destroy_in(self, family: str, agent_id: str, at: float) -> bool:
        with self._lock:
            entry = self._scoped.get((family, agent_id))
            when = entry.forgotten_at if entry and entry.forgotten_at else at
            self._scoped[(family, agent_id)] = VaultEntry(agent_id, None, None, when, family)
            return entry is not None and entry.wrapped is not None

    def rewrap_in(self, family: str, agent_id: str, master_id: str, wrapped: bytes) -> None:
        with self._lock:
            entry = self._scoped.get((family, agent_id))
            if entry is not None and entry.wrapped is not None:
                self._scoped[(family, agent_id)] = VaultEntry(
                    agent_id, master_id, wrapped, None, family
                )

    def entries(self, agent_id: str) -> list[VaultEntry]:
        with self._lock:
            legacy = self._entries.get(agent_id)
            scoped = [e for (_, a), e in sorted(self._scoped.items()) if a == agent_id]
        return ([legacy] if legacy is not None else []) + scoped

    def live_in(self, family: str) -> list[VaultEntry]:
        """Every live key of ``family`` (any agent id), by agent id."""
        with self._lock:
            found = [e for (f, _), e in self._scoped.items() if f == family]
        return sorted((e for e in found if e.wrapped is not None), key=lambda e: e.agent_id)

    def live_legacy(self) -> list[VaultEntry]:
        """Every live legacy key (keyed by agent id alone), by agent id."""
        with self._lock:
            return [e for _, e in sorted(self._entries.items()) if e.wrapped is not None]

    def remove_legacy(self, agent_id: str) -> bool:
        with self._lock:
            entry = self._entries.get(agent_id)
            if entry is None or entry.wrapped is None:
                return False
            del self._entries[agent_id]
            return True

    def link_family(self, family: str, predecessor: str) -> None:
        with self._lock:
            self._family_links.add((family, predecessor))

    def families(self, family: str) -> set[str]:
        with self._lock:
            links = list(self._family_links)
        return {family} | _connected(
            family,
            lambda ids: {b for a, b in links if a in ids} | {a for a, b in links if b in ids},
        )

    def close(self) -> None:
        pass


def _connected(agent_id: str, neighbours: Callable[[set[str]], set[str]]) -> set[str]:
    seen = {agent_id}
    frontier = {agent_id}
    while frontier:
        frontier = neighbours(frontier) - seen
        seen |= frontier
    seen.discard(agent_id)
    return seen


_SCHEMA = """
CREATE TABLE IF NOT EXISTS data_keys (
    agent_id TEXT PRIMARY KEY,
    master_id TEXT,
    wrapped BLOB,
    created_at REAL NOT NULL,
    forgotten_at REAL
) WITHOUT ROWID
"""

_LINEAGE = """
CREATE TABLE IF NOT EXISTS data_key_lineage (
    agent_id TEXT NOT NULL,
    predecessor TEXT NOT NULL,
    PRIMARY KEY (agent_id, predecessor)
) WITHOUT ROWID
"""

#: keyed by agent id first: a read finds every entry of an agent in one range
_SCOPED = """
CREATE TABLE IF NOT EXISTS family_data_keys (
    family TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    master_id TEXT,
    wrapped BLOB,
    created_at REAL NOT NULL,
    forgotten_at REAL,
    PRIMARY KEY (agent_id, family)
) WITHOUT ROWID
"""

_FAMILY_LINKS = """
CREATE TABLE IF NOT EXISTS family_lineage (
    family TEXT NOT NULL,
    predecessor TEXT NOT NULL,
    PRIMARY KEY (family, predecessor)
) WITHOUT ROWID
"""

#: the tables of a vault file (``data_key_lineage``, ``family_data_keys`` and
#: ``family_lineage`` added to vaults written before them)
VAULT_TABLES = frozenset({"data_keys", "data_key_lineage", "family_data_keys", "family_lineage"})


class SqliteKeyVault:
    """Wrapped data keys in a SQLite file (created with mode 0600 when missing).

    ``secure_delete`` is on, so destroying a key overwrites its bytes in the database
    file; the rollback journal is deleted after each commit. (Bytes a file system or an
    SSD keeps after an overwrite are outside what a program can erase: put the vault on
    an encrypted volume, or use a KMS-backed vault.)
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            if not self.path.exists():
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                os.close(fd)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA secure_delete=ON")
            self._db.execute("PRAGMA journal_mode=DELETE")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.execute(_SCHEMA)
            self._db.execute(_LINEAGE)
            self._db.execute(_SCOPED)
            self._db.execute(_FAMILY_LINKS)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigurationError(f"cannot open the key vault {self.path}: {exc}") from None

    def __repr__(self) -> str:
        return f"SqliteKeyVault({os.fspath(self.path)!r})"

    def _run(self, sql: str, args: tuple[object, ...]) -> list[tuple[object, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise BackendError(f"key vault {self.path}: {exc}") from None

    def load(self, agent_id: str) -> VaultEntry | None:
        rows = self._run(
            "SELECT master_id, wrapped, forgotten_at FROM data_keys WHERE agent_id = ?",
            (agent_id,),
        )
        if not rows:
            return None
        master_id, wrapped, forgotten_at = rows[0]
        return VaultEntry(
            agent_id,
            master_id if isinstance(master_id, str) else None,
            bytes(wrapped) if isinstance(wrapped, bytes) else None,
            float(forgotten_at) if isinstance(forgotten_at, int | float) else None,
        )

    def create(self, agent_id: str, master_id: str, wrapped: bytes) -> VaultEntry:
        self._run(
            "INSERT OR IGNORE INTO data_keys (agent_id, master_id, wrapped, created_at)"
            " VALUES (?, ?, ?, ?)",
            (agent_id, master_id, wrapped, time.time()),
        )
        entry = self.load(agent_id)
        assert entry is not None
        return entry

    def destroy(self, agent_id: str, at: float) -> bool:
        with self._lock:
            try:
                cur = self._db.execute(
                    "UPDATE data_keys SET master_id = NULL, wrapped = NULL,"
                    " forgotten_at = ? WHERE agent_id = ? AND wrapped IS NOT NULL",
                    (at, agent_id),
                )
                destroyed = cur.rowcount > 0
                if not destroyed:
                    self._db.execute(
                        "INSERT OR IGNORE INTO data_keys (agent_id, created_at, forgotten_at)"
                        " VALUES (?, ?, ?)",
                        (agent_id, at, at),
                    )
            except sqlite3.Error as exc:
                raise BackendError(f"key vault {self.path}: {exc}") from None
        return destroyed

    def rewrap(self, agent_id: str, master_id: str, wrapped: bytes) -> None:
        self._run(
            "UPDATE data_keys SET master_id = ?, wrapped = ? WHERE agent_id = ?"
            " AND wrapped IS NOT NULL",
            (master_id, wrapped, agent_id),
        )

    def link(self, agent_id: str, predecessor: str) -> None:
        """Record that ``agent_id`` continues ``predecessor`` (see the module docs)."""
        self._run(
            "INSERT OR IGNORE INTO data_key_lineage (agent_id, predecessor) VALUES (?, ?)",
            (agent_id, predecessor),
        )

    def lineage(self, agent_id: str) -> set[str]:
        """Every id linked to ``agent_id``, directly or through others, either way
        (``agent_id`` itself not included)."""

        def neighbours(ids: set[str]) -> set[str]:
            found: set[str] = set()
            for one in ids:
                rows = self._run(
                    "SELECT predecessor FROM data_key_lineage WHERE agent_id = ?"
                    " UNION SELECT agent_id FROM data_key_lineage WHERE predecessor = ?",
                    (one, one),
                )
                found.update(str(r[0]) for r in rows)
            return found

        return _connected(agent_id, neighbours)

    # -- key families (see the module docs) -------------------------------------------

    def load_in(self, family: str, agent_id: str) -> VaultEntry | None:
        rows = self._run(
            "SELECT master_id, wrapped, forgotten_at FROM family_data_keys"
            " WHERE family = ? AND agent_id = ?",
            (family, agent_id),
        )
        return _entry(agent_id, family, rows[0]) if rows else None

    def create_in(self, family: str, agent_id: str, master_id: str, wrapped: bytes) -> VaultEntry:
        self._run(
            "INSERT OR IGNORE INTO family_data_keys"
            " (family, agent_id, master_id, wrapped, created_at) VALUES (?, ?, ?, ?, ?)",
            (family, agent_id, master_id, wrapped, time.time()),
        )
        entry = self.load_in(family, agent_id)
        assert entry is not None
        return entry

    def create_many_in(self, family: str, rows: list[tuple[str, str, bytes]]) -> None:
        """:meth:`create_in` of each ``(agent id, master id, wrapped)`` in one commit (a
        restore's copies: one commit each, synced, took ~20 ms an agent)."""
        now = time.time()
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.executemany(
                        "INSERT OR IGNORE INTO family_data_keys (family, agent_id, master_id,"
                        " wrapped, created_at) VALUES (?, ?, ?, ?, ?)",
                        [(family, a, m, w, now) for a, m, w in rows],
                    )
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:  # a refused COMMIT (locked) leaves it open
                    self._db.execute("ROLLBACK")
                raise BackendError(f"key vault {self.path}: {exc}") from None

    def destroy_in(self, family: str, agent_id: str, at: float) -> bool:
        with self._lock:
            try:
                cur = self._db.execute(
                    "UPDATE family_data_keys SET master_id = NULL, wrapped = NULL,"
                    " forgotten_at = ? WHERE family = ? AND agent_id = ?"
                    " AND wrapped IS NOT NULL",
                    (at, family, agent_id),
                )
                destroyed = cur.rowcount > 0
                if not destroyed:
                    self._db.execute(
                        "INSERT OR IGNORE INTO family_data_keys"
                        " (family, agent_id, created_at, forgotten_at) VALUES (?, ?, ?, ?)",
                        (family, agent_id, at, at),
                    )
            except sqlite3.Error as exc:
                raise BackendError(f"key vault {self.path}: {exc}") from None
        return destroyed

    def rewrap_in(self, family: str, agent_id: str, master_id: str, wrapped: bytes) -> None:
        self._run(
            "UPDATE family_data_keys SET master_id = ?, wrapped = ? WHERE family = ?"
            " AND agent_id = ? AND wrapped IS NOT NULL",
            (master_id, wrapped, family, agent_id),
        )

    def entries(self, agent_id: str) -> list[VaultEntry]:
        rows = self._run(  # (one query: a read of an agent's key asks only this)
            "SELECT NULL, master_id, wrapped, forgotten_at FROM data_keys"
            " WHERE agent_id = ? UNION ALL SELECT family, master_id, wrapped,"
            " forgotten_at FROM family_data_keys WHERE agent_id = ?",
            (agent_id, agent_id),
        )
        if len(rows) > 1:  # the legacy entry first, then by family
            rows.sort(key=lambda row: (row[0] is not None, str(row[0])))
        return [_entry(agent_id, None if row[0] is None else str(row[0]), row[1:]) for row in rows]

    def live_in(self, family: str) -> list[VaultEntry]:
        """Every live key of ``family`` (any agent id), by agent id."""
        rows = self._run(
            "SELECT agent_id, master_id, wrapped, forgotten_at FROM family_data_keys"
            " WHERE family = ? AND wrapped IS NOT NULL ORDER BY agent_id",
            (family,),
        )
        return [_entry(str(row[0]), family, row[1:]) for row in rows]

    def live_legacy(self) -> list[VaultEntry]:  # (as MemoryKeyVault's)
        sql = "SELECT agent_id, master_id, wrapped, forgotten_at FROM data_keys"
        rows = self._run(f"{sql} WHERE wrapped IS NOT NULL ORDER BY agent_id", ())
        return [_entry(str(row[0]), None, row[1:]) for row in rows]

    def remove_legacy(self, agent_id: str) -> bool:
        with self._lock:
            try:
                cur = self._db.execute(
                    "DELETE FROM data_keys WHERE agent_id = ? AND wrapped IS NOT NULL",
                    (agent_id,),
                )
            except sqlite3.Error as exc:
                raise BackendError(f"key vault {self.path}: {exc}") from None
            return cur.rowcount > 0

    def link_family(self, family: str, predecessor: str) -> None:
        self._run(
            "INSERT OR IGNORE INTO family_lineage (family, predecessor) VALUES (?, ?)",
            (family, predecessor),
        )

    def families(self, family: str) -> set[str]:
        def neighbours(ids: set[str]) -> set[str]:
            found: set[str] = set()
            for one in ids:
                rows = self._run(
                    "SELECT predecessor FROM family_lineage WHERE family = ?"
                    " UNION SELECT family FROM family_lineage WHERE predecessor = ?",
                    (one, one),
                )
                found.update(str(r[0]) for r in rows)
            return found

        return {family} | _connected(family, neighbours)

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _entry(agent_id: str, family: str | None, row: tuple[object, ...]) -> VaultEntry:
    master_id, wrapped, forgotten_at = row
    return VaultEntry(
        agent_id,
        master_id if isinstance(master_id, str) else None,
        bytes(wrapped) if isinstance(wrapped, bytes) else None,
        float(forgotten_at) if isinstance(forgotten_at, int | float) else None,
        family,
    )


def open_vault(spec: str | os.PathLike[str] | KeyVault | None) -> KeyVault | None:
    """A vault from a path (a :class:`SqliteKeyVault`), a vault object, or None."""
    if spec is None or isinstance(spec, KeyVault):
        return spec
    return SqliteKeyVault(spec)
