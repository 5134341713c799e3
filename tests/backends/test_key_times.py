"""Idempotency records' times (``created_at``, what retention's ``keys_ttl`` expires)
on stores written before they existed: SQLite schema 4 -> 5, PostgreSQL migration 11 ->
12, and a SQLite image of schema 4 imported by a restore. Each record gets its append's
first event's timestamp, or (that event compacted away) the time of the migration."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path

import psycopg

from statekeeper.backends.postgres import PostgresBackend
from statekeeper.backends.sqlite import SCHEMA_VERSION, SQLiteBackend
from statekeeper.backends.sqlite.importing import import_image

from ._services import POSTGRES_DSN

OLD_STORE = Path(__file__).parent.parent / "data" / "langgraph-format2-main.sql"


def _old_file(path: Path, kept: bool = True) -> None:
    """The schema-4 store of ``tests/data`` (30 idempotency records); with ``kept``, one
    more whose first event is not there (as after a compaction)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(OLD_STORE.read_text())
        conn.execute("UPDATE sk_meta SET value = '4' WHERE key = 'schema_version'")
        if kept:
            conn.execute("INSERT INTO sk_idempotency VALUES ('gone', 'kept', 1, 1)")
        conn.commit()


def _times(path: Path) -> dict[str, tuple[float, float | None]]:
    """Each record's (created_at, its first event's timestamp or None)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT k.key, k.created_at, e.ts FROM sk_idempotency k LEFT JOIN sk_events e"
            " ON e.agent_id = k.agent_id AND e.seq = k.first_seq AND k.key != 'kept'"
        ).fetchall()
    return {key: (made, ts) for key, made, ts in rows}


async def test_sqlite_schema_4_gets_each_records_time(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path)
    start = time.time()
    backend = SQLiteBackend(str(path))
    try:
        assert await backend.schema_version() == SCHEMA_VERSION == 5
        times = _times(path)
        assert len(times) == 31
        for key, (made, ts) in times.items():
            if key == "kept":  # its event is not its own: the time of the migration
                assert start <= made <= time.time()
            else:
                assert made == ts
        assert await backend.expire_keys(None, start) == 30
        assert await backend.expire_keys(None, time.time() + 1) == 1
    finally:
        await backend.close()


async def test_a_record_a_schema_4_process_writes_after_the_migration_gets_its_time(
    tmp_path: Path,
) -> None:
    """A rolling deploy: a process of the version before opened the file at schema 4
    and goes on writing after a new one migrated it. Its records carry no time (its
    INSERT names four columns): they were dated 0, and the first ``keys_ttl`` run
    forgot them, so a retry of such an append was stored twice."""
    path = tmp_path / "old.db"
    _old_file(path, kept=False)
    backend = SQLiteBackend(str(path))
    try:
        assert await backend.schema_version() == 5  # migrated
        with closing(sqlite3.connect(path)) as old:  # what the old version's append runs
            agent, seq, ts = old.execute(
                "SELECT agent_id, max(seq), max(ts) FROM sk_events GROUP BY agent_id LIMIT 1"
            ).fetchone()
            old.execute(
                "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq)"
                " VALUES (?, 'old-process', ?, ?)",
                (agent, seq, seq),
            )
            unknown = ("no-event", "old-process-2", 1, 1)  # (its event not found: now)
            old.execute(
                "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq)"
                " VALUES (?, ?, ?, ?)",
                unknown,
            )
            old.commit()
        before = time.time()
        times = _times(path)
        assert times["old-process"] == (ts, ts)
        assert 0 < times["old-process-2"][0] <= before
        # keys_ttl of an hour: neither is that old, nothing forgotten
        assert await backend.expire_keys(agent, ts - 3600) == 0
        assert await backend.expire_keys("no-event", before - 3600) == 0
    finally:
        await backend.close()


async def test_a_file_migrated_before_the_trigger_gets_its_records_time_at_its_next_open(
    tmp_path: Path,
) -> None:
    """A file an earlier schema-5 statekeeper migrated (no trigger), then written by a
    process of schema 4 still running: its records' 0 is put right by the next open,
    which also adds the trigger."""
    path = tmp_path / "old.db"
    _old_file(path, kept=False)
    await SQLiteBackend(str(path)).close()  # migrated
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP TRIGGER sk_idempotency_made")  # as migrated before it
        agent, seq, ts = conn.execute(
            "SELECT agent_id, max(seq), max(ts) FROM sk_events GROUP BY agent_id LIMIT 1"
        ).fetchone()
        conn.execute(
            "INSERT INTO sk_idempotency(agent_id, key, first_seq, last_seq)"
            " VALUES (?, 'old-process', ?, ?)",
            (agent, seq, seq),
        )
        conn.commit()
    assert _times(path)["old-process"] == (0.0, ts)
    backend = SQLiteBackend(str(path))
    try:
        assert _times(path)["old-process"] == (ts, ts)
        assert await backend.expire_keys(agent, ts - 3600) == 0
    finally:
        await backend.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'sk_idempotency_made'"
        ).fetchone()


async def test_a_schema_4_image_is_imported_with_each_records_time(tmp_path: Path) -> None:
    image = tmp_path / "image.db"
    _old_file(image, kept=False)
    target = tmp_path / "target.db"
    SQLiteBackend(str(target))  # (the schema; closed below by the connection's end)
    with closing(sqlite3.connect(image)) as conn:
        counts = (
            conn.execute("SELECT count(*) FROM sk_agents WHERE head_seq > 0").fetchone()[0],
            conn.execute("SELECT count(*) FROM sk_events").fetchone()[0],
            conn.execute("SELECT count(DISTINCT agent_id) FROM sk_snapshots").fetchone()[0],
        )
    start = time.time()
    with closing(sqlite3.connect(target, isolation_level=None)) as conn:
        conn.execute("ATTACH ? AS image", (str(image),))
        conn.execute("BEGIN")
        try:
            imported = import_image(conn, counts)
        except Exception:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    if not imported:  # (counts of this image the import does not write: not our case)
        raise AssertionError("nothing imported")
    times = _times(target)
    assert len(times) == 30
    assert all(made == ts for made, ts in times.values())
    assert start > max(made for made, _ in times.values())


async def test_postgres_migration_12_gives_each_record_its_time(schema: str) -> None:
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    await backend.open()
    await backend.close()
    s = f'"{schema}"'
    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        # back to migration 11: no column, a record with its event and one without
        conn.execute(f"ALTER TABLE {s}.sk_idempotency DROP COLUMN created_at")
        conn.execute(f"DELETE FROM {s}.sk_migrations WHERE version >= 12")
        conn.execute(
            f"INSERT INTO {s}.sk_agents (agent_id, head_seq, created_at, updated_at)"
            " VALUES ('a', 2, 1000.0, 1001.0)"
        )
        conn.execute(
            f"INSERT INTO {s}.sk_events (agent_id, seq, kind, ts, payload, checksum)"
            " VALUES ('a', 2, 'patch', 1001.0, 'x', 'y')"
        )
        conn.execute(
            f"INSERT INTO {s}.sk_idempotency (agent_id, key, first_seq, last_seq)"
            " VALUES ('a', 'has-event', 2, 2), ('a', 'kept', 1, 1)"
        )
    start = time.time()
    backend = PostgresBackend(POSTGRES_DSN, schema=schema, max_size=2)
    await backend.open()
    try:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            rows: dict[str, float] = dict(
                conn.execute(f"SELECT key, created_at FROM {s}.sk_idempotency").fetchall()
            )
        assert rows["has-event"] == 1001.0
        assert start - 5 <= rows["kept"] <= time.time() + 5  # (the server's clock)
        assert await backend.expire_keys("a", 2000.0, count_only=True) == 1
        assert await backend.expire_keys("a", 2000.0) == 1
        assert await backend.lookup_key("a", "has-event") is None
        assert await backend.lookup_key("a", "kept") is not None
    finally:
        await backend.close()
