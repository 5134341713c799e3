"""The feed cursors a read-model file records, read without opening a runner: which
projections a retention run leaves behind (``statekeeper retention apply``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..backends.sqlite_files import connect_read_only
from ..errors import InvalidArgument
from ..store.feed_cursor import FeedCursor, as_cursor

__all__ = ["projection_cursors"]


def projection_cursors(path: str | Path, shards: int) -> dict[str, FeedCursor]:
    """Each projection of the read-model file ``path`` (its ``sk_projections`` rows)
    and the feed cursor it resumes from; ``{}`` when the file does not exist or holds
    no projections. Nothing is written (the file is opened read-only)."""
    if not Path(path).exists():
        return {}
    conn = connect_read_only(path, timeout=5.0)
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sk_projections)")}
        if not columns:
            return {}
        cursor = "cursor" if "cursor" in columns else "NULL"
        rows = conn.execute(f"SELECT name, position, {cursor} FROM sk_projections").fetchall()
    except sqlite3.DatabaseError:
        return {}
    finally:
        conn.close()
    out: dict[str, FeedCursor] = {}
    for name, position, stored in rows:
        try:
            if shards == 1:
                out[str(name)] = FeedCursor((int(position or 0),))
            else:
                out[str(name)] = (
                    FeedCursor.start(shards) if stored is None else as_cursor(str(stored), shards)
                )
        except InvalidArgument:  # (another store's cursor: not one to judge here)
            continue
    return out
