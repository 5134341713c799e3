"""``sqlite_wal.wal_frames``: the frames a WAL holds since it last restarted — what the
SQLite engine checks its WAL-page estimate against (``SQLiteBackend._calibrate``) —
counts the committed frames only, also after a large transaction was rolled back
(SQLite had spilled its pages to the WAL: frames of the current salt past the last
commit, which SQLite itself never reads)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from statekeeper.backends.sqlite import wal as sqlite_wal


def _wal_index_frames(conn: sqlite3.Connection) -> int:
    """The frames SQLite counts in the WAL, as its checkpoint reports them (it copies
    them all: no reader holds any back)."""
    busy, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0
    return int(frames)


def test_frames_of_a_rolled_back_transaction_are_not_counted(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("PRAGMA page_size = 2048")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("CREATE TABLE t(n INTEGER PRIMARY KEY, pad BLOB)")
        for n in range(20):
            conn.execute("INSERT INTO t VALUES (?, randomblob(900))", (n,))
        committed = sqlite_wal.wal_frames(f"{db}-wal", 2048)
        assert committed > 20
        # a transaction larger than the page cache: SQLite spills it to the WAL, then
        # the rollback leaves those frames (of the current salt) past the last commit
        conn.execute("PRAGMA cache_size = 5")
        conn.execute("BEGIN")
        for n in range(20, 200):
            conn.execute("INSERT INTO t VALUES (?, randomblob(1500))", (n,))
        conn.execute("ROLLBACK")
        assert sqlite_wal.wal_frames(f"{db}-wal", 2048) == committed
        conn.execute("INSERT INTO t VALUES (500, randomblob(10))")
        after = sqlite_wal.wal_frames(f"{db}-wal", 2048)
        assert committed < after < committed + 10
        # as SQLite counts them (and, after its checkpoint, the WAL restarts from 0)
        assert after == _wal_index_frames(conn)
        conn.execute("INSERT INTO t VALUES (501, randomblob(10))")
        assert 0 < sqlite_wal.wal_frames(f"{db}-wal", 2048) < 10
        assert [r[0] for r in conn.execute("SELECT n FROM t")] == [*range(20), 500, 501]
