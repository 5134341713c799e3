"""``statekeeper init URL`` on a store an older statekeeper made: it upgrades it (the
way the refusals of a read-only opening name), and ``--dry-run`` says so writing
nothing. Before, init answered an older PostgreSQL schema with the refusal that named
init itself as the way out, and an older SQLite file with "nothing changed" (exit 0,
the file left at its old schema)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import psycopg
from psycopg import sql

from statekeeper import SyncStateStore
from statekeeper.backends.postgres import SCHEMA_VERSION as PG_VERSION
from statekeeper.backends.sqlite import SCHEMA_VERSION as SQLITE_VERSION

from ..backends._services import POSTGRES_DSN, fresh_url
from ._proc import sk_in_process

OLD_STORE = Path(__file__).parent.parent / "data" / "langgraph-format2-main.sql"


def _sqlite_version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(
            conn.execute("SELECT value FROM sk_meta WHERE key = 'schema_version'").fetchone()[0]
        )


def test_init_upgrades_a_sqlite_file_of_schema_4(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(OLD_STORE.read_text())
        conn.execute("UPDATE sk_meta SET value = '4' WHERE key = 'schema_version'")
        conn.commit()
    url = f"sqlite:///{path}"
    dry = sk_in_process("init", "--dry-run", url)
    assert dry.returncode == 0, dry.stderr
    assert "would upgrade" in dry.stdout and "from schema version 4" in dry.stdout
    assert _sqlite_version(path) == 4  # nothing written
    done = sk_in_process("init", "--json", url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["upgraded"] is True and report["created"] is False
    assert (report["schema_before"], report["schema_after"]) == (4, SQLITE_VERSION)
    assert _sqlite_version(path) == SQLITE_VERSION
    again = sk_in_process("init", url)
    assert "already a statekeeper store; nothing changed" in again.stdout


def test_init_dry_run_of_a_new_store_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    result = sk_in_process("init", "--dry-run", f"sqlite:///{path}")
    assert result.returncode == 0, result.stderr
    assert "would create" in result.stdout
    assert not path.exists()


def test_init_upgrades_a_postgres_schema_an_older_version_migrated(tmp_path: Path) -> None:
    with fresh_url("postgresql", tmp_path) as url:
        with SyncStateStore(url) as store:
            store.save("a", {"n": 1})
        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(
            POSTGRES_DSN, autocommit=True
        ) as conn:  # as the version before left it
            conn.execute(
                sql.SQL("DELETE FROM {s}.sk_migrations WHERE version = %s").format(
                    s=sql.Identifier(schema)
                ),
                (PG_VERSION,),
            )
        refused = sk_in_process("agents", "--db", url)  # read-only: refused, naming init
        assert refused.returncode != 0
        assert f"schema version {PG_VERSION - 1}" in refused.stderr
        assert "statekeeper init URL" in refused.stderr
        dry = sk_in_process("init", "--dry-run", url)
        assert dry.returncode == 0, dry.stderr
        assert "would upgrade" in dry.stdout
        assert sk_in_process("agents", "--db", url).returncode != 0  # still not upgraded
        done = sk_in_process("init", url)
        assert done.returncode == 0, done.stderr
        assert f"from schema version {PG_VERSION - 1} to {PG_VERSION}" in " ".join(
            done.stdout.split()
        )
        listed = sk_in_process("agents", "--db", url)
        assert listed.returncode == 0, listed.stderr
        assert "a" in listed.stdout
