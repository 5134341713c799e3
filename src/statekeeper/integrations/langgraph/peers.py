"""LangGraph's own savers as the other side of a move: ``SqliteSaver`` and
``PostgresSaver`` databases opened read-only (a source) or for writing (a target).

Checkpoints, metadata and pending writes are read and written through the savers'
public API (``list`` / ``get_tuple`` / ``put`` / ``put_writes``); only what that API
does not offer is read with SQL: whether a database is a LangGraph one, the thread ids,
each thread's checkpoint ids (without decoding them), and the task path and index of
each pending write — and a target's pending writes are written with SQL, the saver's
own statement, to keep each write's index (``put_writes`` numbers them 0, 1, …).
A source is opened read-only by the database itself (SQLite ``mode=ro``, a PostgreSQL
session with ``default_transaction_read_only``), so nothing in it can change.

URLs: ``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or a bare path for
SQLite; ``postgresql://…`` (or ``postgres://…``) for PostgreSQL, where ``?schema=NAME``
selects the schema holding LangGraph's tables (it becomes the session's
``search_path``), as for statekeeper's own PostgreSQL URLs.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver

from ...errors import BackendError, ConfigurationError

__all__ = [
    "IncompatibleTarget",
    "NotALangGraphDatabase",
    "PeerDatabase",
    "is_langgraph_url",
    "open_peer",
]

#: the marker statekeeper's own SQLite files carry (``PRAGMA application_id``)
_SK_APPLICATION_ID = 0x534B5354


class NotALangGraphDatabase(ConfigurationError):
    """The source is not a LangGraph ``SqliteSaver`` / ``PostgresSaver`` database
    (missing, empty, another application's, or a statekeeper store). Nothing was
    written to it. ``location`` names it (credentials masked by the CLI)."""

    def __init__(self, location: str, reason: str) -> None:
        self.location = location
        self.reason = reason
        super().__init__(f"{location} is not a LangGraph checkpoint database: {reason}")


class IncompatibleTarget(ConfigurationError):
    """The target cannot receive these threads: it is not the kind of store the
    command writes, or it already holds checkpoints of a thread that the source does
    not have (it is not an earlier, interrupted copy of this source). Nothing was
    written."""

    def __init__(self, location: str, reason: str) -> None:
        self.location = location
        self.reason = reason
        super().__init__(f"cannot copy into {location}: {reason}")


def is_langgraph_url(url: str) -> bool:
    """Whether ``url`` names a database LangGraph's SQLite or PostgreSQL saver can use."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    return scheme in ("", "sqlite", "postgresql", "postgres")


def _sqlite_path(url: str) -> Path:
    if url.startswith("sqlite:///"):
        rest = url[len("sqlite:///") :]
        return Path(rest.split("?", 1)[0])
    if "://" in url:
        raise ConfigurationError(
            f"{url.split('://', 1)[0]}:// is not a LangGraph saver database: LangGraph's "
            "SqliteSaver and PostgresSaver keep threads in SQLite (sqlite:///file.db or a "
            "path) or PostgreSQL (postgresql://…)"
        )
    return Path(url)


def _pg_conninfo(url: str) -> tuple[str, str | None]:
    """The URL psycopg accepts and the schema ``?schema=`` names."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema


@dataclass
class PeerDatabase:
    """A LangGraph saver database and the saver reading or writing it."""

    location: str
    kind: str  # "sqlite" | "postgres"
    saver: BaseCheckpointSaver[Any]
    readonly: bool
    _conn: Any = field(repr=False, default=None)
    _has_task_path: bool = True

    # -- what the public API does not offer (SQL, read-only) -----------------------

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            lock = getattr(self.saver, "lock", None)
            assert lock is not None
            with lock:
                return [tuple(r) for r in self._conn.execute(sql, params).fetchall()]
        with self._conn.cursor() as cur:
            cur.execute(sql.replace("?", "%s"), params)
            return [tuple(r.values()) for r in cur.fetchall()]

    def threads(self) -> list[str]:
        """Every thread id with a checkpoint, sorted."""
        return [
            str(r[0])
            for r in self._rows("SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id")
        ]

    def index(self, thread_id: str) -> list[tuple[str, str]]:
        """``(checkpoint id, namespace)`` of every checkpoint of a thread, oldest first."""
        rows = self._rows(
            "SELECT checkpoint_id, checkpoint_ns FROM checkpoints WHERE thread_id = ? "
            "ORDER BY checkpoint_id, checkpoint_ns",
            (thread_id,),
        )
        return [(str(cid), str(ns)) for cid, ns in rows]

    def write_counts(self, thread_id: str) -> dict[tuple[str, str], int]:
        """``{(checkpoint id, namespace): number of pending writes}`` of a thread."""
        table = "writes" if self.kind == "sqlite" else "checkpoint_writes"
        rows = self._rows(
            f"SELECT checkpoint_id, checkpoint_ns, count(*) FROM {table} WHERE thread_id = ? "
            "GROUP BY checkpoint_id, checkpoint_ns",
            (thread_id,),
        )
        return {(str(cid), str(ns)): int(n) for cid, ns, n in rows}

    def task_paths(self, thread_id: str) -> dict[tuple[str, str, str], str]:
        """``{(namespace, checkpoint id, task id): task path}`` of a thread's writes."""
        if not self._has_task_path:
            return {}
        table = "writes" if self.kind == "sqlite" else "checkpoint_writes"
        rows = self._rows(
            f"SELECT DISTINCT checkpoint_ns, checkpoint_id, task_id, task_path FROM {table} "
            "WHERE thread_id = ?",
            (thread_id,),
        )
        return {(str(ns), str(cid), str(tid)): str(path or "") for ns, cid, tid, path in rows}

    def write_indexes(self, thread_id: str) -> dict[tuple[str, str, str], list[tuple[int, str]]]:
        """``{(namespace, checkpoint id, task id): [(idx, channel)]}`` of a thread's
        pending writes, each task's by index (the order the savers list them in)."""
        table = "writes" if self.kind == "sqlite" else "checkpoint_writes"
        rows = self._rows(
            f"SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel FROM {table} "
            "WHERE thread_id = ? ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
            (thread_id,),
        )
        found: dict[tuple[str, str, str], list[tuple[int, str]]] = {}
        for ns, cid, tid, idx, channel in rows:
            found.setdefault((str(ns), str(cid), str(tid)), []).append((int(idx), str(channel)))
        return found

    def put_writes_at(
        self, config: Any, items: list[tuple[int, str, Any]], task_id: str, task_path: str
    ) -> None:
        """The saver's ``put_writes`` with each write's index given (``(idx, channel,
        value)``), which its API numbers 0, 1, … by position: the same rows, the same
        statement (insert-or-ignore; replace for special writes only)."""
        if self.readonly:  # pragma: no cover - a source is never written
            raise IncompatibleTarget(self.location, "it is opened read-only")
        conf = config["configurable"]
        dumps = self.saver.serde.dumps_typed
        special = all(ch in WRITES_IDX_MAP for _, ch, _ in items)
        rows = [
            (
                str(conf["thread_id"]),
                str(conf["checkpoint_ns"]),
                str(conf["checkpoint_id"]),
                task_id,
                task_path,
                idx,
                ch,
                *dumps(value),
            )
            for idx, ch, value in items
        ]
        if self.kind == "sqlite":
            verb = "INSERT OR REPLACE" if special else "INSERT OR IGNORE"
            sql = (
                f"{verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
                "task_path, idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            )
            with self.saver.cursor() as cur:  # type: ignore[attr-defined]
                cur.executemany(sql, rows)
            return
        saver: Any = self.saver
        sql = saver.UPSERT_CHECKPOINT_WRITES_SQL if special else saver.INSERT_CHECKPOINT_WRITES_SQL
        with self._conn.cursor() as cur:
            cur.executemany(sql, rows)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def open_peer(
    url: str, *, readonly: bool, private: bool = False, staged: bool = False
) -> PeerDatabase:
    """Open a LangGraph saver database.

    ``readonly`` (a source): the database must exist and hold LangGraph's tables, and is
    opened so that nothing can be written. Otherwise (a target) a missing or empty
    SQLite file, or a PostgreSQL schema without LangGraph's tables, is set up by the
    saver's own ``setup()``; a database that holds something else is refused.
    ``private``: a SQLite file created here is its owner's only (0600, as a key file
    is; SQLite gives its journal files the same mode): it receives decrypted records.
    An existing 0-byte file is refused as a target (SQLite would take it as an empty
    database: tables created in a file that is not one) unless ``staged``: the caller
    created it empty for this (:func:`..._files.staged_new_file`).
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("postgresql", "postgres"):
        from ...backends.url import refuse_reserved_in_password

        refuse_reserved_in_password(url)  # (as the store does: the same URLs, one rule)
        return _open_postgres(url, readonly=readonly)
    path = _sqlite_path(url)
    return _open_sqlite(url, path, readonly=readonly, private=private, staged=staged)


def _sqlite_tables(conn: sqlite3.Connection) -> dict[str, set[str]]:
    tables: dict[str, set[str]] = {}
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cols = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({quote_ident(name)})")}
        tables[str(name)] = cols
    return tables


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_LG_SQLITE = {
    "checkpoints": {
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "type",
        "checkpoint",
        "metadata",
    },
    "writes": {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel"},
}


def _sqlite_verdict(conn: sqlite3.Connection, *, target: bool = False) -> str | None:
    """Why the database is not a LangGraph SqliteSaver one (None when it is); ``target``:
    it was given as the database to copy into (``langgraph export``), not out of."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = _sqlite_tables(conn)
    if app_id == _SK_APPLICATION_ID or any(t.startswith("sk_") for t in tables):
        if target:
            return (
                "it is a statekeeper store, not a LangGraph SqliteSaver database: give a"
                " new file or a SqliteSaver's database to copy the threads into"
            )
        return "it is a statekeeper store (to copy out of statekeeper use `langgraph export`)"
    if not tables:
        return "it is empty"
    for name, cols in _LG_SQLITE.items():
        if name not in tables:
            return f"it has no {name!r} table (another application's SQLite database)"
        missing = cols - tables[name]
        if missing:
            return f"its {name!r} table lacks the column(s) {', '.join(sorted(missing))}"
    return None


def _peer_saver(module: str, name: str, package: str) -> Any:
    """LangGraph's own saver class, or a one-line error naming the package to install
    (the peers are optional: only ``langgraph import``/``export`` need them)."""
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        raise ConfigurationError(
            f"reading or writing a LangGraph {name} database needs {package}: pip install {package}"
        ) from None


def _open_sqlite(
    url: str, path: Path, *, readonly: bool, private: bool = False, staged: bool = False
) -> PeerDatabase:
    SqliteSaver = _peer_saver(
        "langgraph.checkpoint.sqlite", "SqliteSaver", "langgraph-checkpoint-sqlite"
    )

    location = str(path)
    if readonly:
        if not path.is_file():
            raise NotALangGraphDatabase(location, "no such file")
        uri = f"file:{quote(str(path.resolve()))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        try:
            reason = _sqlite_verdict(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotALangGraphDatabase(location, f"not a SQLite database ({exc})") from None
        if reason is not None:
            conn.close()
            raise NotALangGraphDatabase(location, reason)
        saver = SqliteSaver(conn)
        saver.is_setup = True  # its setup() writes (WAL mode, DDL): never on a source
        has_path = "task_path" in _sqlite_tables(conn)["writes"]
        saver._has_task_path = has_path
        return PeerDatabase(location, "sqlite", saver, True, conn, has_path)
    if path.exists() and not path.is_file():
        raise IncompatibleTarget(location, "it is not a file")
    if not path.parent.is_dir():  # (SQLite would say "unable to open database file")
        raise IncompatibleTarget(location, f"no such folder: {path.parent}")
    existed = path.exists()
    if private and not existed:
        # created empty (SQLite takes it as a new database) with the mode wanted; an
        # existing file is the caller's: its mode is left as it is
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            existed = True
    if existed and not staged and _empty_file(path):  # SQLite would take it as an empty database
        raise IncompatibleTarget(location, "it is an empty file, not a SQLite database")
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        empty = not _sqlite_tables(conn) and app_id == 0
        reason = None if empty else _sqlite_verdict(conn, target=True)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise IncompatibleTarget(location, f"it is not a SQLite database ({exc})") from None
    if reason is not None:
        conn.close()
        raise IncompatibleTarget(location, reason)
    saver = SqliteSaver(conn)
    saver.setup()
    return PeerDatabase(location, "sqlite", saver, False, conn, True)


def _empty_file(path: Path) -> bool:
    """``path`` is a 0-byte file that is no SQLite database: none whose content is
    still all in its ``-wal`` (a new database in WAL mode before a checkpoint)."""
    try:
        if path.stat().st_size:
            return False
        return not Path(f"{path}-wal").stat().st_size
    except FileNotFoundError:
        return True


def search_path_option(schema: str) -> str:
    """The libpq ``options`` setting the session's ``search_path`` to exactly ``schema``:
    quoted as an identifier (the server folds an unquoted name to lower case, so
    ``?schema=Prod`` read and wrote the tables of another schema, ``prod``), its spaces
    and backslashes escaped as libpq's options are split."""
    quoted = '"' + schema.replace('"', '""') + '"'
    return "-c search_path=" + quoted.replace("\\", "\\\\").replace(" ", "\\ ")


def _open_postgres(url: str, *, readonly: bool) -> PeerDatabase:
    PostgresSaver = _peer_saver(
        "langgraph.checkpoint.postgres", "PostgresSaver", "langgraph-checkpoint-postgres"
    )
    import psycopg
    from psycopg.rows import dict_row

    from ...backends.redact import mask_url

    location = mask_url(url)
    conninfo, schema = _pg_conninfo(url)
    options: dict[str, Any] = {}
    opts = []
    if schema:
        opts.append(search_path_option(schema))
    if readonly:
        opts.append("-c default_transaction_read_only=on")
    if opts:
        options["options"] = " ".join(opts)
    try:
        conn = psycopg.Connection.connect(
            conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row, **options
        )
    except psycopg.Error as exc:
        from ...backends.redact import scrub

        raise BackendError(
            f"cannot connect to {location}: {scrub(' '.join(str(exc).split()), url)}"
        ) from None
    if schema and not readonly:  # a target schema is created as statekeeper's own are
        from psycopg import sql

        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    saver = PostgresSaver(conn)
    migrations = len(saver.MIGRATIONS) - 1
    with conn.cursor() as cur:
        cur.execute(
            "SELECT to_regclass('checkpoints') IS NOT NULL AS c, "
            "to_regclass('checkpoint_writes') IS NOT NULL AS w, "
            "to_regclass('checkpoint_blobs') IS NOT NULL AS b, "
            "to_regclass('checkpoint_migrations') IS NOT NULL AS m"
        )
        found = cur.fetchone()
        assert found is not None
        version: int | None = None
        if found["m"]:
            cur.execute("SELECT max(v) AS v FROM checkpoint_migrations")
            row = cur.fetchone()
            version = row["v"] if row is not None else None
    complete = all(found.values())
    where = f"schema {schema!r}" if schema else "the search path"
    if readonly:
        if not complete:
            conn.close()
            raise NotALangGraphDatabase(
                location,
                f"{where} has no PostgresSaver tables (checkpoints, checkpoint_blobs, "
                "checkpoint_writes, checkpoint_migrations)",
            )
        if version is None or version < migrations:
            conn.close()
            raise NotALangGraphDatabase(
                location,
                f"its PostgresSaver tables are at migration {version}, this LangGraph "
                f"needs {migrations}: run PostgresSaver.setup() on it first (the import "
                "never changes its source)",
            )
        return PeerDatabase(location, "postgres", saver, True, conn, True)
    if any(found.values()) and not complete:
        conn.close()
        raise IncompatibleTarget(location, f"{where} holds only part of PostgresSaver's tables")
    saver.setup()
    return PeerDatabase(location, "postgres", saver, False, conn, True)
