"""The store file's schema: its tables, its version (:data:`SCHEMA_VERSION`), and the
writer's check of an existing file at open, upgrading it in place when it is older."""

from __future__ import annotations

import secrets
import sqlite3
import time

from ...errors import BackendError, ConfigurationError, NotAStore
from . import feed as sqlite_feed
from .base import translated as _translated
from .engine import SQLiteEngine
from .importing import KEY_MADE, KEY_MADE_LATER

#: 1: the first layout; 2: ``sk_agents.head_tag`` (the authenticated stream head);
#: 3: ``sk_leases`` (leases and fencing tokens); 4: ``sk_feed`` (the change feed, see
#: :mod:`.feed`); 5: ``sk_idempotency.created_at`` (when each idempotency
#: record was made, epoch seconds: what retention's ``keys_ttl`` expires)
SCHEMA_VERSION = 5


def _newer(path: str, version: object) -> ConfigurationError:
    """The error for a file of a schema newer than this statekeeper's."""
    return ConfigurationError(
        f"{path} has schema version {version}; this statekeeper reads up to "
        f"{SCHEMA_VERSION}: upgrade statekeeper"
    )


def _keys_migrated(conn: sqlite3.Connection) -> bool:
    """Whether ``sk_idempotency.created_at`` was added by the migration 4 -> 5 (its
    default 0: a process of schema 4 may write the file, see ``KEY_MADE_LATER``), not
    made with the file (no default: no process of schema 4 ever opened it)."""
    for row in conn.execute("PRAGMA table_info(sk_idempotency)"):
        if row[1] == "created_at":
            return row[4] is not None
    return False


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sk_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sk_agents (
    agent_id   TEXT PRIMARY KEY,
    head_seq   INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    head_tag   BLOB
) WITHOUT ROWID;
-- the agents by last write (the inspector's "recently written" / "idle" sorts)
CREATE INDEX IF NOT EXISTS sk_agents_written ON sk_agents (updated_at, agent_id);
CREATE TABLE IF NOT EXISTS sk_events (
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    ts       REAL NOT NULL,
    payload  BLOB NOT NULL,
    checksum BLOB NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE IF NOT EXISTS sk_snapshots (
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    ts       REAL NOT NULL,
    payload  BLOB NOT NULL,
    checksum BLOB NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE TABLE IF NOT EXISTS sk_idempotency (
    agent_id  TEXT NOT NULL,
    key       TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (agent_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sk_leases (
    agent_id   TEXT PRIMARY KEY,
    holder     TEXT,
    token      INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
"""
#: whether the file has its feed id (made by a writable open of an older file)
_FEED_ID_SET = "SELECT 1 FROM sk_meta WHERE key = 'feed_id'"
_TABLES = frozenset(
    {"sk_meta", "sk_agents", "sk_events", "sk_snapshots", "sk_idempotency", "sk_leases", "sk_feed"}
)


class SQLiteSchema(SQLiteEngine):
    """The schema checked at the writer's open, created or upgraded."""

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        sqlite_feed.ensure_feed(conn)  # schema step 3 -> 4, its own step
        # the feed's id (Backend.feed_id), made with the file or by its first writable
        # open by this version: so that a store only ever read has one too
        conn.execute(
            "INSERT INTO sk_meta (key, value) VALUES ('feed_id', ?) ON CONFLICT (key) DO NOTHING",
            (secrets.token_hex(8),),
        )

    def _init_writer(self, conn: sqlite3.Connection) -> None:
        with _translated(self.path):
            named = conn.execute(
                "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index', 'trigger')"
            ).fetchall()
            tables = {name for entry, name in named if entry == "table"}
            if ("index", "sk_agents_written") in named:
                # the last-write index is there (nothing drops it): lists_by_write
                # needs no statement of its own at the first write's key check
                self._by_write = True
            if "sk_meta" not in tables:
                raise NotAStore(
                    self.path,
                    "a SQLite database without statekeeper's tables"
                    + (" (another application's database?)" if tables else " (an empty one)")
                    + "; it was left unchanged",
                )
            mode = self._enable_wal(conn)
            if mode.lower() != "wal":
                raise BackendError(f"{self.path}: cannot enable WAL (journal_mode={mode})")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # see _wrote
            row = conn.execute("SELECT value FROM sk_meta WHERE key = 'schema_version'").fetchone()
            if row is not None and int(row[0]) == SCHEMA_VERSION and tables >= _TABLES:
                columns = {r[1] for r in conn.execute("PRAGMA table_info(sk_agents)")}
                if (
                    "head_tag" in columns
                    and (("trigger", "sk_idempotency_made") in named or not _keys_migrated(conn))
                    and conn.execute(_FEED_ID_SET).fetchone()
                ):
                    return  # current: no write transaction needed to open the file
            self._begin(conn)
            self._create_schema(conn)
            row = conn.execute("SELECT value FROM sk_meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO sk_meta(key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
            elif int(row[0]) > SCHEMA_VERSION:
                conn.execute("ROLLBACK")
                raise _newer(self.path, row[0])
            else:
                self._migrate(conn, int(row[0]))
            conn.execute("COMMIT")
            self._by_write = True  # (_create_schema made the last-write index)

    @staticmethod
    def _migrate(conn: sqlite3.Connection, version: int) -> None:
        """Bring an existing file up to :data:`SCHEMA_VERSION` (inside the caller's
        immediate transaction). Each step checks what it adds, so it is idempotent."""
        columns = {r[1] for r in conn.execute("PRAGMA table_info(sk_agents)").fetchall()}
        if "head_tag" not in columns:  # 1 -> 2: streams written before carry no tag
            conn.execute("ALTER TABLE sk_agents ADD COLUMN head_tag BLOB")
        # 2 -> 3: sk_leases is created by _SCHEMA (CREATE TABLE IF NOT EXISTS), which
        # runs on every open before this
        keys = {r[1] for r in conn.execute("PRAGMA table_info(sk_idempotency)").fetchall()}
        if "created_at" not in keys:
            # 4 -> 5: each record made at its append's first event's time (that event
            # compacted away: now, the time of the migration); one pass of the table,
            # each event found by its primary key
            conn.execute("ALTER TABLE sk_idempotency ADD COLUMN created_at REAL NOT NULL DEFAULT 0")
            conn.execute(
                "UPDATE sk_idempotency AS k SET created_at = " + KEY_MADE.format(schema="main"),
                {"now": time.time()},
            )
            conn.execute(KEY_MADE_LATER)  # (a process opened before this goes on writing)
        elif _keys_migrated(conn):
            # a file migrated to 5 before the trigger: the records a process of schema
            # 4 wrote since are dated 0 (its column's default)
            conn.execute(KEY_MADE_LATER)
            conn.execute(
                "UPDATE sk_idempotency AS k SET created_at = "
                + KEY_MADE.format(schema="main")
                + " WHERE k.created_at = 0",
                {"now": time.time()},
            )
        if version < SCHEMA_VERSION:
            conn.execute(
                "UPDATE sk_meta SET value = ? WHERE key = 'schema_version'",
                (str(SCHEMA_VERSION),),
            )
